"""The seed's failures: sshfs killed, sshfs hung, sshd gone on the serving host - and who heals each."""

import time

import pytest
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


def process_state(host, pid):
    """State letter of ``pid`` (S, D, T, ...) from ps."""
    return host.check_output(f"ps -o state= -p {int(pid)}").strip()


@pytest.fixture(autouse=True)
def mount_healed_afterwards():
    """Whatever a test broke (and whether it passed or not), the next test starts from the converged mount: stopped
    processes continued, sshd running, the mount as the role made it and healthy."""
    yield
    client, server = lab(CLIENT), lab(SERVER)
    client.run("pkill -CONT -x sshfs; true")
    assert wait_for(lambda: sshd_back(server)), "sshd did not come back on the serving host"
    server.run(f"pkill -CONT -u {EXPORT_USER}; true")
    result = run_mount(mount_args(), timeout=600)
    assert result["health"] == "ok" and not result.get("failed"), f"could not restore the mount: {result}"


def healthy_again(client):
    # statvfs: answered by sshfs and the server, never from a cache.
    return client.run(f"timeout 10 stat -f {MOUNT}").rc == 0


def sshd_outage(server, seconds):
    """Stop sshd on the serving host, drop the export user's sessions, and have systemd start sshd again later.

    Ansible reaches the serving host over ssh too: the restart is a transient timer on the host itself.
    """
    # One remote command: the timer counts from the stop, however long a new Ansible connection takes.
    server.check_output(
        f"systemctl stop ssh.service; pgrep -u {EXPORT_USER} | xargs -r kill -KILL; "
        f"systemd-run --on-active={seconds} --timer-property=AccuracySec=100ms "
        "--unit=llamarpc-test-sshd-back-$(date +%s%N) systemctl start ssh.service"
    )


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
        lambda: (s := unit_state(client))["MainPID"] not in {"0", before["MainPID"]} and healthy_again(client) and s
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
    # Listing the directory now blocks (only a child with a timeout survives it): an opendir always reaches sshfs,
    # where a stat of the mount point can be answered from the kernel's attribute cache.
    assert client.run(f"timeout 3 ls {MOUNT}").rc == 124
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


def test_frozen_server_is_reported_hung_and_healed_by_state_mounted():
    """sshfs blocked on a server that no longer answers: the process sleeps (S), it is not stopped (T), and a stat
    is still answered from the caches. The module's probe (statvfs, which always travels to the server) reports
    the mount hung, and state=mounted heals it."""
    client, server = lab(CLIENT), lab(SERVER)
    # No keepalive for this mount: with one, ssh drops the frozen connection after 3 x 15 s and sshfs reconnects by
    # itself, so what the module sees would depend on how long the run takes.
    args = mount_args(server_alive_interval=0)
    assert run_mount(args)["health"] == "ok"
    # Warm the caches: from here a stat of the mount point and of the shard is answered without the server.
    client.check_output(f"stat {MOUNT} {MOUNT}/{BIG}")
    frozen = server.check_output(f"pgrep -u {EXPORT_USER}").split()
    assert frozen, f"no SFTP session of {EXPORT_USER} on {SERVER}"
    server.check_output(f"kill -STOP {' '.join(frozen)}")
    pid = unit_state(client)["MainPID"]
    check = run_mount(args, check=True)
    assert check["changed"] and check["health"] == "hung", check
    assert process_state(client, pid) in {"S", "D"}, "sshfs should be waiting on the server, not stopped"
    result = run_mount(args)
    print(f"\nfrozen server: health_before={result['health_before']} actions={result['actions']}")
    assert result["changed"] and result["health_before"] == "hung", result
    assert any(a.startswith("lazy unmount") for a in result["actions"])
    assert result["health"] == "ok"
    assert result["pid"] != int(pid)
    assert sha256(client, f"{MOUNT}/{BIG}") == sha256(server, f"{EXPORT_DIR}/{BIG}")


def test_sshd_stopped_and_restarted_is_healed_by_sshfs_reconnect():
    """Honest answer: with the default reconnect option sshfs reconnects on the next access by itself, so the
    next state=mounted finds the mount healthy and changes nothing."""
    client, server = lab(CLIENT), lab(SERVER)
    pid = unit_state(client)["MainPID"]
    sshd_outage(server, 3)
    assert wait_for(lambda: sshd_back(server))
    # The next access reconnects by itself (however long the new ssh handshake takes on a busy machine).
    assert wait_for(lambda: client.run(f"timeout 30 stat -f {MOUNT}").rc == 0)
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
    # Long enough that the module's first look comes while sshd is still down, even on a busy machine.
    sshd_outage(server, 90)
    # statvfs, not stat: it reaches the server (a stat may be answered from the caches for a while).
    assert wait_for(lambda: client.run(f"timeout 10 stat -f {MOUNT}").rc not in {0, 124})
    result = run_mount(mount_args(mount_timeout=300), timeout=600)
    print(f"\nsshd down: health_before={result['health_before']} actions={result['actions']}")
    assert result["changed"], result
    assert result["health_before"] in {"stale", "hung"}
    assert result["health"] == "ok"
    assert sshfs_entry(client) is not None
    assert not run_mount(mount_args())["changed"]
    assert wait_for(lambda: sshd_back(server))
