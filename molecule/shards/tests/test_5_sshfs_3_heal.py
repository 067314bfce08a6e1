"""The seed's failures: sshfs killed, sshfs hung, sshd gone on the serving host - and who heals each."""

import time

from conftest import sha256
from labtest import lab, wait_for
from sshfs_lab import (
    BIG,
    CLIENT,
    EXPORT_DIR,
    EXPORT_USER,
    MOUNT,
    SERVER,
    mount_args,
    run_mount,
    sshfs_entry,
    unit_state,
)


def healthy_again(client):
    return client.run(f"timeout 10 stat {MOUNT}/{BIG}").rc == 0


def sshd_outage(server, seconds):
    """Stop sshd on the serving host, drop the export user's sessions, and have systemd start sshd again later.

    Ansible reaches the serving host over ssh too: the restart is a transient timer on the host itself.
    """
    server.check_output(
        f"systemd-run --on-active={seconds} --timer-property=AccuracySec=100ms "
        "--unit=llamarpc-test-sshd-back-$(date +%s%N) systemctl start ssh.service"
    )
    server.check_output(f"systemctl stop ssh.service; pgrep -u {EXPORT_USER} | xargs -r kill -KILL; true")


def sshd_back(server):
    """True once Ansible reaches the serving host again (testinfra raises while sshd is down)."""
    try:
        return server.run("systemctl is-active ssh.service").stdout.strip() == "active"
    except RuntimeError:
        return False


def test_kill_9_is_healed_by_the_unit():
    """Honest answer: systemd (Restart=always + the lazy unmount in ExecStopPost/ExecStartPre) heals it."""
    client = lab(CLIENT)
    before = unit_state(client)
    client.check_output(f"kill -KILL {before['MainPID']}")
    after = wait_for(
        lambda: (s := unit_state(client))["MainPID"] not in {"0", before["MainPID"]} and healthy_again(client) and s,
        timeout=30,
    )
    assert after, f"systemd did not bring the mount back: {unit_state(client)}"
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1
    result = run_mount(mount_args())
    assert not result["changed"], result
    assert result["health"] == "ok"


def test_sigstop_hang_is_detected_and_healed_by_state_mounted():
    client = lab(CLIENT)
    pid = unit_state(client)["MainPID"]
    client.check_output(f"kill -STOP {pid}")
    # A stat of the mount point now blocks; only a child with a timeout survives it.
    assert client.run(f"timeout 3 stat {MOUNT}").rc == 124
    check = run_mount(mount_args(), check=True)
    assert check["changed"] and check["health"] in {"stopped", "hung"}, check
    started = time.monotonic()
    result = run_mount(mount_args())
    elapsed = time.monotonic() - started
    print(f"\nSIGSTOP heal: health_before={result['health_before']} actions={result['actions']} in {elapsed:.1f} s")
    assert result["changed"]
    assert result["health_before"] in {"stopped", "hung"}
    assert any(a.startswith("lazy unmount") for a in result["actions"])
    assert result["health"] == "ok"
    assert result["pid"] != int(pid)
    assert sha256(client, f"{MOUNT}/{BIG}") == sha256(lab(SERVER), f"{EXPORT_DIR}/{BIG}")
    assert not run_mount(mount_args())["changed"]


def test_sshd_stopped_and_restarted_is_healed_by_sshfs_reconnect():
    """Honest answer: with the default reconnect option sshfs reconnects on the next access by itself, so the
    next state=mounted finds the mount healthy and changes nothing."""
    client, server = lab(CLIENT), lab(SERVER)
    pid = unit_state(client)["MainPID"]
    sshd_outage(server, 3)
    assert wait_for(lambda: sshd_back(server), timeout=60)
    result = run_mount(mount_args())
    print(f"\nsshd restarted: changed={result['changed']} health_before={result['health_before']}")
    assert result["health"] == "ok"
    assert not result["changed"], result
    assert unit_state(client)["MainPID"] == pid
    assert healthy_again(client)


def test_sshd_down_is_detected_and_healed_by_state_mounted():
    """While sshd is down the mount answers EIO (stale): state=mounted reports it, remounts and waits until the
    serving host is back (mount_timeout), and reports changed."""
    client, server = lab(CLIENT), lab(SERVER)
    sshd_outage(server, 45)
    assert wait_for(lambda: client.run(f"timeout 10 stat {MOUNT}").rc not in {0, 124}, timeout=20)
    result = run_mount(mount_args(mount_timeout=120))
    print(f"\nsshd down: health_before={result['health_before']} actions={result['actions']}")
    assert result["changed"], result
    assert result["health_before"] in {"stale", "hung"}
    assert result["health"] == "ok"
    assert sshfs_entry(client) is not None
    assert not run_mount(mount_args())["changed"]
    assert wait_for(lambda: sshd_back(server), timeout=60)
