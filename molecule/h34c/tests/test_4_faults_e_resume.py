"""Fault matrix, a download interrupted (5), observed in this run: the collection's resume test
(tests/integration/test_shard_place_url.py::test_killed_play_resumes) SIGKILLs a whole ansible-playbook mid-download
from nginx (Range) on loopback and runs it again; it writes what it saw, and the row is made from that file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from faultreport import record
from labtest import REPO

RESUME_TEST = "tests/integration/test_shard_place_url.py::test_killed_play_resumes"


@pytest.mark.fault(5)
def test_an_interrupted_download_resumes_with_range(tmp_path):
    result = tmp_path / "resume.json"
    start = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", RESUME_TEST],
        cwd=REPO,
        env={**os.environ, "LLAMARPC_RESUME_RESULT": str(result)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    took = time.monotonic() - start
    seen = json.loads(result.read_text(encoding="utf-8")) if result.exists() else {}
    resumed = bool(seen) and 0 < seen["killed_at"] <= seen["resumed_from"] < seen["size"]
    complete = bool(seen) and seen["resumed_from"] + seen["downloaded"] == seen["size"]
    record(
        5,
        (
            f"ansible-playbook SIGKILLed at {seen['killed_at']} of {seen['size']} bytes; the rerun resumed from "
            f"{seen['resumed_from']} (HTTP 206) and placed the verified shard ({RESUME_TEST}, {took:.0f} s)"
            if seen
            else f"{RESUME_TEST} wrote no result: rc {run.returncode}"
        ),
        ok=run.returncode == 0 and resumed and complete and seen.get("http_206") is True,
        recover_s=seen.get("rerun_s"),
        source=RESUME_TEST,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert resumed and complete, seen
