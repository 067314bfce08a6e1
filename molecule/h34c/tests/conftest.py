"""The cluster scenario's fault matrix bookkeeping (issue #20 item 9).

- The fault report starts empty at the start of every verify run, so that no row survives from an earlier run.
- A test marked ``@pytest.mark.fault(N)`` that ran (not skipped) is followed by a check of every shard on every host
  (sha256 where it is held and through the coordinator's model directory), recorded in the report as the follow-up row
  ``N shards``: a lost or changed shard names the fault after which it was found. A follow-up row never counts as
  fault N observed: only N's own test observes it. The check fails the test (at teardown) when a shard is
  not whole.
"""

from __future__ import annotations

import pytest
from clusterlib import shards_intact
from faultreport import json_path, record
from labtest import inventory_hosts


def pytest_configure(config):
    config.addinivalue_line("markers", "fault(number): the test injects fault NUMBER of the fault matrix (1-12)")


def pytest_sessionstart(session):
    json_path().unlink(missing_ok=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report kept on the test (``item.reports``), for the fixture below to see whether the test ran."""
    report = yield
    item.reports = {**getattr(item, "reports", {}), call.when: report}
    return report


@pytest.fixture(autouse=True)
def shards_after_the_fault(request):
    """After a test that injects a fault and ran (not skipped): every shard's sha256, recorded against that fault as a
    follow-up row, which never counts as the fault observed (faultreport.observed_faults)."""
    marker = request.node.get_closest_marker("fault")
    yield
    call = getattr(request.node, "reports", {}).get("call")
    if marker is None or call is None or call.skipped:
        return
    number = marker.args[0]
    intact, account = shards_intact(sorted(inventory_hosts()))
    record(
        number,
        f"after {request.node.name}: {account}",
        ok=intact,
        key=f"{number} shards",
        detail="every shard's sha256 after this fault",
        follow_up=True,
    )
    assert intact, f"after fault {number} ({request.node.name}): {account}"
