# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""Link measurements on loopback: a file over one real TCP connection, a file read, the memory copy figure."""

from __future__ import annotations

import hashlib
import socket
import threading
import time

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.bench import _link


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def payload(tmp_path):
    data = hashlib.sha256(b"seed").digest() * 40000  # 1.28 MB, not a multiple of the 1 MiB block
    path = tmp_path / "shard.gguf"
    path.write_bytes(data)
    return path, data


def serve_in_thread(path, port, **kwargs):
    outcome = {}
    listening = threading.Event()

    def run():
        try:
            outcome["result"] = _link.serve_file(str(path), port, bind="127.0.0.1", ready=listening.set, **kwargs)
        except _link.LinkError as exc:
            outcome["error"] = str(exc)
            listening.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome, listening


def test_a_file_crosses_one_tcp_connection_whole(payload):
    path, data = payload
    port = free_port()
    thread, outcome, _listening = serve_in_thread(path, port, timeout=10)
    got = _link.read_stream("127.0.0.1", port, timeout=10)  # connects before or after the server listens
    thread.join(10)
    assert got["bytes"] == len(data) == outcome["result"]["bytes"]
    assert outcome["result"]["peer"] == "127.0.0.1" and outcome["result"]["mb_per_s"] > 0
    assert got["mb_per_s"] > 0 and got["seconds"] > 0


def test_a_slow_reader_gets_every_byte(tmp_path):
    """A reader slower than the sender fills the send buffer (a capped link): the sender waits, it does not fail."""
    path = tmp_path / "big.gguf"
    path.write_bytes(b"\x5a" * 16_000_000)
    port = free_port()
    thread, outcome, listening = serve_in_thread(path, port, timeout=30)
    assert listening.wait(30)
    received = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        time.sleep(1)  # both socket buffers fill up meanwhile (a few MB on loopback)
        while chunk := conn.recv(1 << 20):
            received += len(chunk)
    thread.join(30)
    assert "error" not in outcome, outcome
    assert received == outcome["result"]["bytes"] == 16_000_000


def test_a_reader_not_allowed_is_disconnected_and_the_server_times_out(payload):
    path = payload[0]
    port = free_port()
    thread, outcome, listening = serve_in_thread(path, port, timeout=1.5, allowed={"10.9.9.9"})
    assert listening.wait(30)
    got = _link.read_stream("127.0.0.1", port, timeout=5)
    thread.join(10)
    assert got["bytes"] == 0
    assert "no reader connected" in outcome["error"]


def test_nothing_listening_is_a_clear_error():
    ticks = iter(range(100))
    with pytest.raises(_link.LinkError, match="refused every connection for 3 s"):
        _link.read_stream("127.0.0.1", free_port(), timeout=3, clock=lambda: next(ticks), sleep=lambda _: None)


def test_read_file_counts_every_byte_and_honours_the_limit(payload):
    path, data = payload
    assert _link.read_file(str(path))["bytes"] == len(data)
    assert _link.read_file(str(path), limit=1 << 20)["bytes"] == 1 << 20


def test_rate_and_memory_bandwidth():
    assert _link.rate(10_000_000, 2.0) == 5.0
    assert _link.rate(1, 0) is None
    result = _link.memory_bandwidth(size_mb=4, rounds=2)
    assert result["bytes"] == 8_000_000 and result["mb_per_s"] > 0


def test_zeros_cross_the_link_without_a_file_and_the_cache_can_be_dropped(payload):
    port = free_port()
    outcome = {}
    thread = threading.Thread(
        target=lambda: outcome.update(_link.serve_zeros(3_000_000, port, "127.0.0.1", timeout=10)), daemon=True
    )
    thread.start()
    got = _link.read_stream("127.0.0.1", port, timeout=10)
    thread.join(10)
    assert got["bytes"] == outcome["bytes"] == 3_000_000
    path, data = payload
    assert _link.read_file(str(path), drop_cache=True)["bytes"] == len(data)
