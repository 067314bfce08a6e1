"""The hazard is real: before the role ran, lsyncd deleted a shard that existed only on the workers.

prepare.yml measured it (molecule runs converge - the role - before verify, so it cannot be measured here):
it placed a shard only in the workers' target directories, checked it was still there while lsyncd ran,
killed lsyncd with SIGKILL as the seed's operator did, waited for systemd (Restart=always) to start a new
lsyncd and for the shard to disappear. prepare.yml fails when any of that does not happen; these tests read
what it recorded and hold it to the numbers.
"""

from __future__ import annotations

import json

import pytest
from conftest import EPHEMERAL, WORKERS

PROOF = json.loads((EPHEMERAL / "hazard-proof.json").read_text(encoding="utf-8"))


def test_the_shard_existed_only_on_the_workers_while_lsyncd_ran():
    assert PROOF["shard_before_kill"] == dict.fromkeys(WORKERS, True)


def test_killing_lsyncd_was_useless_systemd_restarted_it():
    assert PROOF["new_pid"] not in {0, PROOF["killed_pid"]}
    assert PROOF["restarts_after"] == PROOF["restarts_before"] + 1


@pytest.mark.parametrize("worker", WORKERS)
def test_the_restarted_lsyncd_deleted_the_shard(worker):
    seconds = PROOF["gone_at"][worker] - PROOF["killed_at"]
    # Both times are controller timestamps around Ansible tasks, so the gap holds Ansible's own overhead too: the
    # claim is "deleted after systemd restarted it" (the order), not how fast; prepare.yml's wait bounds the time.
    assert seconds > 0, f"shard on {worker} gone {seconds:.1f} s after the kill"


def test_lsyncd_was_mirroring_not_broken():
    assert PROOF["notes_mirrored"] == dict.fromkeys(WORKERS, True)
