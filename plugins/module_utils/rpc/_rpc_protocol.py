# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read-only client of the ggml RPC wire protocol spoken by llama.cpp's RPC worker (``ggml-rpc-server``).

Standard library only: this file runs on managed hosts.  It never loads llama.cpp.

Wire format (``ggml/src/ggml-rpc/ggml-rpc.cpp``, ``send_rpc_cmd`` / ``send_msg`` / ``recv_msg``)::

    request  : u8 cmd | u64 size | payload[size]
    response : u64 size | payload[size]

Integers are little-endian, every struct is packed (``#pragma pack(push, 1)``), and both sides demand
exact sizes: the server closes the connection when a request size differs from the struct it expects,
and the real client aborts when a reply size differs.  This client does the same: a reply whose
declared size is not the expected one is *malformed*, and it never reads more than the few bytes it
expects, whatever size a peer declares.

Commands used here (``enum rpc_cmd``; numbers checked against protocol 7.0.0, llama.cpp commit 0c1e570
as vendored by llama-cpp-python 0.3.36, and against the upstream tree):

=====  ==================  ============================  ======================================
 cmd    name                request payload               reply payload
=====  ==================  ============================  ======================================
  1     GET_ALIGNMENT       u32 device (v3+), empty (v1-2)  u64 alignment
  2     GET_MAX_SIZE        u32 device (v3+), empty (v1-2)  u64 max_size
 11     GET_DEVICE_MEMORY   u32 device (v3+), empty (v1-2)  u64 free, u64 total
 14     HELLO               u8 conn_caps[24] (v4+)          u8 major, minor, patch, pad, caps[24]
                            empty (v1-3)                    u8 major, minor, patch
 15     DEVICE_COUNT        empty (v3+)                     u32 device_count
=====  ==================  ============================  ======================================

``RPC_CMD_HELLO == 14`` is a ``static_assert`` upstream ("must be always 14") and has been the first
command of every connection since protocol 1.0.0 (April 2025).  GET_DEVICE_MEMORY was 10 before
SET_TENSOR_HASH was inserted (2025-03-28); every server that answers HELLO already has it at 11.
A server of protocol 1-3 closes the connection on a 24-byte HELLO (it expects an empty one), and a
4+ server closes it on an empty HELLO; a server older than 1.0.0 closes it on any HELLO (unknown
command).  Hence the probe: 24-byte HELLO, and on EOF a new connection with the empty form.

Worker behaviour this probe is built around (``ggml_backend_rpc_start_server``): the worker serves one
client at a time (``listen(fd, 1)``, then a serial ``accept`` loop).  While a coordinator holds it, a
probe's TCP connect completes in the listen backlog but HELLO gets no answer: that is state ``busy``.
The worker writes with ``send(..., 0)``: a probe that closed normally (FIN) before the worker got to it
can make the worker's second ``send`` hit a reset socket and die of SIGPIPE.  Every socket here is
therefore closed abortively (``SO_LINGER`` on, 0 s: the kernel sends RST and discards the connection),
so a worker that later accepts the dead connection fails its first read or write and moves on
(measured on Linux: the worker can still read the queued HELLO, and its first ``send`` then fails with
ECONNRESET instead of succeeding and leaving the second one to raise SIGPIPE).

A dead connection stays in the worker's accept queue until the worker gets to it, and ``listen(fd, 1)``
queues two: while a coordinator holds the worker, the first two probes say ``busy`` and later ones time
out at connect.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
import time
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------------
# Protocol constants (enum rpc_cmd and the packed rpc_msg_* structs of ggml-rpc.cpp)

CMD_GET_ALIGNMENT = 1
CMD_GET_MAX_SIZE = 2
CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15

# Every command of protocol 7.0.0's ``enum rpc_cmd``, in enum order (numbers 0 to 17).  RPC_CMD_NONE (18) is the
# client's internal marker for a synchronisation and never goes on the wire; the server rejects 18 and above
# (``cmd >= RPC_CMD_COUNT``) and closes the connection.  Used by ``_rpc_wire`` to name what crosses a connection.
WIRE_COMMANDS = (
    "ALLOC_BUFFER",
    "GET_ALIGNMENT",
    "GET_MAX_SIZE",
    "BUFFER_GET_BASE",
    "FREE_BUFFER",
    "BUFFER_CLEAR",
    "SET_TENSOR",
    "SET_TENSOR_HASH",
    "GET_TENSOR",
    "COPY_TENSOR",
    "GRAPH_COMPUTE",
    "GET_DEVICE_MEMORY",
    "INIT_TENSOR",
    "GET_ALLOC_SIZE",
    "HELLO",
    "DEVICE_COUNT",
    "GRAPH_RECOMPUTE",
    "MEMSET_TENSOR",
)
COMMAND_NAMES = dict(enumerate(WIRE_COMMANDS))
# The commands the server answers (``send_msg`` in ``rpc_serve_client``: ``u64 size | payload``).  The others
# (FREE_BUFFER, BUFFER_CLEAR, SET_TENSOR, INIT_TENSOR, GRAPH_COMPUTE, GRAPH_RECOMPUTE, MEMSET_TENSOR) get no reply:
# the client sends them and goes on (GRAPH_COMPUTE, GRAPH_RECOMPUTE and the SET_TENSOR of ``set_tensor_async`` are
# queued by the client's dispatcher thread without waiting at all).  Replies come in the order of these requests.
ANSWERED_COMMANDS = frozenset(
    WIRE_COMMANDS.index(name)
    for name in (
        "ALLOC_BUFFER",
        "GET_ALIGNMENT",
        "GET_MAX_SIZE",
        "BUFFER_GET_BASE",
        "SET_TENSOR_HASH",
        "GET_TENSOR",
        "COPY_TENSOR",
        "GET_DEVICE_MEMORY",
        "GET_ALLOC_SIZE",
        "HELLO",
        "DEVICE_COUNT",
    )
)

REQUEST_HEADER = struct.Struct("<BQ")  # u8 cmd | u64 size
REPLY_HEADER = struct.Struct("<Q")  # u64 size
CONN_CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE (transport.h)
HELLO_REQUEST_SIZE = CONN_CAPS_SIZE  # rpc_msg_hello_req {u8 conn_caps[24]}
HELLO_REPLY = struct.Struct(f"<BBBB{CONN_CAPS_SIZE}s")  # rpc_msg_hello_rsp, 28 bytes
LEGACY_HELLO_REPLY = struct.Struct("<BBB")  # protocol 1-3 rpc_msg_hello_rsp, 3 bytes
DEVICE_REQUEST = struct.Struct("<I")  # rpc_msg_get_{alignment,max_size,device_memory}_req {u32 device}
DEVICE_COUNT_REPLY = struct.Struct("<I")  # rpc_msg_device_count_rsp
DEVICE_MEMORY_REPLY = struct.Struct("<QQ")  # rpc_msg_get_device_memory_rsp {u64 free_mem, u64 total_mem}
U64_REPLY = struct.Struct("<Q")  # rpc_msg_get_alignment_rsp / rpc_msg_get_max_size_rsp

# The largest reply this client ever reads.  Declared sizes are compared with the expected size before
# anything else is read, so a peer can never make the probe allocate or wait for more than this.
MAX_REPLY_SIZE = HELLO_REPLY.size
# A worker with more devices than this is not plausible (llama.cpp schedules at most 16 backends).
MAX_DEVICES = 64

CAPS_HELLO_MIN_MAJOR = 4  # first major whose HELLO carries conn_caps (24-byte request, 28-byte reply)
MULTI_DEVICE_MIN_MAJOR = 3  # first major with DEVICE_COUNT and a u32 device in every device query
SUPPORTED_MAJORS = tuple(range(1, 8))  # majors whose layout of the commands above this client knows
CLIENT_PROTOCOL = (7, 0, 0)  # protocol the layouts were verified against

HELLO_FORM_CAPS = "conn_caps"
HELLO_FORM_LEGACY = "legacy"

# ---------------------------------------------------------------------------------------------------
# Probe states

STATE_READY = "ready"
STATE_BUSY = "busy"
STATE_REFUSED = "refused"
STATE_TIMEOUT = "timeout"
STATE_UNREACHABLE = "unreachable"
STATE_INCOMPATIBLE = "incompatible"
STATE_MALFORMED = "malformed"
STATES = (
    STATE_READY,
    STATE_BUSY,
    STATE_REFUSED,
    STATE_TIMEOUT,
    STATE_UNREACHABLE,
    STATE_INCOMPATIBLE,
    STATE_MALFORMED,
)

DEFAULT_PORT = 50052  # rpc-server's default -p

# socket.timeout is TimeoutError from Python 3.10 on; managed hosts with 3.8 or 3.9 raise the former.
_SOCKET_TIMEOUT = (TimeoutError, socket.timeout)

_UNREACHABLE_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENETUNREACH", "EHOSTUNREACH", "EHOSTDOWN", "ENETDOWN", "EADDRNOTAVAIL", "EAFNOSUPPORT")
    if hasattr(errno, name)
)


class RpcProtocolError(Exception):
    """Bytes from a peer that do not form the reply the protocol prescribes."""


# ---------------------------------------------------------------------------------------------------
# Codec: pure functions, no I/O


def encode_request(cmd, payload=b""):
    """Frame one request: ``u8 cmd | u64 len(payload) | payload``."""
    if not 0 <= cmd <= 0xFF:
        raise ValueError(f"command {cmd!r} does not fit in a u8")
    payload = bytes(payload)
    return REQUEST_HEADER.pack(cmd, len(payload)) + payload


def encode_hello(conn_caps=b"\0" * CONN_CAPS_SIZE):
    """HELLO of protocol 4 and later: 24 bytes of connection capabilities (all zero: plain TCP)."""
    if len(conn_caps) != CONN_CAPS_SIZE:
        raise ValueError(f"conn_caps must be {CONN_CAPS_SIZE} bytes")
    return encode_request(CMD_HELLO, conn_caps)


def encode_legacy_hello():
    """HELLO of protocol 1 to 3: empty payload."""
    return encode_request(CMD_HELLO)


def encode_device_count():
    """DEVICE_COUNT (protocol 3 and later): empty payload."""
    return encode_request(CMD_DEVICE_COUNT)


def encode_device_query(cmd, device, multi_device=True):
    """GET_DEVICE_MEMORY / GET_ALIGNMENT / GET_MAX_SIZE for one device.

    Protocol 3 and later send ``u32 device``; protocol 1 and 2 had one device per server and an empty
    payload.
    """
    if cmd not in (CMD_GET_DEVICE_MEMORY, CMD_GET_ALIGNMENT, CMD_GET_MAX_SIZE):
        raise ValueError(f"command {cmd!r} is not a device query")
    if not multi_device:
        if device != 0:
            raise ValueError("protocol 1 and 2 servers have only device 0")
        return encode_request(cmd)
    if not 0 <= device <= 0xFFFFFFFF:
        raise ValueError(f"device {device!r} does not fit in a u32")
    return encode_request(cmd, DEVICE_REQUEST.pack(device))


def decode_request_header(data):
    """Decode ``u8 cmd | u64 size`` (9 bytes) into ``(cmd, size)``."""
    data = bytes(data)
    if len(data) != REQUEST_HEADER.size:
        raise RpcProtocolError(f"request header is {len(data)} bytes, expected {REQUEST_HEADER.size}")
    return REQUEST_HEADER.unpack(data)


def decode_reply_size(header, expected):
    """Check the ``u64 size`` that starts every reply against the size of the command's reply struct."""
    header = bytes(header)
    if len(header) != REPLY_HEADER.size:
        raise RpcProtocolError(f"reply header is {len(header)} bytes, expected {REPLY_HEADER.size}")
    (size,) = REPLY_HEADER.unpack(header)
    if size != expected:
        raise RpcProtocolError(f"reply declares {size} bytes, expected exactly {expected}")
    return size


def decode_reply(frame, expected):
    """Check one whole reply frame (header and payload) and return its payload."""
    frame = bytes(frame)
    if len(frame) < REPLY_HEADER.size:
        raise RpcProtocolError(f"reply is {len(frame)} bytes, shorter than its {REPLY_HEADER.size}-byte header")
    decode_reply_size(frame[: REPLY_HEADER.size], expected)
    payload = frame[REPLY_HEADER.size :]
    if len(payload) != expected:
        raise RpcProtocolError(f"reply payload is {len(payload)} bytes, its header declares {expected}")
    return payload


@dataclass(frozen=True)
class HelloReply:
    """A decoded HELLO reply."""

    major: int
    minor: int
    patch: int
    form: str  # HELLO_FORM_CAPS or HELLO_FORM_LEGACY
    conn_caps: bytes = b""

    @property
    def version(self):
        return f"{self.major}.{self.minor}.{self.patch}"


def decode_hello(payload):
    """Decode a HELLO reply: 28 bytes (protocol 4+) or 3 bytes (protocol 1-3)."""
    payload = bytes(payload)
    if len(payload) == HELLO_REPLY.size:
        major, minor, patch, _padding, caps = HELLO_REPLY.unpack(payload)
        return HelloReply(major, minor, patch, HELLO_FORM_CAPS, caps)
    if len(payload) == LEGACY_HELLO_REPLY.size:
        major, minor, patch = LEGACY_HELLO_REPLY.unpack(payload)
        return HelloReply(major, minor, patch, HELLO_FORM_LEGACY)
    raise RpcProtocolError(
        f"HELLO reply is {len(payload)} bytes, expected {HELLO_REPLY.size} or {LEGACY_HELLO_REPLY.size}",
    )


def _unpack_exact(layout, payload, what):
    payload = bytes(payload)
    if len(payload) != layout.size:
        raise RpcProtocolError(f"{what} reply is {len(payload)} bytes, expected {layout.size}")
    return layout.unpack(payload)


def decode_device_count(payload):
    """Decode a DEVICE_COUNT reply (``u32``); refuses implausible counts."""
    (count,) = _unpack_exact(DEVICE_COUNT_REPLY, payload, "DEVICE_COUNT")
    if count > MAX_DEVICES:
        raise RpcProtocolError(f"DEVICE_COUNT says {count} devices, more than the plausible {MAX_DEVICES}")
    return count


def decode_device_memory(payload):
    """Decode a GET_DEVICE_MEMORY reply into ``(free, total)`` bytes, as the worker states them."""
    return _unpack_exact(DEVICE_MEMORY_REPLY, payload, "GET_DEVICE_MEMORY")


def decode_alignment(payload):
    """Decode a GET_ALIGNMENT reply; ggml needs a power of two."""
    (alignment,) = _unpack_exact(U64_REPLY, payload, "GET_ALIGNMENT")
    if alignment == 0 or alignment & (alignment - 1):
        raise RpcProtocolError(f"GET_ALIGNMENT says {alignment}, not a power of two")
    return alignment


def decode_max_size(payload):
    """Decode a GET_MAX_SIZE reply (largest buffer the device allocates, in bytes)."""
    (max_size,) = _unpack_exact(U64_REPLY, payload, "GET_MAX_SIZE")
    return max_size


# ---------------------------------------------------------------------------------------------------
# Endpoints


def format_endpoint(host, port):
    """``host:port``, with an IPv6 address in brackets."""
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def _parse_port(text, endpoint):
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"endpoint {endpoint!r}: port {text!r} is not a number")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(f"endpoint {endpoint!r}: port {port} is out of range 1-65535")
    return port


def parse_endpoint(endpoint, default_port=DEFAULT_PORT):
    """Split ``host:port``, ``[v6]:port``, ``host``, ``[v6]`` or a bare IPv6 address into ``(host, port)``.

    A bare IPv6 address (two colons or more, no brackets) takes ``default_port``: write ``[addr]:port``
    to give a port.  Raises ValueError with a readable message.
    """
    text = str(endpoint).strip()
    if not text:
        raise ValueError("empty endpoint")
    if any(ch.isspace() for ch in text):
        raise ValueError(f"endpoint {endpoint!r}: contains white space")
    if text.startswith("["):
        close = text.find("]")
        host = text[1:close] if close > 0 else ""
        if not host or "[" in host:
            raise ValueError(f"endpoint {endpoint!r}: unbalanced brackets or empty IPv6 address")
        rest = text[close + 1 :]
        if not rest:
            return host, default_port
        if not rest.startswith(":"):
            raise ValueError(f"endpoint {endpoint!r}: expected ':port' after ']'")
        return host, _parse_port(rest[1:], endpoint)
    if "[" in text or "]" in text:
        raise ValueError(f"endpoint {endpoint!r}: brackets belong around an IPv6 address")
    if text.count(":") >= 2:
        return text, default_port
    host, sep, port = text.partition(":")
    if not host:
        raise ValueError(f"endpoint {endpoint!r}: empty host")
    if not sep:
        return host, default_port
    return host, _parse_port(port, endpoint)


# ---------------------------------------------------------------------------------------------------
# Probe results


@dataclass
class DeviceInfo:
    index: int
    free: int
    total: int
    alignment: int
    max_size: int

    def as_dict(self):
        return {
            "index": self.index,
            "free": self.free,
            "total": self.total,
            "alignment": self.alignment,
            "max_size": self.max_size,
        }


@dataclass
class ProbeResult:
    host: str
    port: int
    state: str = STATE_MALFORMED
    error: str | None = None
    hello: HelloReply | None = None
    device_count: int | None = None
    devices: list = field(default_factory=list)
    connect_rtt_ms: float | None = None

    @property
    def endpoint(self):
        return format_endpoint(self.host, self.port)

    @property
    def protocol(self):
        return self.hello.version if self.hello else None

    def as_dict(self):
        hello = self.hello
        return {
            "endpoint": self.endpoint,
            "host": self.host,
            "port": self.port,
            "state": self.state,
            "protocol": self.protocol,
            "major": hello.major if hello else None,
            "minor": hello.minor if hello else None,
            "patch": hello.patch if hello else None,
            "hello_form": hello.form if hello else None,
            "device_count": self.device_count,
            "devices": [device.as_dict() for device in self.devices],
            "connect_rtt_ms": self.connect_rtt_ms,
            "error": self.error,
        }


class _Verdict(Exception):
    """Ends a probe with a state other than ready."""

    def __init__(self, state, message):
        super().__init__(message)
        self.state = state
        self.message = message


class _NoReply(Exception):
    """The reply did not arrive whole; ``received`` counts the reply bytes (header included) that did."""

    def __init__(self, received):
        super().__init__(received)
        self.received = received


class _PeerClosed(_NoReply):
    """EOF or reset before the reply was complete."""


class _ReplyTimeout(_NoReply):
    """The deadline passed before the reply was complete."""


# ---------------------------------------------------------------------------------------------------
# Transport


def set_abortive_close(sock):
    """SO_LINGER on with a 0 s timeout: close() sends RST and drops the connection at once."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def open_socket(family):
    """A TCP socket that will close abortively, with Nagle off like the llama.cpp client."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        set_abortive_close(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        sock.close()
        raise
    return sock


def _connect_error(exc, target):
    if isinstance(exc, _SOCKET_TIMEOUT):
        return _Verdict(
            STATE_TIMEOUT,
            f"TCP connect to {target} timed out (no route, a firewall dropping packets, or a worker whose "
            "listen backlog is full: a busy worker queues at most two waiting connections)",
        )
    if isinstance(exc, ConnectionRefusedError):
        return _Verdict(STATE_REFUSED, f"connection refused by {target}: no worker listening")
    if isinstance(exc, ConnectionError):
        return _Verdict(STATE_REFUSED, f"connection to {target} reset during connect: {exc}")
    if exc.errno in _UNREACHABLE_ERRNOS:
        return _Verdict(STATE_UNREACHABLE, f"cannot reach {target}: {exc.strerror or exc}")
    return _Verdict(STATE_UNREACHABLE, f"cannot connect to {target}: {exc}")


class _Connection:
    """One TCP connection to a worker; every reply has a deadline, close is always abortive."""

    def __init__(self, host, port, connect_timeout):
        self.sock = None
        self.connect_rtt = None
        target = format_endpoint(host, port)
        try:
            addresses = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        except (OSError, ValueError) as exc:  # socket.gaierror; UnicodeError (IDNA) is a ValueError
            raise _Verdict(STATE_UNREACHABLE, f"cannot resolve {host}: {exc}") from None
        verdict = _Verdict(STATE_UNREACHABLE, f"no address for {host}")
        for family, _type, _proto, _name, sockaddr in addresses:
            sock = None
            try:
                sock = open_socket(family)
                sock.settimeout(connect_timeout)
                started = time.monotonic()
                sock.connect(sockaddr)
                self.connect_rtt = time.monotonic() - started
            except OSError as exc:
                if sock is not None:
                    sock.close()
                verdict = _connect_error(exc, target)
                continue
            self.sock = sock
            return
        raise verdict

    def close(self):
        if self.sock is not None:
            sock, self.sock = self.sock, None
            with contextlib.suppress(OSError):
                set_abortive_close(sock)
            sock.close()

    def _read_exact(self, size, deadline, already):
        chunks = []
        received = 0
        while received < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _ReplyTimeout(already + received)
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(size - received)
            except _SOCKET_TIMEOUT:
                raise _ReplyTimeout(already + received) from None
            except ConnectionError:
                raise _PeerClosed(already + received) from None
            if not chunk:
                raise _PeerClosed(already + received)
            chunks.append(chunk)
            received += len(chunk)
        return b"".join(chunks)

    def call(self, request, expected, timeout):
        """Send one framed request and read a reply of exactly ``expected`` payload bytes.

        Raises _PeerClosed or _ReplyTimeout (with the count of reply bytes received), or RpcProtocolError
        as soon as the header declares another size: nothing more is read then.
        """
        if expected > MAX_REPLY_SIZE:
            raise ValueError(f"this client reads replies of at most {MAX_REPLY_SIZE} bytes")
        deadline = time.monotonic() + timeout
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(request)
        except _SOCKET_TIMEOUT:
            raise _ReplyTimeout(0) from None
        except ConnectionError:
            raise _PeerClosed(0) from None
        header = self._read_exact(REPLY_HEADER.size, deadline, 0)
        decode_reply_size(header, expected)
        return self._read_exact(expected, deadline, REPLY_HEADER.size)

    def has_pending_bytes(self):
        """True when the peer sent bytes nobody asked for (checked after the last reply)."""
        self.sock.setblocking(False)
        try:
            return bool(self.sock.recv(1, socket.MSG_PEEK))
        except OSError:  # BlockingIOError when nothing is pending, or a reset: nothing pending either
            return False


# ---------------------------------------------------------------------------------------------------
# Probe


def _no_reply_verdict(exc, what, expected, timeout):
    whole = REPLY_HEADER.size + expected
    if isinstance(exc, _ReplyTimeout):
        return _Verdict(
            STATE_MALFORMED,
            f"reply to {what} incomplete after {timeout:g} s ({exc.received} of {whole} bytes)",
        )
    if exc.received:
        return _Verdict(
            STATE_MALFORMED,
            f"short reply to {what}: connection closed after {exc.received} of {whole} bytes",
        )
    return _Verdict(STATE_MALFORMED, f"the worker closed the connection in reply to {what}")


def _call(conn, request, expected, timeout, what):
    """conn.call with every failure turned into a malformed verdict (used after HELLO)."""
    try:
        return conn.call(request, expected, timeout)
    except _NoReply as exc:
        raise _no_reply_verdict(exc, what, expected, timeout) from None
    except RpcProtocolError as exc:
        raise _Verdict(STATE_MALFORMED, f"{what}: {exc}") from None


def _hello(conn, request, expected, timeout):
    """Returns a HelloReply, or None when the worker closed the connection before a byte of reply."""
    try:
        payload = conn.call(request, expected, timeout)
    except _PeerClosed as exc:
        if exc.received == 0:
            return None
        raise _no_reply_verdict(exc, "HELLO", expected, timeout) from None
    except _ReplyTimeout as exc:
        if exc.received == 0:
            raise _Verdict(
                STATE_BUSY,
                f"connected, but no HELLO reply within {timeout:g} s: the worker is serving another "
                "client (a coordinator such as llama-server holds it)",
            ) from None
        raise _no_reply_verdict(exc, "HELLO", expected, timeout) from None
    except RpcProtocolError as exc:
        raise _Verdict(STATE_MALFORMED, f"HELLO: {exc}") from None
    return decode_hello(payload)


def _handshake(host, port, timeout, connect_timeout, conn):
    """HELLO with conn_caps; on EOF, a new connection and the empty form.  Returns (hello, connection).

    The connection passed in is closed when another one is returned; a connection opened here is
    closed before a verdict leaves.
    """
    hello = _hello(conn, encode_hello(), HELLO_REPLY.size, timeout)
    if hello is not None:
        if hello.major < CAPS_HELLO_MIN_MAJOR:
            raise _Verdict(
                STATE_MALFORMED,
                f"28-byte HELLO reply announces protocol {hello.version}, which predates that reply form",
            )
        return hello, conn
    conn.close()
    conn = _Connection(host, port, connect_timeout)
    try:
        hello = _hello(conn, encode_legacy_hello(), LEGACY_HELLO_REPLY.size, timeout)
        if hello is None:
            raise _Verdict(
                STATE_INCOMPATIBLE,
                "the peer closed the connection on both HELLO forms: a llama.cpp RPC server older than "
                "protocol 1.0.0 (April 2025), or not a ggml RPC server",
            )
        if hello.major >= CAPS_HELLO_MIN_MAJOR:
            raise _Verdict(
                STATE_MALFORMED,
                f"3-byte HELLO reply announces protocol {hello.version}, whose HELLO carries connection caps",
            )
    except _Verdict:
        conn.close()
        raise
    return hello, conn


# (command, reply layout, decoder) of the per-device queries, in the order they are sent
_DEVICE_QUERIES = (
    (CMD_GET_DEVICE_MEMORY, DEVICE_MEMORY_REPLY, decode_device_memory),
    (CMD_GET_ALIGNMENT, U64_REPLY, decode_alignment),
    (CMD_GET_MAX_SIZE, U64_REPLY, decode_max_size),
)


def _decode(decoder, payload, what):
    try:
        return decoder(payload)
    except RpcProtocolError as exc:
        raise _Verdict(STATE_MALFORMED, f"{what}: {exc}") from None


def _read_devices(conn, major, timeout):
    multi = major >= MULTI_DEVICE_MIN_MAJOR
    if multi:
        reply = _call(conn, encode_device_count(), DEVICE_COUNT_REPLY.size, timeout, "DEVICE_COUNT")
        count = _decode(decode_device_count, reply, "DEVICE_COUNT")
    else:
        count = 1
    devices = []
    for index in range(count):
        values = []
        for cmd, layout, decoder in _DEVICE_QUERIES:
            what = f"{COMMAND_NAMES[cmd]} (device {index})"
            reply = _call(conn, encode_device_query(cmd, index, multi), layout.size, timeout, what)
            values.append(_decode(decoder, reply, what))
        (free, total), alignment, max_size = values
        devices.append(DeviceInfo(index, free, total, alignment, max_size))
    return devices


def probe(host, port, timeout=3.0, connect_timeout=3.0):
    """Probe one worker and return a ProbeResult.  Never raises for anything a peer or the network does.

    ``connect_timeout`` bounds the TCP connect; ``timeout`` bounds each reply, HELLO included: a worker
    that accepts the connection but does not answer HELLO in time is ``busy``.  Only read-only commands
    are sent, and every connection is closed abortively.
    """
    result = ProbeResult(host=host, port=port)
    conn = None
    try:
        conn = _Connection(host, port, connect_timeout)
        result.connect_rtt_ms = round(conn.connect_rtt * 1000.0, 3)
        hello, conn = _handshake(host, port, timeout, connect_timeout, conn)
        result.hello = hello
        if hello.major not in SUPPORTED_MAJORS:
            known = f"{SUPPORTED_MAJORS[0]} to {SUPPORTED_MAJORS[-1]}"
            raise _Verdict(
                STATE_INCOMPATIBLE,
                f"protocol {hello.version}: this client knows the command layouts of majors {known} only",
            )
        devices = _read_devices(conn, hello.major, timeout)
        if conn.has_pending_bytes():
            raise _Verdict(STATE_MALFORMED, "the worker sent bytes beyond the replies it was asked for")
        result.devices = devices
        result.device_count = len(devices)
        result.state = STATE_READY
    except _Verdict as verdict:
        result.state = verdict.state
        result.error = verdict.message
    finally:
        if conn is not None:
            conn.close()
    return result
