# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Scripted ggml RPC servers on loopback for the rpc_endpoint_facts tests, and an HTTP server with Range for the
tests that fetch byte ranges of shards.

Every server binds 127.0.0.1 (or ::1) on an ephemeral port, runs in a daemon thread, serves one
connection at a time like the real worker, and records what it saw: the commands, and how each client
went away (``rst``: reset, ``fin``: orderly close, ``open``: still connected when the server gave up).
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc

MAX_TEST_PAYLOAD = 1 << 16


class RpcTestServer:
    """Listens on loopback; ``handler(server, conn)`` runs for each accepted connection, serially."""

    def __init__(self, handler, *, family=socket.AF_INET, accept=True, backlog=1):
        self.handler = handler
        self.family = family
        self.host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((self.host, 0))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        self.accept = accept
        self.connections = 0
        self.commands = []
        self.payloads = []
        self.peer_close = []
        self.errors = []
        self.handled = 0
        self._stop = threading.Event()
        self._thread = None
        self.lock = threading.Lock()
        self._done = threading.Condition()

    @property
    def endpoint(self):
        return rpc.format_endpoint(self.host, self.port)

    def __enter__(self):
        if self.accept:
            self._thread = threading.Thread(target=self._serve, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    def _serve(self):
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _addr = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self.lock:
                self.connections += 1
            conn.settimeout(5)
            try:
                self.handler(self, conn)
            except Exception as exc:  # noqa: BLE001 - recorded for the test to assert on
                self.errors.append(repr(exc))
            finally:
                conn.close()
                with self._done:
                    self.handled += 1
                    self._done.notify_all()

    def wait_handled(self, count=1):
        """Until ``count`` connections were handled to their end. Every handler ends by itself (the client went, or
        the handler's own timeout passed), so a test waits for that event, not for a time of its choosing, and then
        reads what the handler saw (``peer_close``: ``open`` where the handler, not the client, gave up)."""
        with self._done:
            self._done.wait_for(lambda: self.handled >= count)

    # -- helpers for handlers -------------------------------------------------------------------------

    def recv_exact(self, conn, size):
        data = b""
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def recv_request(self, conn):
        """(cmd, payload) of the next request; None once the client has gone (its close kind noted)."""
        try:
            header = self.recv_exact(conn, rpc.REQUEST_HEADER.size)
            if header is None:
                self.peer_close.append("fin")
                return None
            cmd, size = rpc.decode_request_header(header)
            if size > MAX_TEST_PAYLOAD:
                raise AssertionError(f"client sent a request of {size} bytes")
            payload = self.recv_exact(conn, size) if size else b""
            if payload is None:
                self.peer_close.append("fin")
                return None
        except ConnectionResetError:
            self.peer_close.append("rst")
            return None
        self.commands.append(cmd)
        self.payloads.append(payload)
        return cmd, payload

    def drain(self, conn, timeout=5.0):
        """Read (and drop) whatever comes until the client goes; note whether it reset or closed."""
        conn.settimeout(timeout)
        try:
            while conn.recv(4096):
                pass
        except ConnectionResetError:
            self.peer_close.append("rst")
        except TimeoutError:
            self.peer_close.append("open")
        else:
            self.peer_close.append("fin")


def reply(payload):
    return struct.pack("<Q", len(payload)) + payload


def hello_payload(major, minor=0, patch=0, legacy=False):
    if legacy:
        return struct.pack("<BBB", major, minor, patch)
    return struct.pack("<BBBB", major, minor, patch, 0) + b"\0" * rpc.CONN_CAPS_SIZE


@dataclass
class FakeWorker:
    """Serves like rpc_serve_client of llama.cpp: HELLO first, exact sizes, close on any violation."""

    major: int = 7
    minor: int = 0
    patch: int = 0
    devices: tuple = ((8 << 30, 16 << 30, 64, 1 << 40),)

    @property
    def caps_hello(self):
        return self.major >= rpc.CAPS_HELLO_MIN_MAJOR

    @property
    def multi_device(self):
        return self.major >= rpc.MULTI_DEVICE_MIN_MAJOR

    def __call__(self, server, conn):
        request = server.recv_request(conn)
        if request is None or request[0] != rpc.CMD_HELLO:
            return
        expected = rpc.HELLO_REQUEST_SIZE if self.caps_hello else 0
        if len(request[1]) != expected:
            return  # the real server closes the connection
        conn.sendall(reply(hello_payload(self.major, self.minor, self.patch, legacy=not self.caps_hello)))
        while True:
            request = server.recv_request(conn)
            if request is None:
                return
            answer = self.answer(*request)
            if answer is None:
                return
            conn.sendall(reply(answer))

    def answer(self, cmd, payload):
        """The reply payload, or None where the real server closes the connection."""
        if cmd == rpc.CMD_DEVICE_COUNT:
            return struct.pack("<I", len(self.devices)) if self.multi_device and payload == b"" else None
        if self.multi_device:
            index = struct.unpack("<I", payload)[0] if len(payload) == 4 else None
        else:
            index = None if payload else 0
        if index is None or index >= len(self.devices):
            return None
        free, total, alignment, max_size = self.devices[index]
        return {
            rpc.CMD_GET_DEVICE_MEMORY: struct.pack("<QQ", free, total),
            rpc.CMD_GET_ALIGNMENT: struct.pack("<Q", alignment),
            rpc.CMD_GET_MAX_SIZE: struct.pack("<Q", max_size),
        }.get(cmd)


@pytest.fixture
def rpc_server():
    """Factory started servers, stopped after the test, which fails if a handler raised.

    ``rpc_server(major=7, devices=...)`` serves a FakeWorker; ``rpc_server(handler=fn)`` runs
    ``fn(server, conn)`` per connection; ``family``, ``accept`` and ``backlog`` go to RpcTestServer.
    """
    servers = []

    def start(handler=None, *, family=socket.AF_INET, accept=True, backlog=1, **worker):
        if handler is None:
            handler = FakeWorker(**worker)
        server = RpcTestServer(handler, family=family, accept=accept, backlog=backlog)
        servers.append(server.__enter__())
        return server

    yield start
    for server in servers:
        server.stop()
    problems = server_problems(servers)
    assert not problems, problems


def server_problems(servers):
    """What went wrong on the server side of a test (stopped servers): a handler that raised (a request the probe must
    never send, a reply it broke off) or a server thread that would not stop. The rpc_server fixture fails the test at
    teardown on any of them: they are failures of the test, not something to swallow."""
    problems = [f"{server.endpoint}: {error}" for server in servers for error in server.errors]
    problems += [f"{server.endpoint}: the server thread did not stop" for server in servers if server.running]
    return problems


@pytest.fixture(scope="session")
def hasher(tmp_path_factory):
    """The worker role's FNV-1a helper (llamarpc-fnv1a), compiled as the role compiles it on the host."""
    if not shutil.which("g++"):
        pytest.fail("no g++ to build the helper (tools/setup.sh installs it): the fast path would go untested")
    out = tmp_path_factory.mktemp("hasher") / "llamarpc-fnv1a"
    source = Path(__file__).resolve().parents[3] / "roles/llama_rpc_worker/files/llamarpc_fnv1a.cpp"
    subprocess.run(["g++", "-O2", "-Wall", "-o", str(out), str(source)], check=True, timeout=300)
    return str(out)


@pytest.fixture(scope="session")
def sftp_server():
    """OpenSSH's own sftp-server, the program ``ssh -s USER@HOST sftp`` starts at the far end, to speak SFTP to over a
    pipe."""
    path = "/usr/lib/openssh/sftp-server"
    if not os.access(path, os.X_OK):
        pytest.fail(f"no {path} (tools/setup.sh installs openssh-sftp-server): the SFTP reader would go untested")
    return path


class RangeServer(http.server.ThreadingHTTPServer):
    """Serves the files of ``root`` on loopback. ``requests`` records each request as it arrives (path, Range header,
    Authorization header), ``log`` each reply once sent (path, Range header, bytes of body sent): read it through
    ``settled``, since a client may go on before the handler has noted its last bytes."""

    def __init__(self, root, honour_range=True, wrong_start=False):
        super().__init__(("127.0.0.1", 0), RangeHandler)
        self.root = Path(root)
        self.honour_range = honour_range
        self.wrong_start = wrong_start  # answer every range as if it started at byte 0
        self.requests = []
        self.log = []
        self.lock = threading.Lock()

    def settled(self, timeout=10.0):
        """``log`` once every request that arrived has its entry."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.log) >= len(self.requests) or time.monotonic() > deadline:
                    return list(self.log)
            time.sleep(0.01)


class RangeHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server interface
        with self.server.lock:
            self.server.requests.append((self.path, self.headers.get("Range"), self.headers.get("Authorization")))
        path = self.server.root / self.path.lstrip("/")
        wanted = self.headers.get("Range")
        if not path.is_file():
            self.send_error(404)
            with self.server.lock:
                self.server.log.append((self.path, wanted, 0))
            return
        data = path.read_bytes()
        if wanted and self.server.honour_range:
            first, _dash, last = wanted.removeprefix("bytes=").partition("-")
            start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                body = b""
            else:
                body = data[start : end + 1]
                self.send_response(206)
                shown = 0 if self.server.wrong_start else start
                self.send_header("Content-Range", f"bytes {shown}-{end}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
        else:
            body = data
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
        sent = 0
        try:
            for offset in range(0, len(body), 1 << 16):
                self.wfile.write(body[offset : offset + (1 << 16)])
                sent += len(body[offset : offset + (1 << 16)])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader closed after what it needed
        with self.server.lock:
            self.server.log.append((self.path, wanted, sent))

    def log_message(self, *args):
        pass


@pytest.fixture
def range_server():
    """``range_server(root, honour_range=True, wrong_start=False) -> RangeServer``, started; stopped after the test."""
    servers = []

    def start(root, honour_range=True, wrong_start=False):
        server = RangeServer(root, honour_range, wrong_start)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
