"""Helpers of the shards scenario's tests: the role run through ansible-playbook, the model's manifest, lab hosts.

Traffic goes only to this scenario's own lab hosts and to nginx on the controller's lab-bridge address.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from labtest import BIN, INVENTORY, REPO, ansible_env, lab

SCENARIO = Path(__file__).resolve().parents[1]
WORK = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "shards"
MODEL_OUT = WORK / "model"
RESULT = WORK / "result.json"
ACCESS_LOG = WORK / "nginx" / "access.log"
#: The seed's layout: pool's own directory in a home made by adduser (mode 0700), on the small /data (prepare.yml).
USER = "pool"
HOME = f"/home/{USER}"
MODEL_DIR = f"{HOME}/work/models/tiny"
MOUNT_ROOT = "/mnt/llamarpc"
COORDINATOR = "node1"
HOSTS = ("node1", "node2", "node3")
PORT = yaml.safe_load((SCENARIO / "vars" / "shards.yml").read_text(encoding="utf-8"))["shards_nginx_port"]
MANIFEST = json.loads((MODEL_OUT / "llamarpc-tiny-seed0.manifest.json").read_text(encoding="utf-8"))
FILES = MANIFEST["files"]
#: Where the plan puts each shard (coordinator /data 8M, node2 10M, node3 8M, reserve 512k; see lab.yml).
EXPECTED_HOSTS = {FILES[0]["name"]: "node1", FILES[1]["name"]: "node2", FILES[2]["name"]: "node3"}


def variables(name):
    out = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", INVENTORY, "--host", name],
        capture_output=True,
        text=True,
        check=True,
        env=ansible_env(),
    )
    return json.loads(out.stdout)


def controller_address():
    return variables(COORDINATOR)["llamarpc_lab_controller_address"]


def urls():
    base = f"http://{controller_address()}:{PORT}"
    return [{"url": f"{base}/{entry['name']}", "sha256": entry["sha256"]} for entry in FILES]


def place_command(*extra, urls_source=False, model_dir=None, tmp_path=None, extra_vars=None):
    """The ansible-playbook command line of place.yml (the role from a play on the coordinator)."""
    cmd = [str(BIN / "ansible-playbook"), "-i", INVENTORY, str(SCENARIO / "place.yml"), *extra]
    extra_vars = dict(extra_vars or {})
    if urls_source:
        extra_vars["shards_urls"] = urls()
    if model_dir:
        extra_vars["shards_model_dir_override"] = model_dir
    if extra_vars:
        path = (tmp_path or WORK) / "extra-vars.json"
        path.write_text(json.dumps(extra_vars), encoding="utf-8")
        cmd += ["-e", f"@{path}"]
    return cmd


def place(*extra, expect_ok=True, timeout=600, **kwargs):
    """Run the role (place.yml); (result dict or None, completed process)."""
    if RESULT.exists():
        RESULT.unlink()
    done = subprocess.run(
        place_command(*extra, **kwargs),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=ansible_env(MOLECULE_EPHEMERAL_DIRECTORY=os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]),
    )
    if expect_ok:
        assert done.returncode == 0, (
            f"place.yml failed ({done.returncode}):\n{done.stdout[-8000:]}\n{done.stderr[-2000:]}"
        )
    result = json.loads(RESULT.read_text(encoding="utf-8")) if RESULT.exists() else None
    return result, done


#: Arguments of a run that only plans and fetches (the export and the mounts are in place already).
FETCH_ONLY = ("--tags", "place,facts")


@pytest.fixture(scope="session")
def converged():
    """One run of the role on the converged lab: (result, completed process)."""
    return place()


def recap_changed(stdout, host=COORDINATOR):
    """changed= of ``host`` in the play recap."""
    for line in stdout.splitlines():
        if line.startswith(host) and "changed=" in line:
            return int(line.split("changed=")[1].split()[0])
    raise AssertionError(f"no recap for {host}:\n{stdout[-3000:]}")


def sha256(host, path):
    return host.check_output(f"timeout 120 sha256sum {path}").split()[0]


def unit_of(name):
    """The systemd unit sshfs_masked_mount made for the coordinator's mount of ``name``'s model directory."""
    return f"llamarpc-sshfs-mnt-llamarpc-{name}.service"


def unit_pid(host, unit):
    return host.check_output(f"systemctl show -p MainPID --value {unit}").strip()


def writable(host, path):
    """Make a read-only shard writable (root) for a test that damages it."""
    host.check_output(f"chmod 0644 {path}")


def kill_tree(proc):
    """SIGKILL a local process and everything below it (ansible-playbook and its workers)."""
    pids = [proc.pid]
    todo = [proc.pid]
    while todo:
        current = todo.pop()
        children = Path(f"/proc/{current}/task/{current}/children")
        try:
            found = [int(pid) for pid in children.read_text(encoding="ascii").split()]
        except OSError:
            found = []
        pids.extend(found)
        todo.extend(found)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    proc.wait()


__all__ = ["lab"]
