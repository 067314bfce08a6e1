"""pytest plugin (``-p needs_llama`` in pyproject.toml's addopts, so every suite of the project loads it): the
``needs_llama`` marker, for tests of a llama.cpp build (the controller's cache, or ``LLAMARPC_LLAMA_BIN_DIR``), which
skip themselves without one. With ``LLAMARPC_REQUIRE_LLAMA=1`` (``make test``: its integration tests and molecule's
verifiers) a marked test that skips, for that or any other reason, fails instead: what ``make test`` builds must be
tested, not skipped."""

from __future__ import annotations

import os

import pytest


def required():
    return os.environ.get("LLAMARPC_REQUIRE_LLAMA") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_llama: needs llama.cpp binaries (LLAMARPC_LLAMA_BIN_DIR)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped and required() and item.get_closest_marker("needs_llama"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"needs_llama test skipped under LLAMARPC_REQUIRE_LLAMA=1 (make test): {reason}"
    return report
