# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/molecule_lanes.sh with a stand-in for molecule that records its calls: the later lanes start only once the
first ones passed, and a first lane that left a lab up for them has it removed when they will not run."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

LANES = Path(__file__).resolve().parents[3] / "tools" / "molecule_lanes.sh"

#: A stand-in for molecule: "SCENARIO STEP" appended to $CALLS (and with its nice level to $CALLS.nice); it fails the
#: one call named in $FAIL.
FAKE = """#!/bin/sh
echo "$2: Executing"
echo "$3 $1" >> "$CALLS"
echo "$3 $1 $(nice)" >> "$CALLS.nice"
[ "$3 $1" != "$FAIL" ]
"""


def lanes(tmp_path, *args, fail=""):
    fake = tmp_path / "molecule"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    env = dict(os.environ, MOLECULE=str(fake), CALLS=str(calls), FAIL=fail, MOLECULE_LANES_LOGS=str(tmp_path / "logs"))
    done = subprocess.run(["bash", str(LANES), *args], env=env, capture_output=True, text=True, check=False)
    return done, calls.read_text().splitlines()


def last(calls, call):
    return len(calls) - 1 - calls[::-1].index(call)


def test_the_later_lanes_go_on_with_the_labs_the_first_lanes_prepared(tmp_path):
    first = ["--first", "one:destroy,converge", "two:destroy,create"]
    done, calls = lanes(tmp_path, *first, "--then", "two:verify,destroy")
    assert done.returncode == 0, done.stdout
    assert calls.index("two create") < calls.index("two verify") < last(calls, "two destroy")
    assert "removing the lab" not in done.stdout
    # Each step of a NAME:STEP item timed around its call (the passing lane's lines).
    assert re.search(r"^=== two step verify took \d+ s$", done.stdout, re.MULTILINE), done.stdout


def test_a_failed_first_lane_removes_the_labs_left_up_for_the_later_lanes(tmp_path):
    done, calls = lanes(
        tmp_path,
        "--first",
        "one:destroy,converge",
        "two:destroy,create",
        "--then",
        "two:verify,destroy",
        fail="one converge",
    )
    assert done.returncode == 1
    assert "two verify" not in calls
    assert last(calls, "two destroy") > calls.index("two create")
    assert last(calls, "one destroy") > calls.index("one converge")
    assert "removing the lab of two" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="renice to a lower nice level than the test's own needs root")
def test_the_behind_lanes_start_with_the_later_lanes_at_a_lower_priority(tmp_path):
    done, _calls = lanes(tmp_path, "--first", "one:create", "--then", "long:verify", "--behind", "short:verify")
    assert done.returncode == 0, done.stdout
    niced = dict(line.rsplit(" ", 1) for line in (tmp_path / "calls.nice").read_text().splitlines())
    assert niced == {"one create": "0", "long verify": "0", "short verify": "5"}
    assert "started (nice 5): short:verify" in done.stdout


def test_a_lane_runs_every_item_after_a_failure_and_names_the_failed_ones(tmp_path):
    done, calls = lanes(tmp_path, "--first", "one:create", "--then", "two three:verify four", fail="two test")
    assert done.returncode == 1, done.stdout
    assert calls.index("two test") < calls.index("three verify") < calls.index("four test"), calls
    assert "=== two FAILED after" in done.stdout and "=== four passed in" in done.stdout
    assert "=== lane items FAILED: two (of 3)" in done.stdout


#: A stand-in whose failing call prints what molecule's verifier prints for a failed test (boxed, wrapped at the
#: terminal's width) amid a long log, and records the test as molecule/conftest.py does.
FAKE_VERIFY = """#!/bin/sh
echo "$2: Executing"
echo "$3 $1" >> "$CALLS"
[ "$3 $1" != "$FAIL" ] && exit 0
seq 1 500 | sed 's/^/noise /'
echo "FAILED - RETRYING: [node1]: a task that waited (9 retries left)."
echo "  │ E       AssertionError: node2 runs build abc, not one of ['def']"
echo "  │ FAILED"
echo "  │   tests/test_controller_user.py::test_the_build - AssertionError: node2"
echo "  │ ==================== 1 failed, 5 passed in 12.34s ===================="
# molecule/conftest.py's line for the failed test
echo "user tests/test_controller_user.py::test_the_build (call): AssertionError: node2 runs build abc" \
  >> "$LLAMARPC_FAILED_TESTS"
seq 1 500 | sed 's/^/noise /'
exit 1
"""


def test_the_failed_tests_are_the_runs_last_words(tmp_path):
    """A failed lane's log is printed whole, then the failures alone at the end, where a reader of a CI log that shows
    only its tail looks: the failed test with its assertion, not the retries of a task that passed."""
    (tmp_path / "molecule").write_text(FAKE_VERIFY)
    (tmp_path / "molecule").chmod(0o755)
    (tmp_path / "calls").touch()
    env = dict(
        os.environ,
        MOLECULE=str(tmp_path / "molecule"),
        CALLS=str(tmp_path / "calls"),
        FAIL="user verify",
        MOLECULE_LANES_LOGS=str(tmp_path / "logs"),
    )
    args = ["--first", "one:create", "--then", "two:verify", "user:verify other:verify"]
    done = subprocess.run(["bash", str(LANES), *args], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout
    digest = (tmp_path / "logs" / "failures.txt").read_text().splitlines()
    tail = done.stdout.splitlines()[-len(digest) - 1 :]
    assert tail[0].startswith("=== what failed") and tail[1:] == digest, tail
    test = "user tests/test_controller_user.py::test_the_build (call): AssertionError: node2 runs build abc"
    assert test in tail, tail
    assert "E       AssertionError: node2 runs build abc, not one of ['def']" in tail, tail
    assert "=== user:verify FAILED" in " ".join(tail) and not [line for line in tail if "noise" in line], tail
    assert not [line for line in tail if "RETRYING" in line], tail


def test_a_failed_verify_test_is_recorded_on_one_line(tmp_path, monkeypatch):
    """molecule/conftest.py's record of a failed test: the scenario, the test and its assertion, one line each, however
    long or multi-line the assertion's message."""
    spec = importlib.util.spec_from_file_location("molecule_conftest", LANES.parents[1] / "molecule" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    record = tmp_path / "failed-tests.txt"
    monkeypatch.setenv("LLAMARPC_FAILED_TESTS", str(record))
    monkeypatch.setenv("MOLECULE_SCENARIO_NAME", "controller_user")
    crash = SimpleNamespace(message="AssertionError: {'node1': ['g++']}\n assert {'node1': ['g++']} == " + "x" * 900)
    report = SimpleNamespace(longrepr=SimpleNamespace(reprcrash=crash), when="call")
    conftest.record_failure("tests/test_a.py::test_one", report)
    conftest.record_failure("tests/test_a.py::test_two", SimpleNamespace(longrepr="setup broke\nhere", when="setup"))
    lines = record.read_text().splitlines()
    assert lines[0].startswith("controller_user tests/test_a.py::test_one (call): AssertionError: {'node1': ['g++']} ")
    assert len(lines[0]) < 500
    assert lines[1] == "controller_user tests/test_a.py::test_two (setup): setup broke here"
    assert len(lines) == 2
