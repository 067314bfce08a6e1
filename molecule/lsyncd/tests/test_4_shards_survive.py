"""Shards on the workers survive two minutes after the role, and a restart of pool's user manager.

The shards were placed when the disable-mode checks began (the session fixture ``shards``); the user manager
restart is the one that starts every enabled user unit of a lingering user again - a merely stopped, or
killed, lsyncd would come back and run its deleting start-up sync.
"""

from __future__ import annotations

import time

from conftest import (
    MASTER,
    SHARD,
    WORK,
    WORKERS,
    lab,
    pool_systemctl,
    pool_uid,
    put_file,
    sha256,
    unit_state,
    wait_for,
)

SURVIVAL_SECONDS = 120


def test_a_restart_of_pools_user_manager_does_not_bring_lsyncd_back(shards):
    host = lab(MASTER)
    uid = pool_uid(host)
    before = host.check_output(f"systemctl show -p MainPID --value user@{uid}.service")
    assert host.run(f"systemctl restart user@{uid}.service").rc == 0
    assert wait_for(
        lambda: (
            host.check_output(f"systemctl show -p MainPID --value user@{uid}.service") not in {"0", before}
            and host.run(f"test -S /run/user/{uid}/systemd/private").rc == 0
        ),
    )
    assert pool_systemctl(host, "is-system-running", "--wait").rc in {0, 1}  # running or degraded: it answers
    state = unit_state(host)
    assert state["ActiveState"] == "inactive" and state["UnitFileState"] == "masked", state
    assert host.run("pgrep -x lsyncd").rc == 1


def test_master_changes_are_no_longer_mirrored(shards):
    master = lab(MASTER)
    put_file(master, f"{WORK}/after-disable.txt", text="written after the role")
    # No wait for an absence: what could mirror the file is looked at instead. No lsyncd runs on the master (by
    # name or as any process whose executable is lsyncd), and pool's unit is masked, so nothing starts one.
    assert master.run("pgrep -x lsyncd").rc == 1
    exes = master.check_output("find /proc/[0-9]*/exe -maxdepth 0 -printf '%l\\n' 2>/dev/null || true")
    assert not any(line.rsplit("/", 1)[-1] == "lsyncd" for line in exes.splitlines()), exes
    assert unit_state(master)["UnitFileState"] == "masked"
    for name in WORKERS:
        assert not lab(name).file(f"{WORK}/after-disable.txt").exists


def test_shards_survive_two_minutes(shards):
    remaining = SURVIVAL_SECONDS - (time.monotonic() - shards["at"])
    if remaining > 0:
        time.sleep(remaining)
    assert time.monotonic() - shards["at"] >= SURVIVAL_SECONDS
    for name in WORKERS:
        assert sha256(lab(name), SHARD) == shards["sha256"][name], f"shard on {name} changed or vanished"
    # lsyncd wrote nothing to its log since the shards were placed: it never started again.
    log_mtime = int(lab(MASTER).check_output("stat -c %Y /data/home/pool/.lsyncd.log"))
    assert log_mtime < shards["epoch"]
