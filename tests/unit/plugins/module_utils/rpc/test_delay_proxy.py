# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The delaying TCP proxy, as a real process on loopback in front of a real echo server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _delay_proxy as dp
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc


def test_parse_route():
    assert dp.parse_route("6001=10.0.0.2:50052") == (6001, "10.0.0.2", 50052)
    with pytest.raises(ValueError, match="LISTEN_PORT=HOST:PORT"):
        dp.parse_route("6001")


def test_delay_line_keeps_order_and_timing():
    line = dp.DelayLine(0.5)
    line.push(b"a", 10.0)
    line.push(b"b", 10.2)
    assert line.pop_due(10.4) == (b"", pytest.approx(0.1))
    assert line.pop_due(10.6) == (b"a", pytest.approx(0.1))
    assert line.pop_due(11.0) == (b"b", None)


def _echo_server(delay=0.0):
    """An echo server on loopback; ``delay`` seconds slept before each echo (a reference for the proxy's delay)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def echo(conn):
        with conn:
            while data := conn.recv(65536):
                if delay:
                    time.sleep(delay)
                conn.sendall(data)

    def serve():
        while True:  # a thread per connection: the test and the proxy are connected at once
            conn, _addr = server.accept()
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _reporting_proxy(flag, port, target, script=dp.__file__, **popen):
    """The proxy as a process with ``flag`` (``--report`` or ``--rpc-stats``), no delay, one route to ``target``;
    yields it once it printed ``listening`` (an event, not a wait: the listener is up then), stops it after."""
    proc = subprocess.Popen(
        [sys.executable, script, "--delay-ms", "0", flag, f"{port}=127.0.0.1:{target}"],
        stdout=subprocess.PIPE,
        text=True,
        **popen,
    )
    try:
        assert proc.stdout.readline() == "listening\n"
        yield proc
    finally:
        proc.terminate()
        proc.wait(5)


def _wait_listening(proc, port, seconds=60):
    """Until the proxy process accepts connections (its start-up takes what the machine's load makes it)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return
        except OSError:
            assert proc.poll() is None, f"the proxy exited with {proc.returncode}"
            assert time.monotonic() < deadline, f"the proxy did not listen within {seconds} s"
            time.sleep(0.1)


def _round_trips(ports, rounds=10, payload=b"x" * 100):
    """Port -> the fastest of ``rounds`` round trips through it. The ports take turns, round by round, so that the
    machine's load falls on all of them alike; load only ever adds time, so the minimum is the figure it spoils
    least."""
    conns = {port: socket.create_connection(("127.0.0.1", port), timeout=30) for port in ports}
    times = {port: [] for port in ports}
    try:
        for conn in conns.values():
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _round in range(rounds):
            for port, conn in conns.items():
                start = time.monotonic()
                conn.sendall(payload)
                got = b""
                while len(got) < len(payload):
                    got += conn.recv(65536)
                times[port].append(time.monotonic() - start)
                assert got == payload
    finally:
        for conn in conns.values():
            conn.close()
    return {port: min(values) for port, values in times.items()}


@pytest.mark.parametrize("delay_ms", [20, 60])
def test_proxy_adds_twice_the_delay_per_round_trip(delay_ms):
    delay = delay_ms / 1000
    echo = _echo_server()
    # The yardstick: an echo server that sleeps the same 2 x delay before it answers, timed side by side.
    reference = _echo_server(2 * delay)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, dp.__file__, "--delay-ms", str(delay_ms), f"{port}={'127.0.0.1'}:{echo}"],
    )
    try:
        _wait_listening(proc, port)
        fastest = _round_trips([echo, reference, port])
        added = fastest[port] - fastest[echo]
        slept = fastest[reference] - fastest[echo]
        # The delay cannot be skipped: a strict lower bound, true however loaded the machine is.
        assert added >= 2 * delay * 0.95, fastest
        # And no more than the delay: the proxy adds about what a plain sleep of 2 x delay adds, measured in the same
        # rounds under the same load (a ratio, not a time). Twice the delay per direction would give 2, a delay per
        # chunk or a unit slip more. The exact timing is DelayLine's, proven above on a fake clock.
        assert added < 1.5 * slept, fastest
    finally:
        proc.terminate()
        proc.wait(5)


def test_large_request_response_exchanges_do_not_stall():
    """Megabyte messages back and forth (a model load): chunks read while a pump drains must not be forgotten."""
    echo = _echo_server()
    port = _free_port()
    proc = subprocess.Popen([sys.executable, dp.__file__, "--delay-ms", "2", f"{port}=127.0.0.1:{echo}"])
    try:
        _wait_listening(proc, port)
        payload = bytes(range(256)) * 4096
        with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
            for _i in range(5):
                sender = threading.Thread(target=conn.sendall, args=(payload,))
                sender.start()
                got = bytearray()
                while len(got) < len(payload):
                    got += conn.recv(1 << 20)
                sender.join()
                assert bytes(got) == payload
                conn.sendall(b"ping")
                assert conn.recv(16) == b"ping"
    finally:
        proc.terminate()
        proc.wait(5)


def test_report_counts_the_bytes_of_each_connection_in_each_direction():
    """``--report``: a line when listening, one per connection opened, and its byte counts once both sides ended."""
    echo = _echo_server()
    port = _free_port()
    with _reporting_proxy("--report", port, echo) as proc:
        for size in (1, 300_000):
            with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
                conn.sendall(b"y" * size)
                got = 0
                while got < size:  # the echo back, then a close (the proxy does not pass on a half-close)
                    got += len(conn.recv(65536))
        lines = [proc.stdout.readline().strip() for _i in range(4)]
        # The proxy may see connection 2 open before it has finished closing connection 1.
        assert sorted(lines) == [
            "closed 1: 1 bytes to target, 1 bytes back",
            "closed 2: 300000 bytes to target, 300000 bytes back",
            "open 1",
            "open 2",
        ]


def _one_shot_worker(expect, answer):
    """A stand-in RPC worker: reads ``expect`` bytes (what the client sent), then writes ``answer`` in three pieces
    and keeps the connection until the client closes. Returns its port and the bytes it got."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    got = bytearray()

    def serve():
        conn, _addr = server.accept()
        with conn:
            while len(got) < expect:
                got.extend(conn.recv(65536))
            third = len(answer) // 3
            for piece in (answer[:third], answer[third : 2 * third], answer[2 * third :]):
                conn.sendall(piece)
            while conn.recv(65536):
                pass

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], got


def _rpc_line(proc, word):
    """The JSON of the next ``word`` line (``rpc`` or ``rpc-snapshot``), skipping the other report lines."""
    while True:
        line = proc.stdout.readline()
        assert line, "the proxy ended"
        head, _sep, rest = line.partition(" ")
        if head == word:
            return json.loads(rest)


def test_rpc_stats_counts_requests_and_replies_and_forwards_byte_exact():
    """``--rpc-stats``: a client's RPC requests cross byte for byte, sent in odd chunks (headers cut in two); the
    replies come back byte for byte; a snapshot on SIGUSR1 and the line at close count each command."""
    cmd = {name: number for number, name in rpc.COMMAND_NAMES.items()}
    up = (
        rpc.encode_hello()
        + rpc.encode_device_count()
        + rpc.encode_request(cmd["SET_TENSOR"], bytes(range(256)) * 300)
        + rpc.encode_request(cmd["GRAPH_RECOMPUTE"], b"\0" * 4)
        + rpc.encode_request(cmd["GET_TENSOR"], b"\1" * 312)
    )
    hello, count, tensor = bytes(28), b"\1\0\0\0", b"z" * 4096
    down = b"".join(struct.pack("<Q", len(payload)) + payload for payload in (hello, count, tensor))
    worker, got = _one_shot_worker(len(up), down)
    port = _free_port()
    with _reporting_proxy("--rpc-stats", port, worker) as proc:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
            for start in range(0, len(up), 5):  # 5-byte pieces: every header is cut somewhere
                conn.sendall(up[start : start + 5])
            back = bytearray()
            while len(back) < len(down):
                back.extend(conn.recv(65536))
            assert bytes(back) == down
            # Every reply has reached the client, so the proxy has seen every byte both ways: the snapshot is whole.
            proc.send_signal(signal.SIGUSR1)
            snapshot = _rpc_line(proc, "rpc-snapshot")
        closed = _rpc_line(proc, "rpc")
        assert bytes(got) == up
        assert snapshot["seq"] == 1 and len(snapshot["connections"]) == 1
        live = snapshot["connections"][0]
        assert live["open"] is True and closed["open"] is False
        for record in (live, closed):
            assert record["listen_port"] == port and record["connection"] == 1
            assert record["note"] is None and record["parsing"] is True
            assert (record["bytes_to_worker"], record["bytes_from_worker"]) == (len(up), len(down))
            got_counts = {n: (s["requests"], s["responses"], s["rtt_count"]) for n, s in record["commands"].items()}
            assert got_counts == {
                "HELLO": (1, 1, 1),
                "DEVICE_COUNT": (1, 1, 1),
                "SET_TENSOR": (1, 0, 0),
                "GRAPH_RECOMPUTE": (1, 0, 0),
                "GET_TENSOR": (1, 1, 1),
            }
            assert record["commands"]["SET_TENSOR"]["request_bytes"] == 9 + 256 * 300
            assert record["commands"]["GET_TENSOR"]["response_bytes"] == 8 + 4096


def test_rpc_stats_on_a_stream_that_is_not_rpc_still_forwards_it_whole():
    echo = _echo_server()
    port = _free_port()
    with _reporting_proxy("--rpc-stats", port, echo) as proc:
        payload = b"y" * 300_000
        with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
            conn.sendall(payload)
            back = bytearray()
            while len(back) < len(payload):
                back.extend(conn.recv(65536))
            assert bytes(back) == payload
        record = _rpc_line(proc, "rpc")
        assert record["parsing"] is False and "unknown command byte 121" in record["note"]
        assert (record["bytes_to_worker"], record["bytes_from_worker"]) == (300_000, 300_000)
        assert record["commands"] == {}


def test_the_benchmark_writes_a_proxy_that_runs_on_its_own(tmp_path):
    """On a host the proxy is a script in a state directory, without the collection: ``write_proxy`` puts the modules
    it imports beside it. Run with no collection on the path, it imports them from there and counts."""
    from ansible_collections.llamarpc.cluster.plugins.module_utils.bench import _bench_run  # noqa: PLC0415

    script = _bench_run.write_proxy(str(tmp_path / "state"))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    check = [sys.executable, "-c", "import ansible_collections"]
    assert subprocess.run(check, env=env, cwd=tmp_path, capture_output=True, check=False).returncode != 0
    echo = _echo_server()
    port = _free_port()
    with _reporting_proxy("--rpc-stats", port, echo, script=script, env=env, cwd=tmp_path) as proc:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
            conn.sendall(rpc.encode_hello())
            assert len(conn.recv(65536)) > 0
        record = _rpc_line(proc, "rpc")
        assert record["commands"]["HELLO"]["requests"] == 1


def test_delay_line_tallies_how_long_each_chunk_was_really_held():
    """A chunk written late (the proxy woken late) counts as held longer than the delay asked: the round trip the
    benchmark's performance model takes is twice the mean hold, not twice the delay."""
    tally = dp.HoldTally(0.5, cpu=lambda: 2.5)
    line = dp.DelayLine(0.5, tally)
    line.push(b"a", 10.0)
    line.push(b"b", 10.1)
    assert line.pop_due(10.4) == (b"", pytest.approx(0.1))
    assert (tally.chunks, tally.held_seconds) == (0, 0)
    assert line.pop_due(10.8) == (b"ab", None)  # both written at 10.8: held 0.8 and 0.7
    assert tally.chunks == 2
    assert tally.held_seconds == pytest.approx(1.5)
    assert tally.as_dict() == {
        "delay_s": 0.5,
        "chunks": 2,
        "held_seconds": pytest.approx(1.5),
        "bytes": 2,
        "cpu_s": 2.5,
    }


def test_the_hold_file_counts_what_crossed_the_proxy(tmp_path):
    """--hold-file: after an echo through the proxy (one chunk each way), the file counts both chunks, each held at
    least the delay asked. Waits for the file's content (an event), with no clock in the assertion."""
    echo = _echo_server()
    port = _free_port()
    hold = tmp_path / "hold.json"
    proc = subprocess.Popen(
        [sys.executable, dp.__file__, "--delay-ms", "30", "--hold-file", str(hold), f"{port}=127.0.0.1:{echo}"]
    )
    try:
        _wait_listening(proc, port)
        _round_trips([port], rounds=1)
        deadline = time.monotonic() + 600
        while True:
            tally = json.loads(hold.read_text()) if hold.exists() else {"chunks": 0}
            if tally["chunks"] >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(5)
    assert tally["chunks"] == 2 and tally["delay_s"] == 0.03 and tally["bytes"] > 0 and tally["cpu_s"] > 0
    assert tally["held_seconds"] >= 2 * 0.03
    assert not (tmp_path / "hold.json.tmp").exists()
