"""Day 2's restart.yml (README): llama-server and every worker of its plan restart in one gated window - each worker
the moment llama-server lets go of it - and a client through it gets only answers and 503s with Retry-After.

The lab hosts share the controller's kernel, so systemd's monotonic timestamps of units on different hosts compare."""

from __future__ import annotations

from clusterlib import client, deployed_plan, main_pid, serving, started_at, through_switch
from labtest import REPO, inventory_hosts, lab, run_ansible, wait_for

WORKER = "llamarpc-rpc-worker.service"
SERVER = "llamarpc-server.service"


def _times(host, unit, *names):
    """systemd's ``<name>TimestampMonotonic`` of ``unit`` for each name, in microseconds of the kernel's clock."""
    props = " ".join(f"-p {name}TimestampMonotonic" for name in names)
    out = host.run_expect([0], f"systemctl show {props} {unit}").stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return tuple(int(values[f"{name}TimestampMonotonic"]) for name in names)


def test_restart_restarts_the_plans_workers_inside_llama_servers_gated_restart():
    """Every planned worker restarts after llama-server stopped and before it started again (llama-server's start
    waits for their HELLO); a worker outside the plan restarts too (nothing holds it); clients meet 503s with
    Retry-After and answers, no refused or dropped request."""
    hosts = sorted(inventory_hosts())
    planned = sorted(worker["name"] for worker in deployed_plan()["plan"]["workers"])
    assert planned, deployed_plan()
    before = {name: main_pid(lab(name), WORKER) for name in hosts}
    server_before = main_pid(lab("node1"), SERVER)
    with client(pause=0.2) as answers:
        result = run_ansible("ansible-playbook", REPO / "playbooks" / "restart.yml", timeout=1800)
        if result.returncode == 0:  # the client goes on until a completion asked after the restart came back
            restarted = started_at(lab("node1"), SERVER)
            wait_for(lambda: any(a[0] == 200 and a[3] > restarted for a in list(answers)), interval=0.5)
    assert result.returncode == 0, result.stdout[-3000:]
    after = {name: main_pid(lab(name), WORKER) for name in hosts}
    assert [name for name in hosts if after[name] in (before[name], "0")] == [], (before, after)
    assert main_pid(lab("node1"), SERVER) not in (server_before, "0")
    # In causal order, not by timing: llama-server's stop began (ActiveExit) before it let go of any worker, so before
    # a worker's old process stopped (InactiveEnter); a worker's new main process (ExecMainStart: the cache check that
    # becomes the RPC server) began before it could answer the HELLO that llama-server's start waits for, so before
    # llama-server became active again (ActiveEnter).
    stop_began, active_again = _times(lab("node1"), SERVER, "ActiveExit", "ActiveEnter")
    times = {name: _times(lab(name), WORKER, "InactiveEnter", "ExecMainStart") for name in planned}
    outside = {name: t for name, t in times.items() if not stop_began <= t[0] <= t[1] <= active_again}
    assert outside == {}, (stop_began, active_again, times)
    assert through_switch(answers, started_at(lab("node1"), SERVER)) == []
    assert serving()
