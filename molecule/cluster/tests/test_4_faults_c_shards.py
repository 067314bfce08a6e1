"""Fault matrix, the shards: a hung SSHFS (3), a corrupted shard (6), a disk too small (7). Each test records what
it saw in the report (faultreport). A download interrupted (5) needs a server that honours Range: the report names
the tests that inject it (test_4_faults_z_report)."""

from __future__ import annotations

import json
import time

import pytest
from clusterlib import MANIFEST, changed_nothing, deployed_plan, playbook, serving
from faultreport import record
from labtest import INVENTORY, inventory_hosts, lab, wait_for

MOUNT_ROOT = "/mnt/llamarpc"


def model_dir():
    return deployed_plan()["model_path"].rsplit("/", 1)[0]


def sshfs_pid(host, target):
    """(PID, unit) of the sshfs process serving the mount at ``target`` (the unit's main process)."""
    unit = "llamarpc-sshfs-" + host.run_expect([0], f"systemd-escape --path --suffix=service {target}").stdout.strip()
    return host.run(f"systemctl show -p MainPID --value {unit}").stdout.strip(), unit


@pytest.mark.fault(3)
def test_a_hung_sshfs_is_reported_by_status_and_healed_by_site():
    node1 = lab("node1")
    mounts = node1.run("findmnt --raw --noheadings --types fuse.sshfs --output TARGET").stdout.split()
    target = sorted(m for m in mounts if m.startswith(MOUNT_ROOT))[0]
    pid, unit = sshfs_pid(node1, target)
    assert pid and pid != "0", (target, unit)
    node1.run_expect([0], f"kill -STOP {pid}")
    start = time.monotonic()
    try:
        # A listing always reaches sshfs; a stat of the mount point may be answered from the attribute cache.
        hung = node1.run(f"timeout --signal=KILL 3 ls -f {target}").rc
        status = playbook(INVENTORY, name="status.yml", timeout=600)
        reported = f"{target}: HUNG" in status.stdout
        heal = playbook(INVENTORY, "--tags", "llama_model")
        healed = wait_for(lambda: node1.run(f"timeout 5 stat -f {target}").rc == 0, 30)
        took = time.monotonic() - start
        new_pid = node1.run(f"systemctl show -p MainPID --value {unit}").stdout.strip()
    finally:
        node1.run(f"kill -CONT {pid}")
    record(
        3,
        f"sshfs of {target} SIGSTOPped: stat rc {hung}; "
        f"status.yml {'reports HUNG' if reported else 'DOES NOT report it'}; "
        f"site.yml --tags llama_model rc {heal.returncode}, mount {'healthy again' if healed else 'STILL HUNG'} "
        f"(sshfs PID {pid} -> {new_pid}); still serving: {serving()}",
        ok=hung != 0 and reported and heal.returncode == 0 and bool(healed),
        recover_s=took,
        key="3 sigstop",
        detail="sshfs hangs (SIGSTOP)",
    )
    assert hung != 0
    assert status.returncode == 0, status.stdout[-2000:]
    assert reported, status.stdout[-3000:]
    assert heal.returncode == 0, heal.stdout[-3000:]
    assert healed
    assert new_pid != pid


@pytest.mark.fault(6)
def test_a_corrupted_shard_is_detected_and_fetched_again():
    node1 = lab("node1")
    manifest = {shard["name"]: shard for shard in json.loads(MANIFEST.read_text())["files"]}
    local = [name for name in manifest if not node1.file(f"{model_dir()}/{name}").is_symlink]
    assert local, "node1 holds no shard of its own"
    path = f"{model_dir()}/{local[0]}"
    node1.run_expect(
        [0],
        f"chmod 0644 {path} && printf 'not the bytes you want' | dd of={path} bs=1 seek=4096 conv=notrunc status=none",
    )
    corrupted = node1.run_expect([0], f"sha256sum {path}").stdout.split()[0] != manifest[local[0]]["sha256"]
    start = time.monotonic()
    result = playbook(INVENTORY, "--tags", "llama_model")
    took = time.monotonic() - start
    restored = node1.run_expect([0], f"sha256sum {path}").stdout.split()[0] == manifest[local[0]]["sha256"]
    place = result.stdout[result.stdout.find("Plan the shards over the candidate hosts") :][:400]
    refetched = "changed: [node1]" in place
    record(
        6,
        f"22 bytes overwritten in {local[0]} on node1 (sha256 {'differs' if corrupted else 'SAME'}): site.yml "
        f"--tags llama_model rc {result.returncode}, {'re-fetched (changed)' if refetched else 'NOT re-fetched'}, "
        f"sha256 {'restored' if restored else 'STILL WRONG'}; mode {node1.file(path).mode:o}",
        ok=corrupted and result.returncode == 0 and refetched and restored,
        recover_s=took,
    )
    assert corrupted
    assert result.returncode == 0, result.stdout[-3000:]
    assert refetched, place
    assert restored
    assert node1.file(path).mode == 0o444


@pytest.mark.fault(7)
def test_a_disk_too_small_is_refused_before_any_download():
    other = "/data/faults-too-small"
    result = playbook(
        INVENTORY,
        "--tags",
        "llama_model",
        "-e",
        f"llama_model_dir={other}",
        "-e",
        "llama_model_reserve=1000G",
    )
    output = result.stdout + result.stderr
    left = [name for name in inventory_hosts() if lab(name).file(other).exists]
    record(
        7,
        f"1000G reserve on every candidate, new model dir: rc {result.returncode}, "
        f"{'says nothing was downloaded' if 'nothing was downloaded' in output else 'NO clear message'}, "
        f"{'no file written on any host' if not left else f'files on {left}'}, changed=0: {changed_nothing(result)}",
        ok=result.returncode != 0 and "nothing was downloaded" in output and not left,
    )
    assert result.returncode != 0
    assert "nothing was downloaded" in output, output[-3000:]
    assert not left
