"""After converge (disable mode): lsyncd is stopped and masked where it ran, and shards survive.

The shards are placed on the workers when this module starts; the last test waits until two minutes have
passed since then, after a restart of pool's user manager in between (the restart that would start a merely
disabled, or enabled, lsyncd again).
"""

from __future__ import annotations

import time

import pytest
from conftest import (
    MASTER,
    MODELS,
    WORK,
    WORKERS,
    hazard,
    lab,
    pool_systemctl,
    pool_uid,
    put_file,
    scan,
    sha256,
    unit_state,
    wait_for,
)

SURVIVAL_SECONDS = 120
SHARD = f"{MODELS}/qwen2.5-32b-instruct-q4_k_m-00004-of-00005.gguf"


@pytest.fixture(scope="module")
def shards():
    """Shards downloaded straight onto the workers (4 MiB of random bytes each), and when."""
    placed = {name: put_file(lab(name), SHARD, size_kib=4096) for name in WORKERS}
    return {"sha256": placed, "at": time.monotonic(), "epoch": int(lab(MASTER).check_output("date +%s"))}


def test_lsyncd_is_inactive_and_masked_in_pools_user_scope(shards):
    state = unit_state(lab(MASTER))
    assert state["ActiveState"] == "inactive", state
    assert state["UnitFileState"] == "masked", state
    assert state["LoadState"] == "masked", state
    assert pool_systemctl(lab(MASTER), "is-enabled", "lsyncd.service").stdout.strip() == "masked"


@pytest.mark.parametrize("name", [MASTER, *WORKERS])
def test_no_lsyncd_process_and_system_lsyncd_masked(shards, name):
    host = lab(name)
    assert host.run("pgrep -x lsyncd").rc == 1
    assert host.run("systemctl is-enabled lsyncd.service").stdout.strip() == "masked"


def test_the_unit_file_moved_below_the_mask(shards):
    host = lab(MASTER)
    mask = host.file("/data/home/pool/.config/systemd/user/lsyncd.service")
    assert mask.is_symlink and mask.linked_to == "/dev/null"
    moved = host.file("/data/home/pool/.local/share/systemd/user/lsyncd.service")
    assert moved.is_file and moved.user == "pool"
    assert "Restart=always" in moved.content_string


def test_the_scan_reports_lsyncd_neutralised(shards):
    facts = scan(MASTER)
    found = hazard(facts, "lsyncd:unit:user:pool:lsyncd.service")
    assert found["overlaps_model_dir"] and found["neutralised"]
    assert found["deletes"] is True  # the config still says nothing about delete: it would delete if started
    assert "deletes by default" in found["detail"]
    assert facts["unresolved"] == []


def test_other_deleting_syncers_are_disabled(shards):
    node2, node3 = lab("node2"), lab("node3")
    assert node2.run("systemctl is-enabled models-mirror.service").stdout.strip() == "masked"
    assert node2.run("systemctl is-active models-mirror.timer").stdout.strip() == "inactive"
    assert node2.file("/usr/local/lib/systemd/system/models-mirror.service").is_file
    crontab = node3.file("/var/spool/cron/crontabs/pool").content_string
    assert "# disabled by llamarpc.cluster.lsyncd_neutralize: */10 * * * * rsync -a --delete" in crontab
    assert "\n@daily rsync -a /data/home/pool/work/ /srv/backup/" in crontab  # not deleting: left alone
    assert hazard(scan("node2"), "rsync:unit:system:models-mirror.service")["neutralised"]
    assert hazard(scan("node3"), "rsync:cron:/var/spool/cron/crontabs/pool:3")["neutralised"]


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
        timeout=30,
    )
    assert pool_systemctl(host, "is-system-running", "--wait").rc in {0, 1}  # running or degraded: it answers
    state = unit_state(host)
    assert state["ActiveState"] == "inactive" and state["UnitFileState"] == "masked", state
    assert host.run("pgrep -x lsyncd").rc == 1


def test_master_changes_are_no_longer_mirrored(shards):
    put_file(lab(MASTER), f"{WORK}/after-disable.txt", text="written after the role")
    time.sleep(5)
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
