# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate responder of llama-server (llamarpc.cluster): while a play restarts llama-server, the new connections of
its clients come here (llamarpc.cluster.llama_server_gate's nftables table) and every request gets a clear answer -
503, Retry-After and an OpenAI-style error body - instead of a refused or dropped connection. Python's standard
library only: it runs with the host's python3."""

from __future__ import annotations

import argparse
import http.server
import json
import socket
import socketserver

#: Seconds a client may take to send its request (a slow or silent one does not hold a thread longer).
CLIENT_TIMEOUT = 15
#: The most of a request body read (and thrown away) before the answer, so that closing sends no reset over it.
BODY_LIMIT = 16 * 1024 * 1024


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def handler(retry_after):
    body = json.dumps(
        {
            "error": {
                "code": 503,
                "type": "unavailable_error",
                "message": f"llama-server is switching; retry after {retry_after} s",
            }
        }
    ).encode()

    class Gate(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = CLIENT_TIMEOUT

        def version_string(self):
            return "llamarpc-gate"

        def answer(self):
            self.discard_body()
            self.send_response(503)
            self.send_header("Retry-After", str(retry_after))
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True

        def discard_body(self):
            try:
                left = min(int(self.headers.get("Content-Length") or 0), BODY_LIMIT)
            except ValueError:
                left = 0
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = answer

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

    return Gate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--retry-after", type=int, default=10)
    args = parser.parse_args(argv)
    Server.address_family = socket.AF_INET6 if ":" in args.address else socket.AF_INET
    with Server((args.address, args.port), handler(args.retry_after)) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
