"""The exclude mode (converge_exclude.yml, run here after the disable-mode checks): lsyncd syncs again, with
delete = false and the model directory excluded. The kill that deleted shards in the proof now deletes nothing.
"""

from __future__ import annotations

import time

import pytest
from conftest import (
    LSYNCD_CONFIG,
    MASTER,
    MODELS,
    WORK,
    WORKERS,
    hazard,
    lab,
    playbook,
    put_file,
    restart_lsyncd_by_kill,
    scan,
    sha256,
    unit_state,
    wait_for,
)


@pytest.fixture(scope="module")
def converged():
    """converge_exclude.yml twice: the first run changes things, the second must not."""
    first = playbook("converge_exclude.yml")
    assert first[0] == 0, first[1][-6000:]
    second = playbook("converge_exclude.yml")
    assert second[0] == 0, second[1][-6000:]
    return first, second


def arrives(path, text):
    """True once every worker has ``path`` with ``text`` in it."""
    return all(text in (lab(name).run(f"cat {path}").stdout or "") for name in WORKERS)


def test_exclude_mode_changes_then_is_idempotent(converged):
    first, second = converged
    assert first[2][MASTER] > 0
    assert second[2] == dict.fromkeys([MASTER, *WORKERS], 0), second[1][-4000:]


def test_lsyncd_runs_again_in_pools_user_scope(converged):
    state = unit_state(lab(MASTER))
    assert state["ActiveState"] == "active" and state["SubState"] == "running", state
    assert state["UnitFileState"] == "enabled", state


def test_the_config_excludes_the_models_and_turns_delete_off(converged):
    host = lab(MASTER)
    config = host.file(LSYNCD_CONFIG)
    assert "delete = false," in config.content_string
    assert "exclude = { '/models/' }," in config.content_string
    assert config.user == "pool" and config.mode == 0o644
    backups = host.run("ls -a /data/home/pool/ | grep -c '^\\.lsyncd\\.conf\\.lua\\..*~$'").stdout.strip()
    assert backups == "1"  # the original kept once, not again on the idempotent run
    found = hazard(scan(MASTER), "lsyncd:unit:user:pool:lsyncd.service")
    assert found["overlaps_model_dir"] and found["neutralised"]
    assert found["deletes"] is False


def test_other_files_keep_syncing(converged):
    stamp = str(time.time())
    put_file(lab(MASTER), f"{WORK}/still-syncing.txt", text=stamp)
    assert wait_for(lambda: arrives(f"{WORK}/still-syncing.txt", stamp))


def test_shards_survive_the_restart_that_deleted_them_before(converged):
    # The proof's sequence again: a shard only on the workers, lsyncd killed, systemd restarts it, the
    # restarted lsyncd runs its full start-up sync. This time the shard (and any worker-only file) stays.
    shard = f"{MODELS}/proof-00002-of-00002.gguf"
    placed = {name: put_file(lab(name), shard, size_kib=1024) for name in WORKERS}
    worker_only = {name: put_file(lab(name), f"{WORK}/only-on-{name}.txt", text=name) for name in WORKERS}
    restart_lsyncd_by_kill(lab(MASTER))
    stamp = str(time.time())
    put_file(lab(MASTER), f"{WORK}/after-restart.txt", text=stamp)
    # No wait after the arrival: lsyncd processes nothing before its start-up sync is done, so a file written after
    # the restart arrives only after that sync, the one that deleted the shard before.
    assert wait_for(lambda: arrives(f"{WORK}/after-restart.txt", stamp))
    for name in WORKERS:
        assert sha256(lab(name), shard) == placed[name], f"shard on {name} deleted or changed"
        assert sha256(lab(name), f"{WORK}/only-on-{name}.txt") == worker_only[name]


def test_the_masters_model_directory_is_not_pushed(converged):
    put_file(lab(MASTER), f"{MODELS}/master-only.gguf", size_kib=64)
    stamp = str(time.time())
    put_file(lab(MASTER), f"{WORK}/pushed-after-models.txt", text=stamp)
    # No wait after the arrival: lsyncd syncs its events in order, so the later file's arrival means the model
    # file's event, written first, was handled (and excluded).
    assert wait_for(lambda: arrives(f"{WORK}/pushed-after-models.txt", stamp))
    for name in WORKERS:
        assert not lab(name).file(f"{MODELS}/master-only.gguf").exists
