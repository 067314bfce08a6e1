"""The fault matrix report (issue #9): every test that injects a fault records what it saw here.

Rows are kept in ``fault-report.json`` in the scenario's ephemeral directory (one row per key; conftest.py empties it
at the start of each run, so every row was observed in this run), so tests in different files (test_1..3 reuse,
test_4_faults*) add to one table; ``test_4_faults_z_report`` renders it as Markdown beside the JSON (both also kept
in tests/output/faults/), prints it and checks that all twelve faults have an observed outcome.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

#: The twelve faults of the issue, by number: what is injected and what must happen.
FAULTS = {
    1: (
        "A worker killed mid-request",
        "in-flight request ends with an HTTP error or a closed connection (not silence); "
        "serving again with no operator (the time is recorded; 60 s is the target, not a pass condition)",
    ),
    2: ("The coordinator host restarted", "mounts and services come back by themselves; serving"),
    3: (
        "SSHFS serving host: sshd stopped / sshfs hung (SIGSTOP)",
        "status playbook reports it; re-running site.yml heals it",
    ),
    4: (
        "lsyncd with delete started again, in the seed's layout (shards in pool's home, in the tree lsyncd mirrors)",
        "the hazard shown live there before converge; after the role, a restart is refused (masked), nothing runs, "
        "a worker-only file and every shard survive",
    ),
    5: ("A download interrupted", "resumes from the partial file"),
    6: (
        "A shard corrupted on disk (its mtime changed; one that keeps size and mtime is found by verify: full only)",
        "detected and fetched again",
    ),
    7: ("A disk too small", "refused before any download"),
    8: ("Bad inventory values", "argument-spec or preflight errors; nothing changed"),
    9: ("A probe of a busy worker", "reported busy; the worker stays alive"),
    10: ("RPC port from a non-coordinator host / the controller; API without the key", "refused; 401"),
    11: ("A worker from a different llama.cpp version", "refused with a clear message before the coordinator starts"),
    12: (
        "Hardened units",
        "User= of every unit its own, root only for the listed units with their reasons; llama-server and every "
        "worker run as their users (ps); systemd-analyze security exposure <= 4.0",
    ),
}


RESULT = {True: "OK", False: "FAILED", None: "elsewhere"}


def _directory():
    path = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY") or os.path.join(tempfile.gettempdir(), "llamarpc-faults")
    os.makedirs(path, exist_ok=True)
    return Path(path)


def json_path():
    return _directory() / "fault-report.json"


def markdown_path():
    return _directory() / "fault-report.md"


def rows():
    """The recorded rows, sorted by fault number then key."""
    try:
        data = json.loads(json_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    return sorted(data.values(), key=lambda row: (row["fault"], row["key"]))


def record(fault, observed, *, ok, recover_s=None, key=None, detail="", source="", follow_up=False):
    """Record one observation of fault ``fault`` (1-12). ``ok``: the outcome is the expected one (None: not injected
    here, ``observed`` names the test elsewhere in the collection that injects it).

    ``key`` tells apart several observations of one fault (default: the fault number); ``source`` names the test.
    ``follow_up``: a check made after the fault's test (every shard whole), listed in the report but never counted as
    the fault observed: only the fault's own test observes it (observed_faults).
    Returns ``ok`` so that a test can ``assert record(...)`` after recording what it saw.
    """
    path = json_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    key = str(key or fault)
    title, expected = FAULTS[fault]
    data[key] = {
        "key": key,
        "fault": fault,
        "title": title if key == str(fault) else f"{title}: {detail}" if detail else title,
        "expected": expected,
        "observed": observed,
        "ok": None if ok is None else bool(ok),
        "recover_s": None if recover_s is None else round(float(recover_s), 1),
        "source": source or os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "follow_up": bool(follow_up),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return ok is None or bool(ok)


def observed_faults():
    """The faults that their own tests observed in this run (follow-up rows do not count)."""
    return {row["fault"] for row in rows() if not row.get("follow_up") and row.get("observed")}


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown():
    """The report table."""
    lines = [
        "| # | fault | expected | observed | time to recover | result |",
        "|---|-------|----------|----------|-----------------|--------|",
    ]
    for row in rows():
        recover = "-" if row["recover_s"] is None else f"{row['recover_s']:.1f} s"
        lines.append(
            f"| {row['key']} | {_cell(row['title'])} | {_cell(row['expected'])} | {_cell(row['observed'])} "
            f"| {recover} | {RESULT[row['ok']]} |"
        )
    return "\n".join(lines) + "\n"


#: Kept after the scenario's ephemeral directory is gone (like the webui scenario's screenshot).
ARTIFACTS = Path(__file__).resolve().parents[3] / "tests" / "output" / "faults"


def write():
    """Write the Markdown beside the JSON, and both into tests/output/faults/; returns the Markdown."""
    text = markdown()
    markdown_path().write_text(text, encoding="utf-8")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / markdown_path().name).write_text(text, encoding="utf-8")
    (ARTIFACTS / json_path().name).write_text(json_path().read_text(encoding="utf-8"), encoding="utf-8")
    return text
