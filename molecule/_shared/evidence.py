"""What a failed lab test leaves behind: every host's ``llamarpc-*`` units and their journals, the coordinator's
deployed plan, the supervisor's state, override and plan in force (evidence.sh), saved under tests/output/evidence/
before the scenario's destroy removes the lab (molecule/conftest.py calls it from pytest's report hook; a failed
converge or idempotence step is covered by the cleanup playbook evidence.yml, which runs the same script)."""

from __future__ import annotations

import os
import re
from pathlib import Path

#: Read on every host (as the cleanup playbook evidence.yml runs it after a failed step); a host that does not answer
#: is noted, never fatal.
HOST_SCRIPT = Path(__file__).with_name("evidence.sh").read_text(encoding="utf-8")

ROOT = Path(__file__).resolve().parents[2] / "tests" / "output" / "evidence"


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:120] or "test"


def collect(test_id, hosts, run):
    """Save ``HOST_SCRIPT``'s output for every host of ``hosts`` into a folder named after the scenario and the test;
    ``run(name, script)`` returns a host's output. Returns that folder."""
    scenario = os.environ.get("MOLECULE_SCENARIO_NAME") or Path.cwd().name
    folder = ROOT / slug(scenario) / slug(test_id)
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(hosts):
        try:
            text = run(name, HOST_SCRIPT)
        except Exception as exc:  # noqa: BLE001 - evidence is best effort: a host a test stopped must not hide the rest
            text = f"could not read {name}: {type(exc).__name__}: {exc}\n"
        (folder / f"{slug(name)}.txt").write_text(text, encoding="utf-8")
    return folder
