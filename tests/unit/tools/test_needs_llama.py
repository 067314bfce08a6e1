# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The needs_llama marker's plugin (molecule/_shared/needs_llama.py): skipped without a build, failed instead of
skipped under LLAMARPC_REQUIRE_LLAMA=1 (make test), whatever made the test skip."""

from __future__ import annotations

import pytest

TESTS = """
import pytest

pytestmark = pytest.mark.needs_llama

def test_runs():
    pass

def test_skips_itself():
    pytest.skip("llama.cpp repacked no weight on this CPU")

@pytest.mark.skipif(True, reason="not here")
def test_skipped_by_mark():
    pass
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    pytester.makepyfile(TESTS)
    monkeypatch.delenv("LLAMARPC_REQUIRE_LLAMA", raising=False)
    return pytester


def test_without_the_requirement_skips_stay_skips(suite):
    suite.runpytest_inprocess("-p", "needs_llama").assert_outcomes(passed=1, skipped=2)


def test_under_make_test_a_skip_of_a_marked_test_fails(suite, monkeypatch):
    monkeypatch.setenv("LLAMARPC_REQUIRE_LLAMA", "1")
    result = suite.runpytest_inprocess("-p", "needs_llama")
    result.assert_outcomes(passed=1, failed=1, errors=1)  # a skip in setup (a skipif mark) reports as an error
    result.stdout.fnmatch_lines(["*skipped under LLAMARPC_REQUIRE_LLAMA=1*repacked no weight*"])
