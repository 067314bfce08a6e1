"""node1's mount of node2's model directory (llama_model made it in converge): supervised, read-only,
byte-exact, signals ignored, idempotent, stopped cleanly."""

import signal

from conftest import sha256
from labtest import lab, wait_for
from sshfs_lab import (
    CLIENT,
    EXPORT_DIR,
    EXPORT_USER,
    FILES,
    MOUNT,
    SERVER,
    UNIT,
    VIEW,
    address,
    mount_args,
    run_mount,
    sig_ignored,
    sshfs_entry,
    timed,
    unit_state,
)

MASKED = {signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT}


def test_mounted_by_the_enabled_unit():
    client = lab(CLIENT)
    entry = sshfs_entry(client)
    assert entry is not None, "no fuse.sshfs mount at the mount point"
    assert entry[1] == f"{EXPORT_USER}@{address(SERVER)}:{VIEW}"
    assert "ro" in client.check_output(f"findmnt -n -o OPTIONS {MOUNT}").split(",")
    state = unit_state(client)
    assert state["ActiveState"] == "active"
    assert state["UnitFileState"] == "enabled"
    unit = client.file(f"/etc/systemd/system/{UNIT}").content_string
    assert "Restart=always" in unit
    assert "nohup" not in unit


def test_every_file_reads_back_byte_exact():
    client, server = lab(CLIENT), lab(SERVER)
    for name in FILES:
        assert sha256(client, f"{MOUNT}/{name}") == sha256(server, f"{EXPORT_DIR}/{name}"), name


def test_mount_is_read_only():
    client = lab(CLIENT)
    assert client.run(f"touch {MOUNT}/written-by-client").rc != 0
    assert not lab(SERVER).file(f"{EXPORT_DIR}/written-by-client").exists


def test_sshfs_runs_with_hup_term_int_quit_ignored():
    client = lab(CLIENT)
    pid = unit_state(client)["MainPID"]
    assert client.check_output(f"cat /proc/{pid}/comm") == "sshfs"
    assert sig_ignored(client, pid) >= MASKED
    result = run_mount(mount_args())
    assert {"HUP", "TERM", "INT", "QUIT"} <= set(result["signals_ignored"])


def test_ignored_signals_do_not_end_sshfs():
    client = lab(CLIENT)
    pid = unit_state(client)["MainPID"]
    for sig in ("HUP", "INT", "QUIT", "TERM"):
        client.check_output(f"kill -{sig} {pid}")
    # No wait: the event is sshfs answering a request sent after the signals. A fatal signal marks the process as
    # exiting when it is sent, and a thread that reads the next FUSE request from /dev/fuse would exit on its way
    # back to user space instead of answering it. statfs always reaches the daemon (FUSE caches attributes and pages,
    # never statfs), and from there the server.
    assert client.run(f"timeout 10 stat -f {MOUNT}").rc == 0
    assert unit_state(client)["MainPID"] == pid
    assert client.check_output(f"awk '/^State:/ {{print $2}}' /proc/{pid}/status") in {"S", "R", "D"}


def test_rerun_and_check_mode_change_nothing():
    for check in (True, False, True):
        result = run_mount(mount_args(), check=check)
        assert not result["failed"], result
        assert not result["changed"], result
        assert result["health"] == "ok"
        assert result["mmap_ok"] is False  # direct_io, as the role mounted it


def test_check_mode_predicts_an_option_change_and_changes_nothing():
    client = lab(CLIENT)
    before = client.file(f"/etc/systemd/system/{UNIT}").content_string
    pid = unit_state(client)["MainPID"]
    result = run_mount(mount_args(server_alive_interval=20), check=True)
    assert result["changed"]
    assert "write unit" in result["actions"]
    assert "restart unit" in result["actions"]
    assert client.file(f"/etc/systemd/system/{UNIT}").content_string == before
    assert unit_state(client)["MainPID"] == pid


def test_stopping_the_unit_unmounts_cleanly_without_waiting_for_its_timeout():
    """sshfs ignores SIGTERM, so the unit stops it by unmounting (ExecStop), not by waiting for a timeout."""
    client = lab(CLIENT)
    # No bound in seconds (a loaded machine stretches any stop). sshfs ignores SIGTERM, so ExecStop unmounts and then
    # systemd sends the unit's KillSignal, SIGKILL, to whatever is left at once: sshfs ends by itself after the
    # unmount (Result=success) or, when it has not yet, by that SIGKILL (Result=signal, status 9). Any other signal,
    # or a stop that waited for TimeoutStopSec (Result=timeout: a process SIGKILL could not end), is a failure.
    try:
        seconds = timed(client, f"systemctl stop {UNIT}")
        shown = client.check_output(f"systemctl show -p Result -p ExecMainCode -p ExecMainStatus {UNIT}")
        state = dict(line.split("=", 1) for line in shown.splitlines())
        print(f"stop took {seconds:.1f} s: {state}")
        assert state["Result"] in {"success", "signal"}, f"the stop did not end cleanly: {state}"
        if state["Result"] == "signal":
            # ExecMainCode 2 is CLD_KILLED: ended by the signal in ExecMainStatus.
            assert (state["ExecMainCode"], state["ExecMainStatus"]) == ("2", str(int(signal.SIGKILL))), state
        assert sshfs_entry(client) is None
        # Only this mount's sshfs: the coordinator also mounts node3's shards.
        assert client.run(f"pgrep -f -- 'sshfs .*{MOUNT}( |$)'").rc != 0
    finally:
        client.check_output(f"systemctl start {UNIT}")  # the next test needs the mount, whatever happened here
    assert wait_for(lambda: sshfs_entry(client))


def test_unmounted_then_mounted_again():
    client = lab(CLIENT)
    assert run_mount(mount_args(state="unmounted"), check=True)["changed"]
    assert sshfs_entry(client) is not None
    result = run_mount(mount_args(state="unmounted"))
    assert result["changed"] and result["health"] == "not_mounted"
    assert sshfs_entry(client) is None
    assert unit_state(client)["UnitFileState"] == "enabled"
    assert not run_mount(mount_args(state="unmounted"))["changed"]
    assert run_mount(mount_args(), check=True)["changed"]
    result = run_mount(mount_args())
    assert result["changed"] and result["health"] == "ok"
    assert not run_mount(mount_args())["changed"]


def test_remounted_always_restarts():
    client = lab(CLIENT)
    pid = unit_state(client)["MainPID"]
    result = run_mount(mount_args(state="remounted"))
    assert result["changed"] and result["health"] == "ok"
    assert result["pid"] != int(pid)
