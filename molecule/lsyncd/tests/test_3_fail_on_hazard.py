"""lsyncd_neutralize_fail_on_hazard: a hazard the role cannot neutralise fails the play, with what and where.

A tmpfiles.d rule that ages out files in the model directory is such a hazard (the role reports tmpfiles
rules, it does not rewrite them). It is planted on node3 for the duration of the test only. The audit runs
change nothing (asserted), so they run inside the two minutes the disable-mode shards must survive.
"""

from __future__ import annotations

import json

import pytest
from conftest import MODELS, hazard, lab, playbook, scan

RULE = "/etc/tmpfiles.d/zz-models-clean.conf"


@pytest.fixture
def tmpfiles_rule():
    node3 = lab("node3")
    node3.run(f"printf 'e {MODELS} - - - 1d\\n' > {RULE}")
    yield
    node3.run(f"rm -f {RULE}")


def test_an_unneutralised_overlap_fails_the_play(tmpfiles_rule):
    found = hazard(scan("node3"), f"tmpfiles:{RULE}:1")
    assert found["overlaps_model_dir"] and not found["neutralised"]
    rc, output, changed = playbook(
        "converge.yml", "--limit", "node3", "-e", json.dumps({"lsyncd_neutralize_mode": "audit"})
    )
    assert rc != 0
    assert f"can still delete in {MODELS}" in output
    assert f"tmpfiles {RULE}:1" in output
    assert changed == {"node3": 0}


def test_the_option_off_reports_without_failing(tmpfiles_rule):
    extra = {"lsyncd_neutralize_mode": "audit", "lsyncd_neutralize_fail_on_hazard": False}
    rc, output, changed = playbook("converge.yml", "--limit", "node3", "-e", json.dumps(extra))
    assert rc == 0, output[-4000:]
    assert f"[HAZARD] tmpfiles {RULE}:1" in output
    assert changed == {"node3": 0}
