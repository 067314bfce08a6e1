# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the lab's loopback measurements share (build_priority_bench.py): a free port, one request
to llama-server on loopback, and the wait for its /health. Standard library only."""

from __future__ import annotations

import http.client
import json
import socket
import time


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(port, method, path, body=None, timeout=600):
    """(status, payload) of one request to llama-server on loopback; ``body`` is sent as JSON."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def post_json(port, path, body):
    """The JSON answer to a POST; exits with llama-server's status and the start of its answer on anything but 200."""
    status, payload = call(port, "POST", path, body)
    if status != 200:
        raise SystemExit(f"llama-server answered {status}: {payload[:200]!r}")
    return json.loads(payload)


def wait_health(port, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if call(port, "GET", "/health", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"llama-server on port {port} did not answer /health within {timeout} s")
