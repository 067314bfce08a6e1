# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/tools/switch_probe.py: each outcome told apart on a real loopback server, and the summary's figures."""

import http.server
import socket
import threading

import pytest
import switch_probe


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        mode = self.server.mode
        if mode == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)  # accepted, read, then closed without a status line
            return
        status, body = (200, b'{"choices": [{"text": " Paris"}]}') if mode == "ok" else (503, b"{}")
        self.send_response(status)
        if mode == "busy":
            self.send_header("Retry-After", "2")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.mode = "ok"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def post(port, timeout=5):
    return switch_probe.request(f"http://127.0.0.1:{port}/v1/completions", b"{}", {}, timeout)


@pytest.mark.parametrize(
    ("mode", "outcome"), [("ok", "ok"), ("busy", "busy"), ("bare503", "busy"), ("drop", "dropped")]
)  # fmt: skip
def test_each_outcome_of_a_real_server(server, mode, outcome):
    server.mode = mode
    record = post(server.server_address[1])
    assert record["outcome"] == outcome
    assert ("retry_after" in record) == (mode == "busy")
    if mode == "ok":
        assert record["text"] == " Paris"


def test_a_closed_port_is_refused(closed_port):
    assert post(closed_port)["outcome"] == "refused"


def rec(start, outcome, end=None, **more):
    return {"start": start, "end": start + 0.5 if end is None else end, "outcome": outcome, **more}


def test_summary_counts_the_gap_and_what_failed():
    records = [rec(0, "ok"), rec(1, "dropped"), rec(2, "refused"), rec(3, "busy", retry_after="2"), rec(4, "busy")]
    records += [rec(5, "ok"), rec(6, "ok")]
    summary = switch_probe.summarize(records)
    assert summary["requests"] == 7 and summary["ok"] == 3 and summary["dropped"] == 1
    assert summary["longest_gap_s"] == 5.0 and summary["downtime_s"] == 4.0
    assert (summary["gap_from"], summary["gap_until"]) == (0.5, 5.5)
    # A 503 with Retry-After is an answer a client can act on; one without it, a drop and a refusal are failures.
    assert summary["failed"] == 3 and summary["busy_without_retry_after"] == 1


def test_an_outage_at_the_end_counts_too():
    summary = switch_probe.summarize([rec(0, "ok"), rec(1, "refused"), rec(9, "refused")])
    assert summary["longest_gap_s"] == 9.0
