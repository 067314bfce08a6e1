"""After converge (disable mode): lsyncd is stopped and masked where it ran, other deleting syncers too.

The first test places shards on the workers (the session fixture ``shards``); test_4_shards_survive.py checks
them two minutes later.
"""

from __future__ import annotations

import pytest
from conftest import MASTER, WORKERS, hazard, lab, pool_systemctl, scan, unit_state


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
