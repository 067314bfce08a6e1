# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""rpc_worker_cutover: the worker restarts only once its client (llama-server) has let go of it, and before any
connection that came after the waiter's is answered; a worker that nobody listens for restarts at once; a client that
never lets go ends the wait with nothing restarted; a worker of protocol 1-3 is waited for with the empty HELLO. On a
scripted worker on loopback that serves one connection at a time, as llama.cpp's does; every wait below ends on an
event (a reply, a close), not on a time."""

from __future__ import annotations

import os
import socket
import sys
import threading

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _worker_cutover as cutover
from ansible_collections.llamarpc.cluster.plugins.modules import rpc_worker_cutover


def hold(server, legacy=False):
    """A client that the worker serves now (llama-server): connected, HELLO answered."""
    client = socket.create_connection((server.host, server.port), timeout=10)
    if legacy:
        client.sendall(rpc.encode_legacy_hello())
        size = rpc.LEGACY_HELLO_REPLY.size
    else:
        client.sendall(rpc.encode_hello())
        size = rpc.HELLO_REPLY.size
    received = b""
    while len(received) < 8 + size:
        received += client.recv(64)
    return client


def waiting(endpoint, restart, timeout=60):
    """restart_when_released in a thread: (thread, armed event, outcome dict)."""
    armed, outcome = threading.Event(), {}

    def run():
        try:
            outcome["result"] = cutover.restart_when_released(endpoint, restart, timeout, armed=armed.set)
        except Exception as exc:  # noqa: BLE001 - the test asserts on it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, armed, outcome


@pytest.mark.parametrize("major", [7, 3])
def test_the_worker_restarts_once_its_client_let_go_and_before_a_later_connection_is_answered(rpc_server, major):
    server = rpc_server(major=major)
    holder = hold(server, legacy=major < rpc.CAPS_HELLO_MIN_MAJOR)
    released = threading.Event()
    seen = {}

    def restart():
        # What the worker has served when the restart comes: the holder and the waiter, not the late client.
        seen["released"] = released.is_set()
        seen["accepted"] = server.connections
        return "restarted"

    thread, armed, outcome = waiting(server.endpoint, restart)
    assert armed.wait(30)
    # Queued behind the waiter's two connections (llama-server's start asking HELLO). The worker's backlog of 1 holds
    # two waiting connections, so this one's SYN is answered once the worker takes the waiter's first.
    late = threading.Thread(target=lambda: socket.create_connection((server.host, server.port), timeout=60).close())
    late.start()
    released.set()
    holder.close()
    thread.join(60)
    late.join(60)
    assert "error" not in outcome, outcome
    _waited, protocol, result = outcome["result"]
    assert (protocol, result) == (f"{major}.0.0", "restarted")
    # A worker of protocol 3 closes the waiter's first connection on its 24-byte HELLO and takes its second next.
    assert seen == {"released": True, "accepted": 2 if major >= rpc.CAPS_HELLO_MIN_MAJOR else 3}


def test_a_worker_that_does_not_listen_restarts_at_once(closed_port):
    calls = []
    waited, protocol, result = cutover.restart_when_released(
        f"127.0.0.1:{closed_port}", lambda: calls.append("restart") or "restarted", timeout=60
    )
    assert (protocol, result, calls) == (None, "restarted", ["restart"])


def test_a_client_that_never_lets_go_ends_the_wait_and_nothing_restarts(rpc_server):
    server = rpc_server()
    worker = server.handler

    def serve(server, conn):
        # The waiter gave up and reset its connections; answering one of them fails, and the worker goes on to the
        # next client, as llama.cpp's does.
        try:
            worker(server, conn)
        except (ConnectionResetError, BrokenPipeError):
            server.peer_close.append("rst")

    server.handler = serve
    holder = hold(server)
    calls = []
    thread, armed, outcome = waiting(server.endpoint, lambda: calls.append("restart"), timeout=1)
    thread.join(60)  # ends on the waiter's own timeout while the holder still holds
    holder.close()
    server.wait_handled(3)  # the holder, then the waiter's two connections, reset
    assert armed.is_set() and calls == []
    assert isinstance(outcome.get("error"), cutover.NotReleased), outcome
    assert "did not let go of it within 1 s; the worker was not restarted" in str(outcome["error"])


SYSTEMCTL = """import os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
import time
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
failing = os.environ.get("FAKE_FAIL")
sys.exit(1 if failing and failing in sys.argv else int(os.environ.get("FAKE_RC", "0")))
"""


@pytest.fixture
def systemctl(tmp_path, monkeypatch):
    """A stand-in systemctl first on PATH: it records its arguments and exits with FAKE_RC (1 when FAKE_FAIL is one of
    its arguments)."""
    script = tmp_path / "systemctl"
    script.write_text(f"#!{sys.executable}\n{SYSTEMCTL}", encoding="utf-8")
    script.chmod(0o755)
    log = tmp_path / "systemctl.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(cutover, "RESTART_DELAY", 0)
    return lambda: log.read_text().splitlines() if log.exists() else []


def test_the_module_restarts_the_service_and_says_done_with_the_run_id(run_module, systemctl, closed_port, tmp_path):
    armed = tmp_path / "armed"
    args = {"endpoint": f"127.0.0.1:{closed_port}", "service": "w.service", "armed_file": str(armed), "run_id": "t1"}
    result = run_module(rpc_worker_cutover, args)
    assert not result.failed, result.result
    assert result.result["changed"] and result.result["tries"] == 0 and result.result["protocol"] is None
    assert systemctl()[-1].endswith("restart w.service")
    assert armed.read_text() == "done t1\n"


def test_a_failed_restart_is_tried_three_times_and_said(run_module, systemctl, closed_port, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_RC", "1")
    armed = tmp_path / "armed"
    args = {"endpoint": f"127.0.0.1:{closed_port}", "service": "w.service", "armed_file": str(armed), "run_id": "t2"}
    result = run_module(rpc_worker_cutover, args)
    assert result.failed and result.result["msg"].startswith("systemctl restart w.service failed (3 attempts)")
    assert [line.split()[-2:] for line in systemctl() if "restart" in line] == [["restart", "w.service"]] * 3
    assert armed.read_text().startswith("failed t2: systemctl restart w.service failed")


def test_check_mode_waits_for_nothing_and_restarts_nothing(run_module, systemctl, closed_port):
    args = {"endpoint": f"127.0.0.1:{closed_port}", "service": "w.service"}
    result = run_module(rpc_worker_cutover, args, check_mode=True)
    assert result.result["changed"] and systemctl() == []


def test_the_cache_check_runs_before_anything_queues_and_its_failure_restarts_nothing(
    run_module, systemctl, closed_port, tmp_path, monkeypatch
):
    armed = tmp_path / "armed"
    args = {
        "endpoint": f"127.0.0.1:{closed_port}", "service": "w.service", "armed_file": str(armed), "run_id": "t3",
        "check_unit": "c.service",
    }  # fmt: skip
    result = run_module(rpc_worker_cutover, args)
    assert not result.failed, result.result
    assert [line.split()[-2:] for line in systemctl()] == [["start", "c.service"], ["restart", "w.service"]]

    monkeypatch.setenv("FAKE_FAIL", "c.service")
    result = run_module(rpc_worker_cutover, dict(args, run_id="t4"))
    assert result.failed and "systemctl start c.service (the worker's cache check) failed" in result.result["msg"]
    assert [line.split()[-2:] for line in systemctl()][2:] == [["start", "c.service"]]
    assert armed.read_text().startswith("failed t4: systemctl start c.service")


def test_a_cache_check_longer_than_the_timeout_queues_nothing_and_restarts_nothing(
    run_module, systemctl, closed_port, tmp_path, monkeypatch
):
    """The timeout bounds the check and the wait together (the play's async budget is the timeout and a minute)."""
    monkeypatch.setenv("FAKE_SLEEP", "1.2")
    armed = tmp_path / "armed"
    args = {
        "endpoint": f"127.0.0.1:{closed_port}", "service": "w.service", "armed_file": str(armed), "run_id": "t5",
        "check_unit": "c.service", "timeout": 1,
    }  # fmt: skip
    result = run_module(rpc_worker_cutover, args)
    assert result.failed and "took longer than the 1 s timeout" in result.result["msg"]
    assert [line.split()[-2:] for line in systemctl()] == [["start", "c.service"]]
    assert armed.read_text().startswith("failed t5: the worker's cache check")
