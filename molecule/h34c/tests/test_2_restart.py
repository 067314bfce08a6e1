"""Day 2's restart.yml (README): the workers restarted one at a time, then llama-server, and serving after.

The lab hosts share the controller's kernel, so systemd's monotonic timestamps of units on different hosts compare."""

from __future__ import annotations

import itertools

from clusterlib import main_pid, serving
from labtest import REPO, inventory_hosts, lab, run_ansible

WORKER = "llamarpc-rpc-worker.service"
SERVER = "llamarpc-server.service"


def _stopped_started(host, unit):
    """(when the unit last stopped, when it last became active), in microseconds of the kernel's monotonic clock."""
    out = host.run_expect(
        [0], f"systemctl show -p InactiveEnterTimestampMonotonic -p ActiveEnterTimestampMonotonic {unit}"
    ).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return int(values["InactiveEnterTimestampMonotonic"]), int(values["ActiveEnterTimestampMonotonic"])


def test_restart_restarts_every_worker_one_at_a_time_then_llama_server():
    hosts = sorted(inventory_hosts())
    before = {name: main_pid(lab(name), WORKER) for name in hosts}
    server_before = main_pid(lab("node1"), SERVER)
    result = run_ansible("ansible-playbook", REPO / "playbooks" / "restart.yml", timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:]
    after = {name: main_pid(lab(name), WORKER) for name in hosts}
    assert [name for name in hosts if after[name] in (before[name], "0")] == [], (before, after)
    times = {name: _stopped_started(lab(name), WORKER) for name in hosts}
    order = sorted(hosts, key=lambda name: times[name][0])
    # One at a time: each worker stopped only after the one before it was running again.
    overlapping = [(a, b) for a, b in itertools.pairwise(order) if times[b][0] < times[a][1]]
    assert overlapping == [], times
    server_started = _stopped_started(lab("node1"), SERVER)[1]
    assert main_pid(lab("node1"), SERVER) not in (server_before, "0")
    assert server_started > max(started for _stopped, started in times.values()), (server_started, times)
    assert serving()
