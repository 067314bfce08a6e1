"""llama.cpp loads the split model from the coordinator's model directory (shards 2 and 3 over direct_io SSHFS, so
--load-mode none as llama_model_mmap_ok says) and answers exactly like a load of the original files."""

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import COORDINATOR, FILES, MODEL_DIR, MODEL_OUT, WORK
from labtest import BIN, INVENTORY, REPO, adhoc, ansible_env, lab

pytestmark = pytest.mark.needs_llama  # make test fails it, not skips it, without a build

PROBE = Path(__file__).with_name("llama_probe.py")
REMOTE_BIN = "/opt/llamarpc-test/llama"


@pytest.fixture(scope="module")
def bin_dir():
    """The cached native llama.cpp build (tests/conftest.py finds it), unpacked on the coordinator."""
    spec = importlib.util.spec_from_file_location("repo_tests_conftest", REPO / "tests" / "conftest.py")
    repo_conftest = importlib.util.module_from_spec(spec)  # the repository's tests/conftest.py, not this directory's
    spec.loader.exec_module(repo_conftest)
    found = os.environ.get("LLAMARPC_LLAMA_BIN_DIR") or repo_conftest.cached_llama_bin_dir()
    if not found:
        pytest.skip("no llama.cpp build cached: run the worker scenario first")
    lab(COORDINATOR).check_output(f"install -d {REMOTE_BIN}")
    # The runtime libraries the llama_cpp role installs with the binaries (a bare host lacks libgomp1).
    defaults = yaml.safe_load((REPO / "roles" / "llama_cpp" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    runtime = {"name": defaults["llama_cpp_runtime_packages"], "update_cache": True, "install_recommends": False}
    done, result = adhoc(COORDINATOR, "ansible.builtin.apt", runtime)
    assert result and not result.get("failed"), done.stdout + done.stderr
    # The controller cache's own archive of that build (bin/ is it unpacked); packed here only for a bin dir
    # given by LLAMARPC_LLAMA_BIN_DIR.
    archive = Path(found).parent / "bin.tar.gz"
    if not archive.is_file():
        archive = WORK / "llama-bin.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(found, arcname=".")
    subprocess.run(
        [
            str(BIN / "ansible"),
            COORDINATOR,
            "-i",
            INVENTORY,
            "-m",
            "ansible.builtin.unarchive",
            "-a",
            json.dumps({"src": str(archive), "dest": REMOTE_BIN}),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        env=ansible_env(),
    )
    return Path(found)


def test_llama_server_loads_the_model_from_the_coordinators_model_directory(bin_dir, converged):
    result, _done = converged
    assert result["mmap_ok"] is False
    load_mode = "auto" if result["mmap_ok"] else "none"
    coordinator = lab(COORDINATOR)
    out = coordinator.check_output(
        f"python3 - {REMOTE_BIN} {result['path']} {load_mode} <<'EOF'\n{PROBE.read_text()}\nEOF"
    )
    remote = json.loads(out.strip().splitlines()[-1])
    assert "error" not in remote, remote
    local = json.loads(
        subprocess.run(
            [sys.executable, str(PROBE), str(bin_dir), str(MODEL_OUT / FILES[0]["name"]), "auto"],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    print(f"\nllama-server on {COORDINATOR} from {MODEL_DIR} (--load-mode {load_mode}): {remote}\ncontroller: {local}")
    assert remote["tokens"] > 0
    assert remote["content"] == local["content"], "greedy output differs from a load of the original files"
