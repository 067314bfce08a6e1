"""_ports: who listens on a TCP port and in which systemd unit, read from a /proc tree (a written one, and this
machine's own with a socket the test opens on loopback)."""

from __future__ import annotations

import os
import socket

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.preflight import _ports

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(local, state, inode, remote="00000000:0000"):
    return f"   0: {local} {remote} {state} 00000000:00000000 00:00000000 00000000   998        0 {inode} 1\n"


@pytest.fixture()
def proc(tmp_path):
    """A /proc with a worker on 10.0.0.12:50052 (unit llamarpc-rpc-worker.service, cgroup v2), a hand-started
    rpc-server on [::]:50099 (a session scope, cgroup v1's name=systemd) and a client connection to 50052."""
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(
        HEADER
        + row("0C00000A:C384", "0A", "111")  # 10.0.0.12:50052 LISTEN
        + row("0C00000A:C384", "01", "333", remote="0B00000A:D431")  # an established connection to it
    )
    (tmp_path / "net" / "tcp6").write_text(HEADER + row("0" * 32 + ":C3B3", "0A", "222"))  # [::]:50099 LISTEN

    def process(pid, comm, cgroup, inodes):
        fd = tmp_path / str(pid) / "fd"
        fd.mkdir(parents=True)
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
        (tmp_path / str(pid) / "cgroup").write_text(cgroup)
        for number, inode in enumerate(inodes, start=3):
            os.symlink(f"socket:[{inode}]", fd / str(number))
        os.symlink("/dev/null", fd / "0")

    process(812, "rpc-server", "0::/system.slice/llamarpc-rpc-worker.service\n", ["111", "333"])
    process(
        990, "rpc-server", "12:memory:/user.slice\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n", ["222"]
    )
    process(1000, "bash", "0::/user.slice/user-0.slice/session-3.scope\n", [])
    return tmp_path


def test_listeners_are_found_by_port_with_their_unit_and_address(proc):
    assert _ports.holders(50052, str(proc)) == [
        {"pid": 812, "comm": "rpc-server", "unit": "llamarpc-rpc-worker.service", "address": ["10.0.0.12"]}
    ]
    assert _ports.holders(50099, str(proc)) == [
        {"pid": 990, "comm": "rpc-server", "unit": "session-3.scope", "address": ["::"]}
    ]
    assert _ports.holders(8080, str(proc)) == []


def test_the_services_own_unit_is_no_problem_another_program_is(proc):
    seen, problems = _ports.foreign_holders(
        [
            {"service": "the RPC worker", "port": 50052, "unit": "llamarpc-rpc-worker.service"},
            {"service": "llama-server", "port": 50099, "unit": "llamarpc-server.service"},
        ],
        str(proc),
    )
    assert [holder["pid"] for holder in seen["the RPC worker"]] == [812]
    assert problems == [
        "port 50099 (llama-server) is already held by rpc-server (PID 990, unit session-3.scope, on ::), not by "
        "llamarpc-server.service: stop that program, or give llama-server another port"
    ]


def test_a_renamed_service_whose_old_unit_still_listens_is_a_problem(proc):
    _seen, problems = _ports.foreign_holders(
        [{"service": "the RPC worker", "port": 50052, "unit": "llamarpc-worker-b.service"}], str(proc)
    )
    assert len(problems) == 1 and "unit llamarpc-rpc-worker.service" in problems[0]


def test_this_machines_own_proc_shows_a_socket_this_test_listens_on():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        found = _ports.holders(port)
        assert [holder["pid"] for holder in found] == [os.getpid()]
        assert found[0]["address"] == ["127.0.0.1"]
        unit = found[0]["unit"]
        _seen, problems = _ports.foreign_holders([{"service": "x", "port": port, "unit": "other.service"}])
        assert len(problems) == 1 and f"PID {os.getpid()}" in problems[0]
        if unit:
            assert _ports.foreign_holders([{"service": "x", "port": port, "unit": unit}])[1] == []
    assert _ports.holders(port) == []
