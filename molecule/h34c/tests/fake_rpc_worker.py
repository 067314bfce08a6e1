"""Stand-in for an RPC worker built from another llama.cpp version (fault 11), run on a lab host by the test.

Answers HELLO with the protocol major given on the command line (and the device queries rpc_endpoint_facts sends)
using the wire layouts of the collection's own ``_rpc_protocol.py`` (copied beside this file). A real worker of an
older llama.cpp cannot be built here (one pinned source archive, a 10-minute build): the coordinator's check only
sees the HELLO reply, which this reproduces byte for byte.

Usage: python3 fake_rpc_worker.py PORT MAJOR
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys

import _rpc_protocol as rpc


def recv_exact(conn, size):
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def answer(cmd, major):
    if cmd == rpc.CMD_HELLO:
        return rpc.HELLO_REPLY.pack(major, 0, 0, 0, b"\0" * rpc.CONN_CAPS_SIZE)
    if cmd == rpc.CMD_DEVICE_COUNT:
        return rpc.DEVICE_COUNT_REPLY.pack(1)
    if cmd == rpc.CMD_GET_DEVICE_MEMORY:
        return rpc.DEVICE_MEMORY_REPLY.pack(1 << 30, 1 << 30)
    if cmd == rpc.CMD_GET_ALIGNMENT:
        return struct.pack("<Q", 32)
    if cmd == rpc.CMD_GET_MAX_SIZE:
        return struct.pack("<Q", 1 << 40)
    return None


def serve(conn, major):
    while True:
        header = recv_exact(conn, rpc.REQUEST_HEADER.size)
        if header is None:
            return
        cmd, size = rpc.decode_request_header(header)
        if size and recv_exact(conn, size) is None:
            return
        payload = answer(cmd, major)
        if payload is None:
            return  # like the real worker: an unknown command closes the connection
        conn.sendall(rpc.REPLY_HEADER.pack(len(payload)) + payload)


def main(port, major):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))  # noqa: S104 - a lab host's own namespace
    listener.listen(1)
    while True:
        conn, _peer = listener.accept()
        with conn, contextlib.suppress(OSError):
            serve(conn, major)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
