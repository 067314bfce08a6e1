"""Every scenario's verify: a failed test saves the lab's evidence (molecule/_shared/evidence.py) before the next test
or the scenario's destroy changes it, and says where; it is named, with its assertion, on one line of the lanes'
record of failed tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def record_failure(nodeid, report):
    """One line per failed test in $LLAMARPC_FAILED_TESTS (tools/molecule_lanes.sh sets it and prints the file at the
    end of the run): molecule's verify output is boxed and wrapped at the terminal's width, so a grep of the lane's log
    cannot be trusted to find the test and its assertion whole."""
    path = os.environ.get("LLAMARPC_FAILED_TESTS")
    if not path:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = " ".join((crash.message if crash else str(report.longrepr)).split())
    scenario = os.environ.get("MOLECULE_SCENARIO_NAME", "?")
    with Path(path).open("a", encoding="utf-8") as record:
        record.write(f"{scenario} {nodeid} ({report.when}): {message[:400]}\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        from evidence import collect  # noqa: PLC0415 - labtest needs the lab's inventory, set only in verify
        from labtest import inventory_hosts, lab  # noqa: PLC0415

        def run(name, script):
            return lab(name).run(script).stdout

        record_failure(item.nodeid, report)
        folder = collect(item.nodeid, inventory_hosts(), run)
        report.sections.append(("lab evidence", f"saved in {folder}"))
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"=== lab evidence of {item.nodeid}: {folder}")
    return report
