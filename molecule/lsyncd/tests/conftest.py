"""Helpers of the lsyncd scenario's tests: lab hosts by name, pool's user manager, the scanner, playbooks.

Traffic goes only to this scenario's own lab hosts (the inventory molecule's create step wrote).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from labtest import INVENTORY, adhoc, lab, run_ansible, wait_for

EPHEMERAL = Path(INVENTORY).parent
SCENARIO = Path(__file__).resolve().parents[1]

WORK = "/data/home/pool/work"
MODELS = f"{WORK}/models"
MASTER = "node1"
WORKERS = ["node2", "node3"]
LSYNCD_CONFIG = "/data/home/pool/.lsyncd.conf.lua"
SHARD = f"{MODELS}/qwen2.5-32b-instruct-q4_k_m-00004-of-00005.gguf"


def playbook(name, *args, timeout=600):
    """Run a playbook of this scenario against the lab: (returncode, output, {host: changed count})."""
    result = run_ansible("ansible-playbook", SCENARIO / name, *args, timeout=timeout)
    output = result.stdout + result.stderr
    changed = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", output, re.M)}
    return result.returncode, output, changed


def scan(name, model_dirs=(MODELS,)):
    """sync_hazards facts of one host, from the collection's own module (read-only)."""
    done, result = adhoc(name, "llamarpc.cluster.sync_hazard_facts", {"model_dirs": list(model_dirs)})
    assert done.returncode == 0 and result is not None, done.stdout + done.stderr
    return result["ansible_facts"]["sync_hazards"]


def hazard(facts, hazard_id):
    found = [h for h in facts["hazards"] if h["id"] == hazard_id]
    assert found, f"{hazard_id} not in {[h['id'] for h in facts['hazards']]}"
    return found[0]


def pool_uid(host):
    return int(host.check_output("id -u pool"))


def pool_systemctl(host, *args):
    """``systemctl --user`` in pool's own user manager (as pool, with its XDG_RUNTIME_DIR)."""
    uid = pool_uid(host)
    return host.run(f"runuser -u pool -- env XDG_RUNTIME_DIR=/run/user/{uid} systemctl --user " + " ".join(args))


def unit_state(host, unit="lsyncd.service"):
    out = pool_systemctl(host, "show", "-p", "ActiveState,SubState,UnitFileState,LoadState,MainPID", unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def put_file(host, path, size_kib=0, text=None):
    """Create a file owned by pool (random bytes or text) and return its sha256; any failing step fails the test."""
    if text is not None:
        host.check_output(f"printf '%s\\n' {text!r} > {path}")
    else:
        host.check_output(f"head -c {size_kib * 1024} /dev/urandom > {path}")
    host.check_output(f"chown pool:pool {path}")
    digest = sha256(host, path)
    assert digest is not None, f"{path} was not written on {host}"
    return digest


def sha256(host, path):
    """The file's sha256, or None when it does not exist; any other failure (unreadable, ssh) fails the test."""
    result = host.run(f"test ! -e {path} || sha256sum {path}")
    assert result.rc == 0, f"sha256 of {path}: rc {result.rc}: {result.stderr}"
    return result.stdout.split()[0] if result.stdout.strip() else None


def restart_lsyncd_by_kill(host):
    """Kill pool's lsyncd with SIGKILL and wait until systemd (Restart=always) has started a new one."""
    before = unit_state(host)["MainPID"]
    assert before != "0", "lsyncd is not running"
    host.run(f"kill -KILL {before}")
    after = wait_for(
        lambda: (s := unit_state(host))["MainPID"] not in {"0", before} and s["ActiveState"] == "active" and s
    )
    assert after, f"systemd did not restart lsyncd: {unit_state(host)}"
    return before, after["MainPID"]


@pytest.fixture(scope="session")
def shards():
    """Shards downloaded straight onto the workers after converge (4 MiB of random bytes each), and when.

    Placed when the disable-mode checks start; test_4_shards_survive.py waits until two minutes have passed
    since then (the checks in between, test_2 and test_3, run inside those two minutes).
    """
    placed = {name: put_file(lab(name), SHARD, size_kib=4096) for name in WORKERS}
    return {"sha256": placed, "at": time.monotonic(), "epoch": int(lab(MASTER).check_output("date +%s"))}
