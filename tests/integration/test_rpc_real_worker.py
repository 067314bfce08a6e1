# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""rpc_endpoint_facts against a real llama.cpp RPC worker on 127.0.0.1.

Needs LLAMARPC_LLAMA_BIN_DIR: a directory with ``ggml-rpc-server`` (or ``rpc-server`` in older trees) and
the ``lib*.so`` beside it.  Without the variable every test here is skipped; with it, a missing binary
is a failure.  Only 127.0.0.1 is ever contacted.

    LLAMARPC_LLAMA_BIN_DIR=/path/to/bin .venv/bin/pytest tests/integration/test_rpc_real_worker.py
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc

pytestmark = pytest.mark.needs_llama

BIN_DIR_VARIABLE = "LLAMARPC_LLAMA_BIN_DIR"
WORKER_NAMES = ("ggml-rpc-server", "rpc-server")
LOOPBACK = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def worker_binary():
    bin_dir = os.environ.get(BIN_DIR_VARIABLE)
    if not bin_dir:
        pytest.skip(f"{BIN_DIR_VARIABLE} is not set: no llama.cpp binaries to start a real RPC worker")
    for name in WORKER_NAMES:
        candidate = Path(bin_dir) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(f"{BIN_DIR_VARIABLE}={bin_dir} has neither of {', '.join(WORKER_NAMES)}")


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


class Worker:
    def __init__(self, binary, workdir):
        self.binary = binary
        self.port = _free_port()
        self.log_path = workdir / "worker.log"
        self._log = self.log_path.open("wb")
        env = dict(os.environ, LLAMA_CACHE=str(workdir / "cache"), HOME=str(workdir))
        self.proc = subprocess.Popen(
            [str(binary), "-H", LOOPBACK, "-p", str(self.port), "-t", "1"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
        )

    @property
    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, seconds=60):
        """Poll with the probe itself (abortive close, so polling cannot hurt the worker)."""
        deadline = time.monotonic() + seconds
        result = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"worker exited with {self.proc.returncode} while starting:\n{self.log}")
            result = rpc.probe(LOOPBACK, self.port, timeout=5, connect_timeout=2)
            if result.state == rpc.STATE_READY:
                return result
            time.sleep(0.2)
        pytest.fail(f"worker not ready after {seconds} s (last probe: {result}):\n{self.log}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture
def worker(worker_binary, tmp_path):
    (tmp_path / "cache" / "rpc").mkdir(parents=True)
    started = Worker(worker_binary, tmp_path)
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def _holder(port):
    """A plain client that says HELLO and keeps the connection: the worker now serves only it."""
    sock = socket.create_connection((LOOPBACK, port), timeout=5)
    sock.sendall(rpc.encode_hello())
    frame = b""
    while len(frame) < rpc.REPLY_HEADER.size + rpc.HELLO_REPLY.size:
        chunk = sock.recv(64)
        assert chunk, "the worker closed the holder's connection"
        frame += chunk
    hello = rpc.decode_hello(rpc.decode_reply(frame, rpc.HELLO_REPLY.size))
    return sock, hello


def _device_count(sock):
    """DEVICE_COUNT over a connection that said HELLO (protocol 7): the worker's answer."""
    sock.sendall(rpc.encode_device_count())
    frame = b""
    while len(frame) < rpc.REPLY_HEADER.size + 4:
        chunk = sock.recv(64)
        assert chunk, "the worker closed the holder's connection"
        frame += chunk
    return struct.unpack("<I", rpc.decode_reply(frame, 4))[0]


def test_real_worker_is_ready_with_protocol_7_and_memory(worker):
    result = rpc.probe(LOOPBACK, worker.port, timeout=5, connect_timeout=2)
    facts = result.as_dict()
    print(json.dumps(facts, indent=2))
    assert facts["state"] == "ready", facts["error"]
    assert facts["major"] == 7
    assert facts["protocol"].startswith("7.")
    assert facts["hello_form"] == "conn_caps"
    assert facts["device_count"] >= 1
    assert facts["device_count"] == len(facts["devices"])
    first = facts["devices"][0]
    assert first["total"] > 0
    assert 0 <= first["free"] <= first["total"]
    assert first["alignment"] & (first["alignment"] - 1) == 0
    assert first["max_size"] > 0
    # the worker moved on after the abortive close: probing again works at once
    assert rpc.probe(LOOPBACK, worker.port, timeout=5, connect_timeout=2).state == "ready"
    assert worker.proc.poll() is None


def test_held_worker_is_busy_and_survives_the_probes(worker):
    holder, hello = _holder(worker.port)
    try:
        assert hello.major == 7
        # listen(fd, 1) queues two connections: two probes fit in the backlog and say busy
        for _attempt in range(2):
            started = time.monotonic()
            result = rpc.probe(LOOPBACK, worker.port, timeout=1, connect_timeout=1)
            assert result.state == "busy", result.error
            # Waited out the 1 s deadline: a lower bound, which no load can break.
            assert time.monotonic() - started > 0.9
        # The probes said busy while the worker was indeed serving the holder: it still answers the holder, so
        # neither probe waited for the worker to be free (it would have said ready) nor disturbed the connection
        # it serves. An order of events instead of an upper bound on the time.
        assert _device_count(holder) >= 1
        assert worker.proc.poll() is None
    finally:
        rpc.set_abortive_close(holder)
        holder.close()
    # Freed, the worker accepts the probes' dead connections (each fails at once), then serves again.
    result = worker.wait_ready()
    assert result.state == "ready", (result.error, worker.log)
    # Serving a second probe proves the worker got past the first one's abortive close too (it serves one
    # connection at a time): only then is "still alive" worth asserting.
    again = rpc.probe(LOOPBACK, worker.port, timeout=5, connect_timeout=5)
    assert again.state == "ready", (again.error, worker.log)
    assert worker.proc.poll() is None, f"worker died with {worker.proc.returncode}:\n{worker.log}"


def test_third_probe_of_a_held_worker_times_out_at_connect(worker):
    """listen(fd, 1): the two dead connections of earlier probes fill the backlog until the worker is free."""
    holder, _hello = _holder(worker.port)
    try:
        states = [rpc.probe(LOOPBACK, worker.port, timeout=0.5, connect_timeout=0.5).state for _attempt in range(3)]
    finally:
        rpc.set_abortive_close(holder)
        holder.close()
    assert states == ["busy", "busy", "timeout"]
    assert worker.wait_ready().state == "ready"
    assert worker.proc.poll() is None


TCP_STATES = {"01": "ESTABLISHED", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT"}


def _tcp_state(local_port, remote_port):
    """The state of the IPv4 TCP socket 127.0.0.1:local_port <-> 127.0.0.1:remote_port (/proc/net/tcp),
    None when there is none; queued connections not yet accepted are listed too."""
    wanted = (f"0100007F:{local_port:04X}", f"0100007F:{remote_port:04X}")
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == wanted:
                return TCP_STATES.get(fields[3], fields[3])
    return None


def _wait_until(condition, seconds):
    """True once ``condition()`` holds, False if it still does not after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _left_by_a_client_then_freed(binary, workdir, mode):
    """A fresh worker held by a client; a second client (``mode``) sends HELLO and goes; then the holder
    goes too.  Returns the worker's exit status once it has dealt with the second client (None: alive)."""
    worker = Worker(binary, workdir)
    try:
        worker.wait_ready()
        holder, _hello = _holder(worker.port)
        if mode == "probe":
            assert rpc.probe(LOOPBACK, worker.port, timeout=0.5, connect_timeout=5).state == "busy"
        else:
            naive = socket.create_connection((LOOPBACK, worker.port), timeout=5)
            naive_port = naive.getsockname()[1]
            naive.sendall(rpc.encode_hello())
            naive.close()
            # The queued connection has the FIN (CLOSE_WAIT), as it long has when a busy worker gets to it.
            assert _wait_until(lambda: _tcp_state(worker.port, naive_port) == "CLOSE_WAIT", 20)
        holder.close()
        if mode == "probe":
            # The worker serves one connection at a time: once it serves a new probe, it has been through the
            # dead one (a reset, its first write failing), so that it is still alive then means something.
            _wait_until(
                lambda: worker.proc.poll() is not None or rpc.probe(LOOPBACK, worker.port, timeout=5).state == "ready",
                60,
            )
        else:
            _wait_until(lambda: worker.proc.poll() is not None, 60)
        return worker.proc.poll()
    finally:
        worker.stop()


def test_sigpipe_trap_is_real_and_the_probe_avoids_it(worker_binary, tmp_path):
    """A client that sends HELLO to a held worker and closes normally kills the worker with SIGPIPE once
    it is freed; the probe's abortive close does not.  Both on fresh workers started here."""
    outcomes = {}
    for mode in ("orderly close", "probe"):
        workdir = tmp_path / mode.replace(" ", "-")
        workdir.mkdir()
        outcomes[mode] = _left_by_a_client_then_freed(worker_binary, workdir, mode)
    assert outcomes == {"orderly close": -signal.SIGPIPE, "probe": None}


def test_stopped_worker_is_refused(worker):
    assert rpc.probe(LOOPBACK, worker.port, timeout=5, connect_timeout=2).state == "ready"
    worker.stop()
    result = rpc.probe(LOOPBACK, worker.port, timeout=2, connect_timeout=2)
    assert result.state == "refused", result.error


PLAYBOOK = """
- name: Probe the real worker through Ansible
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Probe
      llamarpc.cluster.rpc_endpoint_facts:
        endpoints:
          - "127.0.0.1:{{ worker_port }}"
          - {host: 127.0.0.1, port: "{{ gone_port }}", name: gone}
        timeout: 5
      register: probed

    - name: Save the result
      ansible.builtin.copy:
        content: "{{ probed | to_json }}"
        dest: "{{ report }}"
        mode: "0600"
"""


def test_module_end_to_end_with_ansible(worker, closed_port_real, tmp_path):
    """The module through ansible-playbook (AnsiballZ, argument parsing, facts) against the real worker."""
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    report = tmp_path / "report.json"
    extra = {"worker_port": worker.port, "gone_port": closed_port_real, "report": str(report)}
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections")
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            json.dumps(extra),
            str(tmp_path / "play.yml"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(report.read_text())
    print(json.dumps(result, indent=2))
    ready, gone = result["ansible_facts"]["rpc_endpoints"]
    assert ready["state"] == "ready", ready["error"]
    assert ready["major"] == 7
    assert ready["devices"][0]["total"] > 0
    assert (gone["name"], gone["state"]) == ("gone", "refused")
    assert result["changed"] is False
    assert result["summary"]["ready"] == 1
    assert worker.proc.poll() is None


@pytest.fixture
def closed_port_real():
    return _free_port()
