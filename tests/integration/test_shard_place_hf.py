"""gguf_shard_place through the Hugging Face path, against a real HF-compatible server on loopback: olah.

olah (PyPI, a self-hosted hub mirror) serves a local git repository whose GGUF files are git-lfs pointers
with their objects under .git/lfs/objects, fully offline. It runs from its own virtualenv (.cache/olah-venv,
created by this test with pip if missing) so that its dependencies never touch the project's. The controller
side uses huggingface_hub (list_repo_tree, hf_hub_url, get_hf_file_metadata) against it; the hosts fetch the
resolve URLs with urllib. olah answers Range requests with the whole file (200), so the download code's
"Range ignored: start over" path is what runs here; resume is proven against nginx in test_shard_place_url, and on
the Hugging Face path itself, through the llama_model role, against a hub stand-in that honours Range in
test_llama_model_hub.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import test_shard_place_url as url_tests
from test_shard_place_url import REPO, free_port, placed_ok, run_play, stop, wait_listening

OLAH_VENV = REPO / ".cache" / "olah-venv"
OLAH_VERSION = "0.5.4"
REPO_ID = "llamarpc/tiny-gguf"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs mounts)")


def olah_cli():
    cli = OLAH_VENV / "bin" / "olah-cli"
    if not cli.exists():
        subprocess.run([sys.executable, "-m", "venv", str(OLAH_VENV)], check=True)
        installed = subprocess.run(
            [str(OLAH_VENV / "bin" / "pip"), "install", "-q", f"olah=={OLAH_VERSION}"],
            check=False,
            capture_output=True,
            text=True,
        )
        if installed.returncode != 0:
            # A failure, not a skip: the Hugging Face path is tested here alone, and a skip would hide its loss.
            shutil.rmtree(OLAH_VENV, ignore_errors=True)
            pytest.fail(f"olah {OLAH_VERSION} could not be installed into {OLAH_VENV}: {installed.stderr[-2000:]}")
    return cli


def git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@localhost", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def lfs_repo(root, model):
    """A non-bare git repo with git-lfs pointers for the GGUF files (objects stored as git-lfs does)."""
    path = root / "models" / REPO_ID
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / ".gitattributes").write_text("*.gguf filter=lfs diff=lfs merge=lfs -text\n", encoding="utf-8")
    (path / "README.md").write_text("# tiny test model\n", encoding="utf-8")
    for entry in model["files"]:
        oid = entry["sha256"]
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {entry['size']}\n"
        (path / entry["name"]).write_text(pointer, encoding="utf-8")
        store = path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4]
        store.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry["path"], store / oid)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "tiny model")
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return url_tests.make_model(tmp_path_factory)


@pytest.fixture
def hosts(tmp_path):
    with url_tests.tmpfs_hosts(tmp_path) as dirs:
        yield dirs


@pytest.fixture(scope="module")
def olah(model, tmp_path_factory):
    cli = olah_cli()
    root = tmp_path_factory.mktemp("olah")
    lfs_repo(root / "mirrors", model)
    port = free_port()
    config = root / "olah.toml"
    config.write_text(
        f"""[basic]
host = "127.0.0.1"
port = {port}
repos-path = "{root}/repos"
mirrors-path = ["{root}/mirrors"]
mirror-scheme = "http"
mirror-netloc = "127.0.0.1:{port}"
mirror-lfs-netloc = "127.0.0.1:{port}"

[accessibility]
offline = true
""",
        encoding="utf-8",
    )
    log = (root / "olah.log").open("wb")
    proc = subprocess.Popen(
        [str(cli), "-c", str(config)], cwd=root, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    wait_listening(proc, port, 60, root / "olah.log", "olah")
    yield f"http://127.0.0.1:{port}"
    stop(proc)
    log.close()


def hf_task(endpoint, **more):
    return {
        "model_dir": "{{ disk }}/models/tiny",
        "coordinator": "a",
        "hf_repo": REPO_ID,
        "hf_pattern": "*tiny*.gguf",
        "hf_endpoint": endpoint,
        "hf_token": "hf_not_a_real_token_but_never_logged",
        "reserve": "256k",
        "mount_root": "/mnt/llamarpc-test",
        **more,
    }


def test_hub_metadata_plan_fetch_and_rerun(tmp_path, model, olah, hosts):
    _code, results, stdout = run_play(tmp_path, hosts, hf_task(olah), "--check")
    assert [entry["host"] for entry in results["a"]["plan"]] == ["a", "b", "b"]
    assert [entry["sha256"] for entry in results["a"]["plan"]] == [entry["sha256"] for entry in model["files"]]
    assert len(results["a"]["revision"]) == 40
    for path in hosts.values():
        assert not (path / "models").exists()

    started = time.monotonic()
    _code, results, stdout = run_play(tmp_path, hosts, hf_task(olah))
    elapsed = time.monotonic() - started
    placed_ok(model, hosts, results)
    assert "hf_not_a_real_token" not in stdout
    print(f"olah: {model['total_bytes']} bytes placed in {elapsed:.1f} s (whole play)")

    _code, results, stdout = run_play(tmp_path, hosts, hf_task(olah))
    assert not any(result["changed"] for result in results.values())


def test_pattern_matching_nothing(tmp_path, olah, hosts):
    code, results, _stdout = run_play(tmp_path, hosts, hf_task(olah, hf_pattern="*q4_k_m*.gguf"), check=False)
    assert code
    assert f"pattern '*q4_k_m*.gguf' matches no file in {REPO_ID}@main" in results["a"]["msg"]
    for path in hosts.values():
        assert not (path / "models").exists()


def test_unknown_repo(tmp_path, olah, hosts):
    code, results, _stdout = run_play(tmp_path, hosts, hf_task(olah, hf_repo="llamarpc/nope"), check=False)
    assert code
    assert "cannot list llamarpc/nope@main" in results["a"]["msg"]
