# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster scenario's fault report (molecule/cluster/tests/faultreport.py) and its shard follow-ups (conftest.py):
a fault counts as observed only by its own test, never by the shard check that follows a test that skipped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

CLUSTER_TESTS = Path(__file__).resolve().parents[3] / "molecule" / "cluster" / "tests"


@pytest.fixture
def report(tmp_path, monkeypatch):
    monkeypatch.setenv("MOLECULE_EPHEMERAL_DIRECTORY", str(tmp_path))
    monkeypatch.syspath_prepend(str(CLUSTER_TESTS))
    sys.modules.pop("faultreport", None)
    import faultreport  # noqa: PLC0415 - from the scenario's tests folder

    return faultreport


def test_a_follow_up_row_does_not_count_as_the_fault_observed(report):
    report.record(3, "every shard whole", ok=True, key="3 shards", follow_up=True)
    report.record(4, "lsyncd refused to start, every shard survived", ok=True)
    assert report.observed_faults() == {4}
    assert {row["key"] for row in report.rows()} == {"3 shards", "4"}


CONFTEST_RUN = """
import pytest

@pytest.mark.fault(3)
def test_skips_inside():
    pytest.skip("the lab lacks what this fault needs")

@pytest.mark.fault(4)
def test_observes():
    pass
"""


def test_a_fault_test_that_skipped_leaves_no_row(report, pytester, monkeypatch):
    """The scenario's real conftest.py over two fault tests, with the shard check replaced (no lab here)."""
    pytester.makeconftest((CLUSTER_TESTS / "conftest.py").read_text())
    pytester.makepyfile(CONFTEST_RUN)
    monkeypatch.setitem(sys.modules, "clusterlib", type(sys)("clusterlib"))
    sys.modules["clusterlib"].shards_intact = lambda hosts: (True, "3/3 shards whole")
    monkeypatch.setitem(sys.modules, "labtest", type(sys)("labtest"))
    sys.modules["labtest"].inventory_hosts = lambda: {"node1": {}}
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    assert {row["key"] for row in report.rows()} == {"4 shards"}
    assert report.observed_faults() == set()
