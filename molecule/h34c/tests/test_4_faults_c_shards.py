"""Fault matrix, the shards: a hung SSHFS and the serving host's sshd stopped (3), a corrupted shard (6), a disk too
small (7). Each test records what it saw in the report (faultreport). A download interrupted (5) is
test_4_faults_e_resume's."""

from __future__ import annotations

import json
import time

import pytest
from clusterlib import MANIFEST, api, changed_nothing, deployed_plan, greedy, in_host, playbook, status_report
from faultreport import record
from labtest import INVENTORY, inventory_hosts, lab, wait_for

MOUNT_ROOT = "/mnt/llamarpc"


def model_dir():
    return deployed_plan()["model_path"].rsplit("/", 1)[0]


def sshfs_pid(host, target):
    """(PID, unit) of the sshfs process serving the mount at ``target`` (the unit's main process)."""
    unit = "llamarpc-sshfs-" + host.run_expect([0], f"systemd-escape --path --suffix=service {target}").stdout.strip()
    return host.run(f"systemctl show -p MainPID --value {unit}").stdout.strip(), unit


def sshfs_mounts(node1):
    mounts = node1.run("findmnt --raw --noheadings --types fuse.sshfs --output TARGET").stdout.split()
    return sorted(m for m in mounts if m.startswith(MOUNT_ROOT))


def answer(prompt="The capital of France is"):
    """The greedy completion's text, or None when the API does not answer one."""
    status, body = api("/completion", greedy(prompt, 12), timeout=60)
    return body.get("content") if status == 200 and isinstance(body, dict) else None


def full_site():
    """site.yml, whole (demo.yml: the scenario's converge), as a user heals."""
    return playbook(INVENTORY)


@pytest.mark.fault(3)
def test_a_hung_sshfs_is_reported_by_status_and_healed_by_site():
    node1 = lab("node1")
    target = sshfs_mounts(node1)[0]
    pid, unit = sshfs_pid(node1, target)
    assert pid and pid != "0", (target, unit)
    expected = answer()
    assert expected is not None
    node1.run_expect([0], f"kill -STOP {pid}")
    start = time.monotonic()
    try:
        # A listing always reaches sshfs; a stat of the mount point may be answered from the attribute cache.
        hung = node1.run(f"timeout --signal=KILL 3 ls -f {target}").rc
        during = answer()  # llama-server holds the weights: it serves while the mount hangs
        status = playbook(INVENTORY, name="status.yml", timeout=600)
        reported = f"{target}: HUNG" in status.stdout
        heal = full_site()
        healed = wait_for(lambda: node1.run(f"timeout 5 stat -f {target}").rc == 0)
        took = time.monotonic() - start
        new_pid = node1.run(f"systemctl show -p MainPID --value {unit}").stdout.strip()
    finally:
        node1.run(f"kill -CONT {pid}")
    after = answer()
    record(
        3,
        f"sshfs of {target} SIGSTOPped: listing rc {hung}; served during it: {during == expected}; "
        f"status.yml {'reports HUNG' if reported else 'DOES NOT report it'}; "
        f"site.yml rc {heal.returncode}, mount {'healthy again' if healed else 'STILL HUNG'} "
        f"(sshfs PID {pid} -> {new_pid}); same answer after: {after == expected}",
        ok=hung != 0
        and during == expected
        and reported
        and heal.returncode == 0
        and bool(healed)
        and after == expected,
        recover_s=took,
        key="3 sigstop",
        detail="sshfs hangs (SIGSTOP)",
    )
    assert hung != 0
    assert during == expected
    assert status.returncode == 0, status.stdout[-2000:]
    assert reported, status.stdout[-3000:]
    assert heal.returncode == 0, heal.stdout[-3000:]
    assert healed
    assert new_pid != pid
    assert after == expected


@pytest.mark.fault(3)
def test_the_sshfs_serving_hosts_sshd_stopped_is_reported_and_healed_by_site(tmp_path):
    """The host that serves a shard over SFTP loses its sshd (stopped, its sessions gone): the cluster keeps serving
    from memory, status.yml names the mount and the host that does not answer, and once sshd runs there again
    site.yml's model step heals the mount (the SIGSTOP case above heals through the whole site.yml). sshd is stopped
    and started from the controller through the host's namespaces (Ansible needs it to connect)."""
    node1 = lab("node1")
    target = sshfs_mounts(node1)[0]
    name = target.rsplit("/", 1)[1]
    expected = answer()
    assert expected is not None
    stop = in_host(
        name, "systemctl stop ssh.socket ssh.service; pkill -KILL -u llamarpc-shards; systemctl is-active ssh"
    )
    start = time.monotonic()
    try:
        cut = node1.run(f"timeout --signal=KILL 10 ls -f {target}").rc
        during = answer()
        report = status_report(tmp_path)
    finally:
        started = in_host(name, "systemctl start ssh.service && systemctl is-active ssh.service")
    mounts = dict(item.split(": ", 1) for item in report.get("mounts", []))
    memory = dict(item.split(": ", 1) for item in report.get("memory_available", []))
    reported = mounts.get(target, "ok") != "ok" and memory.get(name) == "no answer"
    heal = playbook(INVENTORY, "--tags", "llama_model")
    healed = wait_for(lambda: node1.run(f"timeout 5 ls -f {target}").rc == 0)
    took = time.monotonic() - start
    after = answer()
    record(
        3,
        f"sshd of {name} (serving {target}) stopped, its SFTP sessions killed: listing rc {cut}; served during it: "
        f"{during == expected}; status.yml "
        + (f"reports the mount {mounts.get(target)} and {name}'s memory: no answer" if reported else f"{report}")
        + f"; sshd started again; site.yml --tags llama_model rc {heal.returncode}, mount "
        f"{'healthy again' if healed else 'STILL BROKEN'}; same answer after: {after == expected}",
        ok=all(
            (
                stop.stdout.strip().endswith("inactive"),
                cut != 0,
                during == expected,
                reported,
                heal.returncode == 0,
                bool(healed),
                after == expected,
            )
        ),
        recover_s=took,
        key="3 sshd",
        detail="the serving host's sshd stopped",
    )
    assert stop.stdout.strip().endswith("inactive"), (stop.stdout, stop.stderr)
    assert started.returncode == 0, (started.stdout, started.stderr)
    assert cut != 0
    assert during == expected
    assert reported, report
    assert heal.returncode == 0, heal.stdout[-3000:]
    assert healed
    assert after == expected


def task_output(output, name):
    """The lines a playbook run printed for its task named ``name``, up to the next task ("" if it never ran)."""
    start = output.find(f": {name}")
    if start < 0:
        return ""
    end = output.find("TASK [", start)
    return output[start : end if end > 0 else len(output)]


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
    place = task_output(result.stdout, "Fetch, verify and link each host's shards on that host")
    refetched = "changed: [node1]" in place  # node1's own item (another host's reads "[node1 -> nodeN]")
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
        ok=result.returncode != 0 and "nothing was downloaded" in output and not left and changed_nothing(result),
    )
    assert result.returncode != 0
    assert "nothing was downloaded" in output, output[-3000:]
    assert not left
    assert changed_nothing(result), output[-3000:]
