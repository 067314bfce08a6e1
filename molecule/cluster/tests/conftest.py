"""The cluster scenario's fault matrix bookkeeping (issue #20 item 9).

- The fault report starts empty at the start of every verify run, so that no row survives from an earlier run.
- A test marked ``@pytest.mark.fault(N)`` is followed by a check of every shard on every host (sha256 where it is
  held and through the coordinator's model directory), recorded in the report as row ``N shards``: a lost or
  changed shard names the fault after which it was found. The check fails the test (at teardown) when a shard is
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


@pytest.fixture(autouse=True)
def shards_after_the_fault(request):
    """After a test that injects a fault: every shard's sha256, recorded against that fault."""
    marker = request.node.get_closest_marker("fault")
    yield
    if marker is None:
        return
    number = marker.args[0]
    intact, account = shards_intact(sorted(inventory_hosts()))
    record(
        number,
        f"after {request.node.name}: {account}",
        ok=intact,
        key=f"{number} shards",
        detail="every shard's sha256 after this fault",
    )
    assert intact, f"after fault {number} ({request.node.name}): {account}"
