"""Fault matrix, faults that leave serving alone: busy probe (9), who reaches the RPC port (10), hardened units (12),
lsyncd with delete started again (4). Each test records what it saw in the report (faultreport)."""

from __future__ import annotations

import re
import socket
import time

import pytest
from clusterlib import deployed_plan, main_pid, module, serving, shard_digests
from faultreport import record
from labtest import address, inventory_hosts, lab, wait_for

RPC_PORT = 50052
EXPOSURE_TARGET = 4.0


def planned_worker(not_coordinator=True):
    """A worker of the deployed plan (not node1 unless allowed): it is busy serving llama-server."""
    names = [row["name"] for row in deployed_plan()["plan"]["workers"]]
    return [name for name in names if not (not_coordinator and name == "node1")][0]


def test_a_probe_of_a_busy_worker_reports_busy_and_the_worker_stays_alive():
    assert serving()
    name = planned_worker()
    host = lab(name)
    pid = main_pid(host, "llamarpc-rpc-worker")
    start = time.monotonic()
    rc, result = module("node1", "llamarpc.cluster.rpc_endpoint_facts", {"endpoints": [f"{address(name)}:{RPC_PORT}"]})
    state = (result.get("ansible_facts", {}).get("rpc_endpoints") or [{}])[0].get("state")
    time.sleep(3)
    alive = main_pid(host, "llamarpc-rpc-worker") == pid and host.service("llamarpc-rpc-worker").is_running
    still = serving()
    # The dead probe connection waits in the worker's backlog; a later serve must not be hurt by it.
    after = main_pid(host, "llamarpc-rpc-worker") == pid
    record(
        9,
        f"probe of {name} from the coordinator: state {state}; "
        f"worker PID {'unchanged' if alive and after else 'CHANGED'}; "
        f"{'still serving' if still else 'NOT serving'} ({time.monotonic() - start:.1f} s)",
        ok=rc == 0 and state == "busy" and alive and after and still,
    )
    assert rc == 0, result
    assert state == "busy", result
    assert alive and after and still


def _connect(host, port, timeout=5):
    """'refused', 'timeout' or 'connected' for a TCP connect from this controller (to a lab host)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # abortive close
    try:
        sock.connect((host, port))
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    finally:
        sock.close()
    return "connected"


def test_the_rpc_port_is_refused_from_a_non_coordinator_and_from_the_controller():
    target = planned_worker()
    other = [name for name in inventory_hosts() if name not in ("node1", target)][0]
    pid = main_pid(lab(target), "llamarpc-rpc-worker")
    # bash's /dev/tcp connect from another lab host; python closes abortively from the controller.
    peer = lab(other).run(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address(target)}/{RPC_PORT}'")
    from_peer = "connected" if peer.rc == 0 else peer.stderr.strip()
    from_peer = "refused" if "refused" in from_peer.lower() else from_peer
    from_controller = _connect(address(target), RPC_PORT)
    # The bridge address the controller's packets come from (the host's view of its peer).
    bridge = lab(target).run("ip route show default; ip neigh").stdout
    record(
        10,
        f"{other} -> {target}:{RPC_PORT}: {from_peer}; controller (bridge) -> {target}:{RPC_PORT}: {from_controller}",
        ok=from_peer == "refused" and from_controller == "refused",
        key="10 rpc-port",
        detail="RPC port from a non-coordinator host and from the controller",
    )
    assert from_peer == "refused", peer.stderr
    assert from_controller == "refused", bridge
    assert main_pid(lab(target), "llamarpc-rpc-worker") == pid


def _units(host):
    """The collection's services on ``host``; the lab's own units (llamarpc-lab-*, made by lab_host) are not ours."""
    listed = host.run("systemctl list-units 'llamarpc*' --all --plain --no-legend --type=service").stdout
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    return sorted(name for name in names if not name.startswith("llamarpc-lab-"))


def _exposure(host, unit):
    out = host.run(f"systemd-analyze security --no-pager {unit}").stdout
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", out)
    return (float(found.group(1)), found.group(2)) if found else (None, out[-200:])


def _template(unit):
    """A unit name with its per-mount part folded (one report row per kind of unit)."""
    return "llamarpc-sshfs-<mount>.service" if unit.startswith("llamarpc-sshfs-") else unit


def test_every_unit_is_hardened_and_unprivileged():
    seen = {}
    for name in ("node1", planned_worker()):
        host = lab(name)
        for unit in _units(host):
            user = host.run(f"systemctl show -p User --value {unit}").stdout.strip() or "root"
            score, verdict = _exposure(host, unit)
            kind = _template(unit)
            if kind not in seen or (score or 99) > (seen[kind][1] or 99):
                seen[kind] = (name, score, verdict, user)
    assert seen, "no llamarpc units found"
    for kind, (name, score, verdict, user) in sorted(seen.items()):
        record(
            12,
            f"{kind} on {name}: exposure {score} {verdict}, user {user}",
            ok=score is not None and score <= EXPOSURE_TARGET,
            key=f"12 {kind}",
            detail=kind,
        )
    high = {kind: row for kind, row in seen.items() if row[1] is None or row[1] > EXPOSURE_TARGET}
    assert not high, high


@pytest.fixture
def lsyncd_by_hand():
    """pool starts its lsyncd (the seed's config, delete on) by hand, around the masked unit; killed afterwards."""
    node1 = lab("node1")
    node1.run_expect([0], "runuser -u pool -- setsid lsyncd /data/home/pool/.lsyncd.conf.lua >/dev/null 2>&1 &")
    assert wait_for(lambda: node1.run("pgrep -u pool -x lsyncd").rc == 0, 20, 0.5)
    yield node1
    pids = node1.run("pgrep -u pool -x lsyncd").stdout.split()
    for pid in pids:
        node1.run(f"kill {pid}")


def test_lsyncd_with_delete_started_again_is_flagged_and_the_shards_survive(lsyncd_by_hand):
    before = shard_digests()
    model_dir = deployed_plan()["model_path"].rsplit("/", 1)[0]
    time.sleep(10)  # lsyncd's start-up sync (delay 1 s) has run by now
    # The protected directories of lab.yml: the model directory and the seed's, which lsyncd mirrors.
    rc, facts = module(
        "node1", "llamarpc.cluster.sync_hazard_facts", {"model_dirs": [model_dir, "/data/home/pool/work/models"]}
    )
    hazards = facts.get("ansible_facts", {}).get("sync_hazards", {})
    flagged = [h for h in hazards.get("unresolved", []) if "lsyncd" in str(h.get("id", "")) + str(h.get("where", ""))]
    after = shard_digests()
    intact = all(got == want for got, want in after.values()) and after == before
    record(
        4,
        f"audit: {len(flagged)} unresolved lsyncd hazard(s) ({'; '.join(h.get('where', '') for h in flagged)[:160]}); "
        f"shards {'intact (sha256 unchanged)' if intact else 'CHANGED OR LOST'}",
        ok=rc == 0 and bool(flagged) and intact,
    )
    assert rc == 0, facts
    assert flagged, hazards.get("summary_lines")
    assert intact, after
