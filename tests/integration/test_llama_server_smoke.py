"""llama_server_smoke on the real build and a real quantised model (Gemma 3 270M Q4_K_M, fetched by package name):
the build computes a completion on this machine's CPU with weight repacking on, and the pass is remembered."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_llama

REPO = Path(__file__).resolve().parents[2]


def smoke(args):
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-o",
         "-m", "llamarpc.cluster.llama_server_smoke", "-a", json.dumps(args)],
        capture_output=True, text=True, timeout=900, check=False, cwd=REPO,
    )  # fmt: skip
    line = next(line for line in done.stdout.splitlines() if " => " in line)
    result = json.loads(line.split(" => ", 1)[1])
    result.setdefault("failed", done.returncode != 0)  # the one-line output of a failure leaves the key out
    return result


def test_the_build_computes_a_real_completion_and_the_pass_is_remembered(real_model, tmp_path):
    bin_dir = os.environ.get("LLAMARPC_LLAMA_BIN_DIR")
    if not bin_dir:
        pytest.skip("no llama.cpp build")
    args = {
        "server": f"{bin_dir}/llama-server",
        "model": real_model,
        "record": str(tmp_path / "smoke.json"),
        "prompt": "The capital of France is Paris. The capital of Germany is",
    }
    first = smoke(args)
    print(f"\nsmoke: {first.get('content')!r} at {first.get('predicted_per_second')} tok/s in {first.get('seconds')} s")
    assert not first.get("failed"), first
    assert first["recorded"] is False and first["tokens_predicted"] == 8
    # Greedy, from the real weights: the known answer, not noise.
    assert first["content"].split()[0].strip(".,") == "Berlin", first["content"]
    assert smoke(args)["recorded"] is True


def test_a_model_that_is_not_a_model_fails_with_the_servers_words(tmp_path):
    bin_dir = os.environ.get("LLAMARPC_LLAMA_BIN_DIR")
    if not bin_dir:
        pytest.skip("no llama.cpp build")
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)
    result = smoke({"server": f"{bin_dir}/llama-server", "model": str(bogus), "record": str(tmp_path / "r.json")})
    assert result.get("failed") and "before it was ready" in result["msg"], result
    assert not (tmp_path / "r.json").exists()
