"""The compiler really builds no AMX code with the collection's flags, on any x86 build host.

-march=native on an AMX host and the portable build's sapphirerapids variant both turn AMX on; NO_AMX_C_FLAGS must
turn it off again whatever comes before it. Checked with this machine's g++ (the one the lab builds with) by its
predefined macros, for an AMX CPU model, so it holds on a build host without AMX too.
"""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build as lb

pytestmark = pytest.mark.skipif(platform.machine() not in lb.X86_ARCHES, reason="x86 only")


def amx_macros(*flags):
    out = subprocess.run(
        [shutil.which("g++") or "g++", *flags, "-dM", "-E", "-x", "c++", "/dev/null"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(line.split()[1] for line in out.splitlines() if line.startswith("#define __AMX_"))


def test_an_amx_cpu_compiles_amx_code_without_the_flags():
    """The check of the check: for a Sapphire Rapids CPU g++ defines the macros ggml keys its AMX code on."""
    assert {"__AMX_INT8__", "__AMX_TILE__"} <= set(amx_macros("-march=sapphirerapids"))


def test_the_no_amx_flags_leave_no_amx_macro():
    assert amx_macros("-march=sapphirerapids", *lb.NO_AMX_C_FLAGS.split()) == []
    assert amx_macros("-march=native", *lb.NO_AMX_C_FLAGS.split()) == []
