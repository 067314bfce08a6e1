# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ggml RPC client: codec, endpoint parsing, and the probe against scripted loopback servers."""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc

# For servers that answer (or close) at once: the deadlines only bound a broken test, and must leave a
# loaded machine time to schedule the server thread (a reply late by 0.5 s would read as "busy").
PROMPT = {"timeout": 5.0, "connect_timeout": 5.0}


def reply(payload):
    return struct.pack("<Q", len(payload)) + payload


def hello_payload(major, minor=0, patch=0):
    return bytes([major, minor, patch, 0]) + b"\0" * 24


# ---------------------------------------------------------------------------------------------------
# Constants against ggml-rpc.cpp / ggml-rpc.h (protocol 7.0.0)


def test_command_numbers_match_enum_rpc_cmd():
    # enum rpc_cmd: ALLOC_BUFFER=0, GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, FREE_BUFFER, BUFFER_CLEAR,
    # SET_TENSOR, SET_TENSOR_HASH, GET_TENSOR, COPY_TENSOR, GRAPH_COMPUTE, GET_DEVICE_MEMORY, INIT_TENSOR,
    # GET_ALLOC_SIZE, HELLO, DEVICE_COUNT, ...
    assert rpc.CMD_GET_ALIGNMENT == 1
    assert rpc.CMD_GET_MAX_SIZE == 2
    assert rpc.CMD_GET_DEVICE_MEMORY == 11
    assert rpc.CMD_HELLO == 14
    assert rpc.CMD_DEVICE_COUNT == 15


def test_struct_sizes_match_packed_structs():
    assert rpc.REQUEST_HEADER.size == 9
    assert rpc.REPLY_HEADER.size == 8
    assert rpc.HELLO_REQUEST_SIZE == 24
    assert rpc.HELLO_REPLY.size == 28
    assert rpc.LEGACY_HELLO_REPLY.size == 3
    assert rpc.DEVICE_REQUEST.size == 4
    assert rpc.DEVICE_COUNT_REPLY.size == 4
    assert rpc.DEVICE_MEMORY_REPLY.size == 16
    assert rpc.U64_REPLY.size == 8
    assert rpc.MAX_REPLY_SIZE == 28


# ---------------------------------------------------------------------------------------------------
# Encoders


def test_encode_hello_is_cmd_size_and_24_zero_caps():
    data = rpc.encode_hello()
    assert len(data) == 1 + 8 + 24
    assert data == b"\x0e" + (24).to_bytes(8, "little") + b"\0" * 24


def test_encode_legacy_hello_is_empty():
    assert rpc.encode_legacy_hello() == b"\x0e" + b"\0" * 8


def test_encode_device_count_is_empty():
    assert rpc.encode_device_count() == b"\x0f" + b"\0" * 8


@pytest.mark.parametrize("cmd", [rpc.CMD_GET_DEVICE_MEMORY, rpc.CMD_GET_ALIGNMENT, rpc.CMD_GET_MAX_SIZE])
def test_encode_device_query_carries_u32_device(cmd):
    data = rpc.encode_device_query(cmd, 3)
    assert len(data) == 13
    assert data == bytes([cmd]) + (4).to_bytes(8, "little") + (3).to_bytes(4, "little")


@pytest.mark.parametrize("cmd", [rpc.CMD_GET_DEVICE_MEMORY, rpc.CMD_GET_ALIGNMENT, rpc.CMD_GET_MAX_SIZE])
def test_encode_device_query_single_device_protocol_is_empty(cmd):
    assert rpc.encode_device_query(cmd, 0, multi_device=False) == bytes([cmd]) + b"\0" * 8


def test_encoders_refuse_out_of_range_values():
    with pytest.raises(ValueError, match="u8"):
        rpc.encode_request(256)
    with pytest.raises(ValueError, match="u32"):
        rpc.encode_device_query(rpc.CMD_GET_ALIGNMENT, 1 << 32)
    with pytest.raises(ValueError, match="device 0"):
        rpc.encode_device_query(rpc.CMD_GET_ALIGNMENT, 1, multi_device=False)
    with pytest.raises(ValueError, match="not a device query"):
        rpc.encode_device_query(rpc.CMD_HELLO, 0)
    with pytest.raises(ValueError, match="24 bytes"):
        rpc.encode_hello(b"\0" * 23)


@given(cmd=st.integers(0, 255), payload=st.binary(max_size=64))
def test_request_header_round_trip(cmd, payload):
    frame = rpc.encode_request(cmd, payload)
    assert rpc.decode_request_header(frame[:9]) == (cmd, len(payload))
    assert frame[9:] == payload


@given(device=st.integers(0, 0xFFFFFFFF))
def test_device_query_round_trip(device):
    frame = rpc.encode_device_query(rpc.CMD_GET_DEVICE_MEMORY, device)
    cmd, size = rpc.decode_request_header(frame[:9])
    assert (cmd, size) == (11, 4)
    assert struct.unpack("<I", frame[9:]) == (device,)


# ---------------------------------------------------------------------------------------------------
# Decoders


def test_decode_hello_v7():
    hello = rpc.decode_hello(bytes([7, 0, 0, 0]) + b"\x01" * 24)
    assert (hello.major, hello.minor, hello.patch, hello.form) == (7, 0, 0, "conn_caps")
    assert hello.version == "7.0.0"
    assert hello.conn_caps == b"\x01" * 24


def test_decode_hello_legacy():
    hello = rpc.decode_hello(bytes([3, 6, 1]))
    assert (hello.version, hello.form) == ("3.6.1", "legacy")


@pytest.mark.parametrize("size", [0, 2, 4, 27, 29, 100])
def test_decode_hello_refuses_other_sizes(size):
    with pytest.raises(rpc.RpcProtocolError, match="HELLO reply is"):
        rpc.decode_hello(b"\0" * size)


def test_decode_device_count():
    assert rpc.decode_device_count(struct.pack("<I", 2)) == 2
    with pytest.raises(rpc.RpcProtocolError, match="expected 4"):
        rpc.decode_device_count(b"\0" * 8)
    with pytest.raises(rpc.RpcProtocolError, match="plausible"):
        rpc.decode_device_count(struct.pack("<I", 0xFFFFFFFF))


def test_decode_device_memory():
    assert rpc.decode_device_memory(struct.pack("<QQ", 5, 9)) == (5, 9)
    with pytest.raises(rpc.RpcProtocolError, match="expected 16"):
        rpc.decode_device_memory(b"\0" * 15)


def test_decode_alignment_and_max_size():
    assert rpc.decode_alignment(struct.pack("<Q", 64)) == 64
    assert rpc.decode_max_size(struct.pack("<Q", (1 << 64) - 1)) == (1 << 64) - 1
    for bad in (0, 3, 96):
        with pytest.raises(rpc.RpcProtocolError, match="power of two"):
            rpc.decode_alignment(struct.pack("<Q", bad))
    with pytest.raises(rpc.RpcProtocolError, match="expected 8"):
        rpc.decode_max_size(b"\0" * 4)


def test_decode_reply_size_demands_exact_size():
    assert rpc.decode_reply_size(struct.pack("<Q", 28), 28) == 28
    with pytest.raises(rpc.RpcProtocolError, match="declares 29 bytes, expected exactly 28"):
        rpc.decode_reply_size(struct.pack("<Q", 29), 28)
    with pytest.raises(rpc.RpcProtocolError, match="declares 18446744073709551615"):
        rpc.decode_reply_size(b"\xff" * 8, 28)
    with pytest.raises(rpc.RpcProtocolError, match="header is 7 bytes"):
        rpc.decode_reply_size(b"\0" * 7, 0)


def test_decode_reply_frame():
    assert rpc.decode_reply(reply(b"abcd"), 4) == b"abcd"
    with pytest.raises(rpc.RpcProtocolError, match="shorter than"):
        rpc.decode_reply(b"\0" * 3, 4)
    with pytest.raises(rpc.RpcProtocolError, match="payload is 3 bytes"):
        rpc.decode_reply(reply(b"abcd")[:-1], 4)
    with pytest.raises(rpc.RpcProtocolError, match="payload is 5 bytes"):
        rpc.decode_reply(reply(b"abcd") + b"x", 4)


DECODERS = [
    rpc.decode_hello,
    rpc.decode_device_count,
    rpc.decode_device_memory,
    rpc.decode_alignment,
    rpc.decode_max_size,
    rpc.decode_request_header,
    lambda data: rpc.decode_reply_size(data, 28),
    lambda data: rpc.decode_reply(data, 28),
    lambda data: rpc.decode_reply(data, 4),
]


@pytest.mark.parametrize("decoder", DECODERS)
@given(data=st.binary(max_size=80))
def test_decoders_raise_only_protocol_errors(decoder, data):
    with contextlib.suppress(rpc.RpcProtocolError):
        decoder(data)


@given(data=st.binary(min_size=28, max_size=28))
def test_any_28_bytes_decode_as_hello(data):
    hello = rpc.decode_hello(data)
    assert hello.version == f"{data[0]}.{data[1]}.{data[2]}"


# ---------------------------------------------------------------------------------------------------
# Endpoints


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.1:50052", ("10.0.0.1", 50052)),
        ("node2:1234", ("node2", 1234)),
        ("node2", ("node2", 50052)),
        (" node2 ", ("node2", 50052)),
        ("[::1]:5000", ("::1", 5000)),
        ("[fd00::12]", ("fd00::12", 50052)),
        ("fd00::12", ("fd00::12", 50052)),
        ("::1", ("::1", 50052)),
    ],
)
def test_parse_endpoint(text, expected):
    assert rpc.parse_endpoint(text) == expected


def test_parse_endpoint_default_port():
    assert rpc.parse_endpoint("h", default_port=7) == ("h", 7)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty endpoint"),
        ("h:0", "out of range"),
        ("h:65536", "out of range"),
        ("h:abc", "not a number"),
        ("h:", "not a number"),
        (":50052", "empty host"),
        ("[::1", "unbalanced"),
        ("[]:1", "unbalanced"),
        ("[::1]x", "expected ':port'"),
        ("a]:1", "brackets"),
        ("a b:1", "white space"),
        ("h:\u0661\u0662", "not a number"),
    ],
)
def test_parse_endpoint_errors(text, match):
    with pytest.raises(ValueError, match=match):
        rpc.parse_endpoint(text)


@given(st.text(max_size=40))
def test_parse_endpoint_raises_only_value_error(text):
    try:
        host, port = rpc.parse_endpoint(text)
    except ValueError:
        return
    assert host
    assert 1 <= port <= 65535


def test_format_endpoint():
    assert rpc.format_endpoint("10.0.0.1", 1) == "10.0.0.1:1"
    assert rpc.format_endpoint("::1", 2) == "[::1]:2"


# ---------------------------------------------------------------------------------------------------
# Probe against scripted servers


def test_probe_v7_worker_ready(rpc_server):
    devices = ((1 << 30, 2 << 30, 64, 1 << 33), (5 << 30, 24 << 30, 128, (1 << 64) - 1))
    server = rpc_server(major=7, devices=devices)
    result = rpc.probe(server.host, server.port, **PROMPT)
    assert result.state == "ready", result.error
    facts = result.as_dict()
    assert facts["protocol"] == "7.0.0"
    assert (facts["major"], facts["minor"], facts["patch"]) == (7, 0, 0)
    assert facts["hello_form"] == "conn_caps"
    assert facts["device_count"] == 2
    assert facts["devices"] == [
        {"index": 0, "free": 1 << 30, "total": 2 << 30, "alignment": 64, "max_size": 1 << 33},
        {"index": 1, "free": 5 << 30, "total": 24 << 30, "alignment": 128, "max_size": (1 << 64) - 1},
    ]
    assert facts["error"] is None
    assert facts["connect_rtt_ms"] >= 0
    assert facts["endpoint"] == f"127.0.0.1:{server.port}"
    assert server.connections == 1
    assert server.commands == [14, 15, 11, 1, 2, 11, 1, 2]
    assert server.payloads[0] == b"\0" * 24
    assert server.payloads[2:5] == [b"\0\0\0\0"] * 3
    assert server.payloads[5:8] == [b"\1\0\0\0"] * 3


def test_probe_closes_abortively(rpc_server):
    """The worker side sees a reset, never an orderly FIN: no SIGPIPE when it writes later."""
    server = rpc_server()
    assert rpc.probe(server.host, server.port, **PROMPT).state == "ready"
    server.wait_handled()
    assert server.peer_close == ["rst"]


def test_a_handler_that_raises_is_recorded_for_the_fixture_to_fail_the_test(rpc_server):
    """The server side may not swallow a failure: the exception is kept, and rpc_server's teardown fails the test on
    it (server_problems). Here it is expected, so the test takes it off the list once seen."""

    def broken(server, conn):
        server.recv_request(conn)
        raise AssertionError("a request the probe must never send")

    server = rpc_server(broken)
    rpc.probe(server.host, server.port, **PROMPT)
    server.wait_handled(2)  # HELLO, then (the connection closed) the legacy HELLO on a second connection
    assert server.errors == ["AssertionError('a request the probe must never send')"] * 2
    server.errors.clear()


def test_open_socket_sets_linger_zero():
    sock = rpc.open_socket(socket.AF_INET)
    try:
        onoff, linger = struct.unpack("ii", sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8))
        assert (onoff, linger) == (1, 0)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        sock.close()


def test_probe_ipv6_loopback(rpc_server):
    server = rpc_server(family=socket.AF_INET6)
    result = rpc.probe("::1", server.port, **PROMPT)
    assert result.state == "ready", result.error
    assert result.as_dict()["endpoint"] == f"[::1]:{server.port}"


def test_probe_protocol_3_server_answers_empty_hello(rpc_server):
    """A 3.x server closes on the 24-byte HELLO; the probe reconnects with the empty form."""
    server = rpc_server(major=3, minor=6, patch=1)
    result = rpc.probe(server.host, server.port, **PROMPT)
    assert result.state == "ready", result.error
    facts = result.as_dict()
    assert (facts["protocol"], facts["hello_form"], facts["device_count"]) == ("3.6.1", "legacy", 1)
    assert server.connections == 2
    assert server.commands == [14, 14, 15, 11, 1, 2]
    assert server.payloads[:2] == [b"\0" * 24, b""]


def test_probe_protocol_2_single_device_uses_empty_queries(rpc_server):
    server = rpc_server(major=2, devices=((3, 4, 32, 99),))
    result = rpc.probe(server.host, server.port, **PROMPT)
    assert result.state == "ready", result.error
    assert result.as_dict()["devices"] == [{"index": 0, "free": 3, "total": 4, "alignment": 32, "max_size": 99}]
    assert server.commands == [14, 14, 11, 1, 2]
    assert server.payloads[2:] == [b"", b"", b""]


def _close_on_everything(server, conn):
    server.recv_request(conn)


def test_probe_pre_hello_server_is_incompatible(rpc_server):
    server = rpc_server(_close_on_everything)
    result = rpc.probe(server.host, server.port, **PROMPT)
    assert result.state == "incompatible"
    assert "both HELLO forms" in result.error
    assert server.connections == 2


def test_probe_unknown_major_is_incompatible_and_reports_version(rpc_server):
    server = rpc_server(major=8, minor=1, patch=2)
    result = rpc.probe(server.host, server.port, **PROMPT)
    assert result.state == "incompatible"
    assert result.as_dict()["protocol"] == "8.1.2"
    assert "majors 1 to 7" in result.error
    assert server.commands == [14]  # nothing sent after HELLO


def _scripted(*replies, hold=False):
    """A server that answers each request with the next raw bytes, then closes (or holds) the connection."""

    def handler(server, conn):
        for data in replies:
            if server.recv_request(conn) is None:
                return
            conn.sendall(data)
        if hold:
            server.drain(conn, timeout=60)  # until the probe goes, however late that is

    return handler


V7_HELLO = reply(hello_payload(7))


@pytest.mark.parametrize(
    ("replies", "message"),
    [
        pytest.param(
            (reply(hello_payload(7))[:20],), "short reply to HELLO: connection closed after 20 of 36", id="short"
        ),
        pytest.param((b"\x03\0\0",), "short reply to HELLO: connection closed after 3 of 36", id="short-header"),
        pytest.param((struct.pack("<Q", 1 << 62) + b"x" * 40,), "declares 4611686018427387904 bytes", id="oversized"),
        pytest.param((struct.pack("<Q", 3) + b"\7\0\0",), "declares 3 bytes, expected exactly 28", id="legacy-size"),
        pytest.param((b"HTTP/1.1 400 Bad Request\r\n\r\n" + b"x" * 40,), "HELLO: reply declares", id="garbage"),
        pytest.param((reply(hello_payload(2)),), "predates that reply form", id="old-major-new-form"),
        pytest.param((V7_HELLO, reply(b"\0" * 8)), "DEVICE_COUNT: reply declares 8 bytes", id="count-size"),
        pytest.param(
            (V7_HELLO, reply(struct.pack("<I", 1 << 20))),
            "DEVICE_COUNT: DEVICE_COUNT says 1048576 devices",
            id="count-huge",
        ),
        pytest.param(
            (V7_HELLO, reply(struct.pack("<I", 1))), "closed the connection in reply to GET_DEVICE_MEMORY", id="eof"
        ),
        pytest.param(
            (V7_HELLO, reply(struct.pack("<I", 1)), reply(struct.pack("<QQ", 1, 2)), reply(struct.pack("<Q", 0))),
            "GET_ALIGNMENT (device 0): GET_ALIGNMENT says 0, not a power of two",
            id="alignment-zero",
        ),
        pytest.param(
            (
                V7_HELLO,
                reply(struct.pack("<I", 1)),
                reply(struct.pack("<QQ", 1, 2)),
                reply(struct.pack("<Q", 64)),
                reply(struct.pack("<Q", 1)) + b"trailing",
            ),
            "beyond the replies",
            id="trailing-bytes",
        ),
    ],
)
def test_probe_malformed_replies(rpc_server, replies, message):
    server = rpc_server(_scripted(*replies))
    result = rpc.probe(server.host, server.port, **PROMPT)
    assert result.state == "malformed"
    assert message in result.error
    assert result.devices == []


def test_probe_stalled_reply_is_malformed_not_busy(rpc_server):
    # The 12 bytes must arrive within the deadline: 2 s leaves a loaded machine time to run the server thread.
    server = rpc_server(_scripted(V7_HELLO[:12], hold=True))
    result = rpc.probe(server.host, server.port, timeout=2, connect_timeout=5)
    assert result.state == "malformed"
    assert "incomplete after 2 s (12 of 36 bytes)" in result.error
    # The server holds the connection for 60 s: it saw the probe reset it (not "open", its own give-up), so the
    # probe's deadline, not the server, ended the wait. An order of events, on no clock of the test's.
    server.wait_handled()
    assert server.peer_close == ["rst"]


def test_probe_dribbling_server_cannot_extend_the_deadline(rpc_server):
    """A byte every 0.6 s, well within the 2 s deadline each time: the whole reply would take 21 s."""
    cut = []

    def dribble(server, conn):
        server.recv_request(conn)
        for index, byte in enumerate(V7_HELLO):
            if index:
                time.sleep(0.6)
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                cut.append(index)  # the probe reset the connection: this byte found no reader
                return

    server = rpc_server(dribble)
    result = rpc.probe(server.host, server.port, timeout=2, connect_timeout=5)
    assert result.state == "malformed"
    assert "incomplete after 2 s" in result.error
    # The deadline cut the reply short: the probe went (a reset) while the server was still dribbling it, however
    # slowly a loaded machine ran either side. An order of events, not a time.
    server.wait_handled()
    assert len(cut) == 1 and cut[0] < len(V7_HELLO), cut


def test_probe_silent_accepted_connection_is_busy(rpc_server):
    server = rpc_server(lambda srv, conn: srv.drain(conn, timeout=60))
    started = time.monotonic()
    result = rpc.probe(server.host, server.port, timeout=0.4, connect_timeout=5)
    assert result.state == "busy"
    assert "no HELLO reply within 0.4 s" in result.error
    # Waited out its deadline (a lower bound: a clock cannot run short) ...
    assert time.monotonic() - started > 0.35
    # ... and not the server's 60 s: the server saw the probe's reset before its own wait ended ("open").
    server.wait_handled()
    assert server.peer_close == ["rst"]


def test_probe_held_worker_backlog_is_busy_and_leaves_a_reset_connection(rpc_server):
    """Like a real worker serving a coordinator: the probe waits in the listen backlog, never accepted."""
    server = rpc_server(accept=False)
    result = rpc.probe(server.host, server.port, timeout=0.4, connect_timeout=1)
    assert result.state == "busy"
    assert result.connect_rtt_ms is not None
    # The worker accepts the queued connection later: it finds the HELLO and then a reset, no FIN.
    conn, _addr = server.sock.accept()
    with conn:
        server.drain(conn, timeout=2)
    assert server.peer_close == ["rst"]


def _worker_answers_late(sock, *, after_fin=False):
    """What a worker does with a queued connection once free: read HELLO, write the 8-byte size, then
    the 28-byte body (send_msg), and more writes until one fails (at most 10 s of them).  Returns the
    request and the outcome of each write, up to the first failure.

    ``after_fin``: first wait until the client's FIN has arrived (a peek sees the end of the stream), as it
    has long before a busy worker gets to a queued connection."""
    conn, _addr = sock.accept()
    with conn:
        conn.settimeout(10)
        request = b""
        while len(request) < 33:
            chunk = conn.recv(33 - len(request))
            if not chunk:
                break
            request += chunk
        if after_fin:
            assert conn.recv(1, socket.MSG_PEEK) == b""
        outcomes = []
        deadline = time.monotonic() + 10
        sizes = [8, 28]
        while time.monotonic() < deadline:
            try:
                conn.send(b"\0" * (sizes.pop(0) if sizes else 28))
            except OSError as exc:
                outcomes.append(errno.errorcode[exc.errno])
                break
            outcomes.append("sent")
            time.sleep(0.01)  # room for the reset the peer's kernel answers with
    return request, outcomes


def test_busy_probe_cannot_make_the_worker_write_into_a_broken_pipe(rpc_server):
    """The SIGPIPE trap: after a normal close the worker's second write raises EPIPE (SIGPIPE kills a C++
    worker); after the probe's abortive close its first write fails with ECONNRESET and it gives up."""
    server = rpc_server(accept=False)
    assert rpc.probe(server.host, server.port, timeout=0.3, connect_timeout=5).state == "busy"
    request, outcomes = _worker_answers_late(server.sock)
    assert request == rpc.encode_hello()
    assert outcomes == ["ECONNRESET"]

    naive = socket.create_connection((server.host, server.port))
    naive.sendall(rpc.encode_hello())
    naive.close()  # orderly close: what a probe must not do
    _request, outcomes = _worker_answers_late(server.sock, after_fin=True)
    # The first write succeeds (and draws a reset); a later one, the second unless the machine is loaded, is EPIPE.
    assert outcomes[0] == "sent"
    assert outcomes[-1] == "EPIPE", outcomes


def test_repeated_probes_of_a_held_worker_fill_its_backlog(rpc_server):
    """listen(fd, 1) queues two connections: two busy probes, then the connect itself times out."""
    server = rpc_server(accept=False)
    states = [rpc.probe(server.host, server.port, timeout=0.2, connect_timeout=0.3).state for _attempt in range(3)]
    assert states == ["busy", "busy", "timeout"]


def test_probe_closed_port_is_refused(closed_port):
    result = rpc.probe("127.0.0.1", closed_port, **PROMPT)
    assert result.state == "refused"
    assert "refused" in result.error
    assert result.connect_rtt_ms is None
    assert result.as_dict()["protocol"] is None


def test_probe_full_backlog_times_out_connect(rpc_server, monkeypatch):
    """listen(0) with its queue full: Linux drops the SYN, so the TCP connect itself times out."""
    server = rpc_server(accept=False, backlog=0)
    fillers = []
    for _attempt in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex((server.host, server.port))
        fillers.append(filler)
    # The first filler's handshake completes (it sits in the queue); the others' SYNs are dropped.
    _readable, writable, _errors = select.select([], fillers[:1], [], 10)
    assert writable, "the first filler did not connect"
    ended_by = []
    connect_error = rpc._connect_error

    def record(exc, target):
        ended_by.append(exc.errno)
        return connect_error(exc, target)

    monkeypatch.setattr(rpc, "_connect_error", record)
    result = rpc.probe(server.host, server.port, timeout=0.3, connect_timeout=0.3)
    for filler in fillers:
        filler.close()
    assert result.state == "timeout", result.error
    assert "timed out" in result.error
    # The probe's own connect_timeout ended the connect (Python's socket timeout, no errno), not the kernel giving up
    # after its SYN retries (2 min, ETIMEDOUT): which of the two it was, not how long it took.
    assert ended_by == [None]


def test_probe_unresolvable_name_is_unreachable(monkeypatch):
    def no_such_name(*_args, **_kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(rpc.socket, "getaddrinfo", no_such_name)
    result = rpc.probe("no-such-worker.invalid", 50052, **PROMPT)
    assert result.state == "unreachable"
    assert "cannot resolve no-such-worker.invalid" in result.error


def test_probe_no_route_is_unreachable(monkeypatch):
    def no_route(self, _address):
        raise OSError(errno.EHOSTUNREACH, "No route to host")

    monkeypatch.setattr(rpc.socket.socket, "connect", no_route)
    result = rpc.probe("127.0.0.1", 9, **PROMPT)
    assert result.state == "unreachable"
    assert "No route to host" in result.error


def test_probe_of_many_workers_in_threads(rpc_server):
    servers = [rpc_server(minor=index) for index in range(4)]
    results = {}

    def run(server):
        results[server.port] = rpc.probe(server.host, server.port, **PROMPT)

    threads = [threading.Thread(target=run, args=(server,)) for server in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(result.protocol for result in results.values()) == ["7.0.0", "7.1.0", "7.2.0", "7.3.0"]


# ---------------------------------------------------------------------------------------------------
# Fuzzing the whole probe: whatever a peer sends, the probe returns a state and never raises

_valid_hello_frames = st.builds(
    lambda major, minor, patch: reply(hello_payload(major, minor, patch)),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 255),
)
_frames = st.one_of(
    st.binary(max_size=48),
    st.builds(lambda size, tail: struct.pack("<Q", size) + tail, st.integers(0, (1 << 64) - 1), st.binary(max_size=32)),
    st.builds(reply, st.binary(max_size=32)),
)


class _FuzzScript:
    replies = ()


@pytest.fixture
def fuzz_server(rpc_server):
    script = _FuzzScript()

    def handler(server, conn):
        for data in script.replies:
            if server.recv_request(conn) is None:
                return
            try:
                conn.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                # The probe's deadline passed before this thread got to reply (a loaded machine): it went away.
                server.peer_close.append("rst")
                return

    return rpc_server(handler), script


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.one_of(_valid_hello_frames, _frames), rest=st.lists(_frames, max_size=5))
def test_probe_never_raises_on_arbitrary_replies(fuzz_server, first, rest):
    server, script = fuzz_server
    script.replies = (first, *rest)
    # A short deadline: a reply cut short leaves both sides waiting until it passes (2 s would make this a
    # 20 s test).  The state assertions hold whatever the deadline cut; the server tolerates being left.
    result = rpc.probe(server.host, server.port, timeout=0.2, connect_timeout=5)
    assert result.state in rpc.STATES
    if result.state == "ready":
        assert result.error is None
    else:
        assert result.error
    assert server.errors == []


def test_probe_name_that_cannot_be_encoded_is_unreachable():
    """IDNA refuses a 64-character label before any lookup leaves the machine."""
    result = rpc.probe("x" * 64 + ".invalid", 50052, **PROMPT)
    assert result.state == "unreachable"
    assert "cannot resolve" in result.error
