"""Fault matrix, the coordinator host restarted (2): node1 shut down cleanly and booted again by the lab role; its
SSHFS mounts, RPC worker, llama-server and supervisor come back by themselves and the cluster serves."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from clusterlib import main_pid, serving, shard_digests, wait_serving
from faultreport import record
from labtest import BIN, REPO, ansible_env, lab, wait_for

SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", REPO / "molecule" / "cluster"))


def lab_name():
    return yaml.safe_load((SCENARIO / "lab.yml").read_text())["lab_name"]


def controller(*argv):
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        env=ansible_env(MOLECULE_SCENARIO_DIRECTORY=str(SCENARIO)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.fault(2)
def test_the_coordinator_host_restarted_comes_back_serving_by_itself():
    assert serving()
    before = main_pid(lab("node1"), "llamarpc-server")
    state_dir = f"/var/lib/llamarpc-lab/{lab_name()}/hosts/node1"
    start = time.monotonic()
    stop = controller(
        "ansible",
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-m",
        "llamarpc.cluster.lab_host",
        "-a",
        f"name=node1 state=stopped state_dir={state_dir}",
    )
    assert stop.returncode == 0, stop.stdout + stop.stderr
    down = not serving()
    boot = controller("ansible-playbook", "-i", "localhost,", str(REPO / "molecule" / "_shared" / "create.yml"))
    assert boot.returncode == 0, boot.stdout[-3000:]
    booted = time.monotonic() - start
    back = wait_serving(180)
    took = time.monotonic() - start
    node1 = lab("node1")
    units = node1.run("systemctl list-units 'llamarpc*' --all --plain --no-legend").stdout
    failed = [line.split()[0] for line in units.splitlines() if " failed " in f" {line} "]
    sshfs = [line.split()[0] for line in units.splitlines() if line.startswith("llamarpc-sshfs")]
    sshfs_up = sshfs and all(node1.service(unit).is_running for unit in sshfs)
    timer = node1.run("systemctl is-active llamarpc-server-supervisor.timer").stdout.strip()
    intact = all(got == want for got, want in shard_digests().values())
    record(
        2,
        f"node1 powered off (API down: {down}) and booted by the lab role in {booted:.0f} s; "
        f"{len(sshfs)} SSHFS mount unit(s) {'running' if sshfs_up else 'NOT running'}, supervisor timer {timer}, "
        f"failed units: {failed or 'none'}, llama-server PID {before} -> {main_pid(node1, 'llamarpc-server')}, "
        f"{'serving' if back is not None else 'NOT serving'}, shards {'intact' if intact else 'CHANGED'}",
        ok=down and back is not None and bool(sshfs_up) and not failed and timer == "active" and intact,
        recover_s=took if back is not None else None,
    )
    assert down
    assert back is not None
    assert sshfs_up, units
    assert not failed, units
    assert timer == "active"
    assert intact
    assert wait_for(lambda: node1.run("systemctl is-system-running").stdout.strip() in ("running", "degraded"), 30)
