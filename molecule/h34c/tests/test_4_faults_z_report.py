"""The fault matrix report: all twelve faults with observed outcomes, written as Markdown and JSON into the scenario's
ephemeral directory and printed; and nothing was lost: every shard reads back with its checksum."""

from __future__ import annotations

from clusterlib import shard_digests
from faultreport import FAULTS, json_path, observed_faults, record, rows, write


def test_nothing_was_lost_every_shard_keeps_its_checksum():
    digests = shard_digests()
    changed = [name for name, (got, want) in digests.items() if got != want]
    record(
        6,
        f"end of the suite: {len(digests) - len(changed)}/{len(digests)} shards read back with their manifest sha256",
        ok=not changed,
        key="6 end",
        detail="nothing lost at the end of the suite",
        follow_up=True,
    )
    assert digests and not changed


def test_the_report_lists_all_twelve_faults_with_observed_outcomes():
    text = write()
    print(f"\nfault matrix ({json_path().parent}):\n{text}")
    numbers = observed_faults()  # by each fault's own test: the shard rows after a fault do not count
    assert numbers == set(FAULTS), f"not observed by their own tests: {sorted(set(FAULTS) - numbers)}"
    assert all(row["observed"] for row in rows())
    failed = [row["key"] for row in rows() if row["ok"] is False]
    assert not failed, failed
