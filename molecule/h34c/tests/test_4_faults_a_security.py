"""Fault matrix, faults that leave serving alone: busy probe (9), who reaches the RPC port (10), hardened units and who
they run as (12), lsyncd with delete started again (4). Each test records what it saw in the report (faultreport)."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from pathlib import Path

import pytest
from clusterlib import RPC_PORT, deployed_plan, main_pid, model_dir, module, rpc_connect, serving, shards_intact
from faultreport import record
from labtest import address, inventory_hosts, lab, wait_for
from unit_users import distinct_user_findings, root_unit_findings, template, units

EXPOSURE_TARGET = 4.0


def planned_worker(not_coordinator=True):
    """A worker of the deployed plan (not node1 unless allowed): it is busy serving llama-server."""
    names = [row["name"] for row in deployed_plan()["plan"]["workers"]]
    return [name for name in names if not (not_coordinator and name == "node1")][0]


@pytest.mark.fault(9)
def test_a_probe_of_a_busy_worker_reports_busy_and_the_worker_stays_alive():
    assert serving()
    name = planned_worker()
    host = lab(name)
    pid = main_pid(host, "llamarpc-rpc-worker")
    start = time.monotonic()
    rc, result = module("node1", "llamarpc.cluster.rpc_endpoint_facts", {"endpoints": [f"{address(name)}:{RPC_PORT}"]})
    state = (result.get("ansible_facts", {}).get("rpc_endpoints") or [{}])[0].get("state")
    # No wait: the event is a completion served after the probe, through this busy worker (it is planned), while the
    # dead probe connection waits in its backlog; then the worker is the same process.
    still = serving()
    alive = main_pid(host, "llamarpc-rpc-worker") == pid and host.service("llamarpc-rpc-worker").is_running
    record(
        9,
        f"probe of {name} from the coordinator: state {state}; "
        f"worker PID {'unchanged' if alive else 'CHANGED'}; "
        f"{'still serving' if still else 'NOT serving'} ({time.monotonic() - start:.1f} s)",
        ok=rc == 0 and state == "busy" and alive and still,
    )
    assert rc == 0, result
    assert state == "busy", result
    assert alive and still


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


@pytest.mark.fault(10)
def test_the_rpc_port_is_refused_from_a_non_coordinator_and_from_the_controller():
    target = planned_worker()
    other = [name for name in inventory_hosts() if name not in ("node1", target)][0]
    pid = main_pid(lab(target), "llamarpc-rpc-worker")
    # A connect from another lab host; python closes abortively from the controller.
    from_peer = rpc_connect(other, target)
    from_controller = _connect(address(target), RPC_PORT)
    # The bridge address the controller's packets come from (the host's view of its peer).
    bridge = lab(target).run("ip route show default; ip neigh").stdout
    # The positive control: "refused" is also what a port without a listener gives. The worker listens on it, and
    # the coordinator's connect is accepted in the same test (it waits in the worker's backlog, as fault 9's probe).
    listening = lab(target).run(f"ss -ltnH 'sport = :{RPC_PORT}'").stdout.split()
    listener = next((field for field in listening if field.endswith(f":{RPC_PORT}")), "")
    from_coordinator = rpc_connect("node1", target)
    still = serving()
    record(
        10,
        f"{target} listens on {listener or 'NOTHING'}; node1 (coordinator) -> {target}:{RPC_PORT}: {from_coordinator}; "
        f"{other} -> {target}:{RPC_PORT}: {from_peer}; controller (bridge) -> {target}:{RPC_PORT}: {from_controller}",
        ok=(
            bool(listener)
            and from_coordinator == "connected"
            and (from_peer, from_controller) == ("refused", "refused")
            and still
        ),
        key="10 rpc-port",
        detail="RPC port from a non-coordinator host and from the controller, beside an accepted coordinator",
    )
    # A listener on the worker's own address, not on every address (0.0.0.0, *, [::]).
    assert listener and not listener.startswith(("0.0.0.0:", "*:", "[::]:")), listening
    assert from_coordinator == "connected", from_coordinator
    assert from_peer == "refused", from_peer
    assert from_controller == "refused", bridge
    assert main_pid(lab(target), "llamarpc-rpc-worker") == pid
    assert still


#: The main process of these runs as the user its role made (ps -o user=).
MAIN_PROCESS_USERS = {"llamarpc-server.service": "llamarpc-server", "llamarpc-rpc-worker.service": "llamarpc"}
#: An account that is no unit's: the SFTP export's user (sshd runs its sessions), its own user too.
EXPORT_USER = "llamarpc-shards"


def _exposure(host, unit):
    out = host.run(f"systemd-analyze security --no-pager {unit}").stdout
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", out)
    return (float(found.group(1)), found.group(2)) if found else (None, out[-200:])


@pytest.mark.fault(12)
def test_every_unit_is_hardened_and_unprivileged():
    seen = {}
    for name in ("node1", planned_worker()):
        host = lab(name)
        for unit in units(host):
            score, verdict = _exposure(host, unit)
            kind = template(unit)
            if kind not in seen or (score or 99) > (seen[kind][1] or 99):
                seen[kind] = (name, score, verdict)
    assert seen, "no llamarpc units found"
    for kind, (name, score, verdict) in sorted(seen.items()):
        record(
            12,
            f"{kind} on {name}: exposure {score} {verdict}",
            ok=score is not None and score <= EXPOSURE_TARGET,
            key=f"12 {kind}",
            detail=kind,
        )
    high = {kind: row for kind, row in seen.items() if row[1] is None or row[1] > EXPOSURE_TARGET}
    assert not high, high


@pytest.mark.fault(12)
def test_every_unit_runs_as_its_own_user_unless_it_must_be_root():
    """User= of every llamarpc unit on every host against ROOT_UNITS, each root unit's reason as its capability
    bounding set (the unit's and its running main process's), one service per user (distinct uids and groups, the
    export's SFTP user included), and the user of llama-server's and of every worker's main process as ps sees it."""
    wrong, root_units, processes, users = [], set(), {}, {}
    for name in sorted(inventory_hosts()):
        host = lab(name)
        found, seen = root_unit_findings(host, name)
        wrong += found
        root_units |= seen
        accounts = [EXPORT_USER] if host.run(f"id -u {EXPORT_USER}").rc == 0 else []
        by_user, _ids, found = distinct_user_findings(host, name, accounts)
        wrong += found
        for user, owners in by_user.items():
            users.setdefault(user, set()).update(owners)
        units_here = units(host)
        for unit, expected in MAIN_PROCESS_USERS.items():
            if unit not in units_here:
                continue
            pid = main_pid(host, unit)
            user = host.run(f"ps -o user= -p {pid}").stdout.strip() if pid not in ("", "0") else "no process"
            processes[f"{unit.removesuffix('.service')}@{name}"] = user
            if user != expected:
                wrong.append(f"{unit} on {name}: main PID {pid} runs as {user!r}, expected {expected}")
    workers = [key for key in processes if key.startswith("llamarpc-rpc-worker@")]
    servers = [key for key in processes if key.startswith("llamarpc-server@")]
    record(
        12,
        f"root only: {', '.join(sorted(root_units)) or 'none'} (each bounded by its reason's capabilities); "
        f"users: {'; '.join(user + ' ' + '/'.join(sorted(owners)) for user, owners in sorted(users.items()))}; "
        "main processes: "
        f"{', '.join(f'{key} {user}' for key, user in sorted(processes.items()))}"
        + (f"; WRONG: {'; '.join(wrong)}" if wrong else ""),
        ok=not wrong and len(workers) == len(inventory_hosts()) and len(servers) == 1,
        key="12 users",
        detail="who every unit and main process runs as",
    )
    assert not wrong, wrong
    assert len(workers) == len(inventory_hosts()), processes
    assert servers == ["llamarpc-server@node1"], processes


#: The file molecule/lsyncd/prepare.yml (imported by this scenario's prepare, before converge) put only on the workers'
#: copy of pool's model directory, then watched the restarted lsyncd delete; what it saw is in hazard-proof.json.
PROOF_FILE = "/data/home/pool/work/models/proof-00001-of-00002.gguf"
#: How long lsyncd, once started, may take to mirror node1's model directory onto every worker (loaded machine).
SYNC_WAIT = 300


def _hazard_proof():
    path = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "hazard-proof.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _hazard_was_live(proof, workers):
    """The record of prepare: the proof file was on every worker while lsyncd ran, and gone from every worker after
    systemd restarted lsyncd (a new PID) - in the model directory this scenario uses."""
    return (
        proof is not None
        and PROOF_FILE.rsplit("/", 1)[0] == model_dir()
        and proof["shard_before_kill"] == dict.fromkeys(workers, True)
        and sorted(proof["gone_at"]) == sorted(workers)
        and all(proof["gone_at"][name] > proof["killed_at"] for name in workers)
        and proof["new_pid"] not in (0, proof["killed_pid"])
    )


@pytest.fixture
def lsyncd_test_files():
    """A marker in node1's model directory (what lsyncd would mirror) and a file only in one worker's copy (what
    lsyncd would delete), both pool's; removed afterwards wherever they are."""
    nonce = uuid.uuid4().hex[:8]
    files = {"marker": f"{model_dir()}/.fault4-marker-{nonce}", "worker_only": f"{model_dir()}/fault4-{nonce}.gguf"}
    yield files
    for name in inventory_hosts():
        lab(name).run(f"rm -f {files['marker']} {files['worker_only']}")


@pytest.mark.fault(4)
def test_lsyncd_with_delete_started_again_deletes_nothing(lsyncd_test_files):
    """Fault 4, in the seed's layout: shards in pool's model directory, which pool's lsyncd mirrors from node1 to
    every worker with delete on. First the hazard is shown live there (prepare's record). Then lsyncd is started
    again the way the seed's systemd did it (a restart of pool's unit, Restart=always): with lsyncd_neutralize it
    is refused (masked) and nothing deletes; without it, lsyncd's start-up sync deletes the worker-only file and
    clobbers the workers' shards, and the test waits until that sync has passed the model directory."""
    workers = sorted(name for name in inventory_hosts() if name != "node1")
    proof = _hazard_proof()
    live = _hazard_was_live(proof, workers)
    node1, witness = lab("node1"), lab(workers[0])
    witness.run_expect([0], f"runuser -u pool -- touch {lsyncd_test_files['worker_only']}")
    start = time.monotonic()
    restart = node1.run("systemctl --user -M pool@ restart lsyncd.service")
    started = restart.rc == 0
    # After the restart: a running lsyncd mirrors it only once its start-up sync (which deletes) is done, or in it.
    node1.run_expect([0], f"runuser -u pool -- touch {lsyncd_test_files['marker']}")
    synced = None
    if started:  # lsyncd runs: wait until its start-up sync has reached the model directory on every worker
        marker = lsyncd_test_files["marker"]
        synced = wait_for(lambda: all(lab(name).file(marker).exists for name in workers), SYNC_WAIT, 2)
    running = node1.run("pgrep -u pool -x lsyncd").stdout.split()
    survived = witness.file(lsyncd_test_files["worker_only"]).exists
    rc, facts = module("node1", "llamarpc.cluster.sync_hazard_facts", {"model_dirs": [model_dir()]})
    hazards = facts.get("ansible_facts", {}).get("sync_hazards", {})
    unresolved = [h.get("where", "") for h in hazards.get("unresolved", [])]
    intact, account = shards_intact(sorted(inventory_hosts()))
    record(
        4,
        f"hazard {'live' if live else 'NOT SHOWN'} in {model_dir()} before converge (prepare: a worker-only file "
        f"deleted on {len((proof or {}).get('gone_at', {}))} workers); lsyncd started again "
        f"(systemctl --user restart): {'STARTED' if started else 'refused (' + restart.stderr.strip()[:60] + ')'}"
        f"{'' if synced is None else ', its sync reached the workers' if synced else ', its sync did not arrive'}; "
        f"lsyncd processes: {running or 'none'}; worker-only file on {workers[0]} "
        f"{'survived' if survived else 'DELETED'}; audit: {len(unresolved)} unresolved; {account}",
        ok=live and not started and not running and survived and rc == 0 and not unresolved and intact,
        recover_s=None,
    )
    print(f"\nfault 4 after {time.monotonic() - start:.0f} s: started={started} synced={synced} {account}")
    assert live, proof
    assert rc == 0, facts
    assert intact, account
    assert survived, f"lsyncd deleted {lsyncd_test_files['worker_only']} on {workers[0]}"
    assert not started, restart.stdout
    assert not running
    assert not unresolved, unresolved
