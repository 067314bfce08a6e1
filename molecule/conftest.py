"""Every scenario's verify: a failed test saves the lab's evidence (molecule/_shared/evidence.py) before the next test
or the scenario's destroy changes it, and says where."""

from __future__ import annotations

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        from evidence import collect  # noqa: PLC0415 - labtest needs the lab's inventory, set only in verify
        from labtest import inventory_hosts, lab  # noqa: PLC0415

        def run(name, script):
            return lab(name).run(script).stdout

        folder = collect(item.nodeid, inventory_hosts(), run)
        report.sections.append(("lab evidence", f"saved in {folder}"))
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"=== lab evidence of {item.nodeid}: {folder}")
    return report
