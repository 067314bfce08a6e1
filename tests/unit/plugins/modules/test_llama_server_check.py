"""llama_server_check: the binary's --help must name every flag the unit passes (a failing --help fails too); the model
is read as llama-server's user through systemd-run with the unit's sandbox, and a failed read says who cannot read
what, on which host, and why; check mode checks the flags and reads nothing. Stand-ins for llama-server and
systemd-run first on PATH record how they were called."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ansible_collections.llamarpc.cluster.plugins.modules import llama_server_check

HELP = "usage: llama-server [options]\n  --rpc SERVERS\n  --device LIST\n  --api-key-file FNAME\n"
FAKE = """import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv) + "\\n")
sys.stdout.write(os.environ.get("FAKE_OUT", ""))
sys.stderr.write(os.environ.get("FAKE_ERR", ""))
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""
READ_DENIED = "/usr/bin/head: cannot open '/srv/models/m-00002-of-00002.gguf' for reading: Permission denied\n"
FILES = ["/srv/models/m-00001-of-00002.gguf", "/srv/models/m-00002-of-00002.gguf"]
SANDBOX = ["ProtectSystem=strict", "ProtectHome=tmpfs", "BindReadOnlyPaths=/srv/models"]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Stand-in llama-server and systemd-run; returns (server path, calls(): each call's argv)."""
    for name in ("llama-server", "systemd-run"):
        script = tmp_path / name
        script.write_text(f"#!{sys.executable}\n{FAKE}", encoding="utf-8")
        script.chmod(0o755)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return str(tmp_path / "llama-server"), calls


def read_args(**extra):
    return {"user": "llamarpc-server", "model_files": FILES, "sandbox": SANDBOX, "host": "node1", **extra}


def test_a_binary_that_names_every_flag_passes(run_module, fake, monkeypatch):
    server, calls = fake
    monkeypatch.setenv("FAKE_OUT", HELP)
    result = run_module(llama_server_check, {"server": server, "flags": ["--rpc", "--device", "--api-key-file"]})
    assert not result.failed and result.result == {"changed": False, "checked": ["flags"]}
    assert calls() == [[server, "--help"]]


def test_a_missing_flag_fails_naming_it(run_module, fake, monkeypatch):
    server, _calls = fake
    monkeypatch.setenv("FAKE_OUT", HELP)
    result = run_module(llama_server_check, {"server": server, "flags": ["--rpc", "--fit", "--load-mode"]})
    assert result.failed
    assert result.result["msg"].startswith(f"{server} does not know --fit, --load-mode, which llama-server's unit")


def test_flags_in_the_help_on_stderr_count(run_module, fake, monkeypatch):
    server, _calls = fake
    monkeypatch.setenv("FAKE_ERR", HELP)
    assert not run_module(llama_server_check, {"server": server, "flags": ["--rpc"]}).failed


def test_a_failing_help_fails(run_module, fake, monkeypatch):
    server, _calls = fake
    monkeypatch.setenv("FAKE_OUT", HELP)
    monkeypatch.setenv("FAKE_ERR", "error while loading shared libraries: libggml.so\n")
    monkeypatch.setenv("FAKE_RC", "127")
    result = run_module(llama_server_check, {"server": server, "flags": ["--rpc"]})
    assert result.failed and result.result["msg"] == (
        f"{server} --help failed (rc=127): error while loading shared libraries: libggml.so"
    )


def test_no_server_checks_no_flags(run_module, fake):
    _server, calls = fake
    assert run_module(llama_server_check, {"flags": ["--rpc"]}).result["checked"] == []
    assert calls() == []


def test_the_model_is_read_as_the_user_in_the_units_view(run_module, fake):
    _server, calls = fake
    result = run_module(llama_server_check, read_args())
    assert not result.failed and result.result["checked"] == ["read"]
    [argv] = calls()
    assert argv[1:] == [
        "--wait", "--pipe", "--quiet", "--collect", "--property=User=llamarpc-server", "--property=RuntimeMaxSec=120",
        "--property=ProtectSystem=strict", "--property=ProtectHome=tmpfs", "--property=BindReadOnlyPaths=/srv/models",
        "--", "/usr/bin/head", "--bytes=4", *FILES,
    ]  # fmt: skip


def test_a_model_the_user_cannot_read_fails_saying_why(run_module, fake, monkeypatch):
    monkeypatch.setenv("FAKE_ERR", READ_DENIED)
    monkeypatch.setenv("FAKE_RC", "1")
    result = run_module(llama_server_check, read_args())
    assert result.failed
    message = result.result["msg"]
    assert message.startswith(f"llamarpc-server (llama-server) cannot read the model on node1: {READ_DENIED.strip()}.")
    assert "The model directory (/srv/models) must be readable" in message
    assert message.endswith("This role changes none of them.")


def test_a_failed_read_without_a_message_gives_its_exit_status(run_module, fake, monkeypatch):
    monkeypatch.setenv("FAKE_RC", "1")
    result = run_module(llama_server_check, read_args())
    assert result.failed and "cannot read the model on node1: exit 1." in result.result["msg"]


def test_check_mode_checks_the_flags_and_reads_nothing(run_module, fake, monkeypatch):
    server, calls = fake
    monkeypatch.setenv("FAKE_OUT", HELP)
    result = run_module(llama_server_check, read_args(server=server, flags=["--rpc"]), check_mode=True)
    assert result.result["checked"] == ["flags"] and calls() == [[server, "--help"]]


def test_files_to_read_need_the_user(run_module, fake):
    _server, calls = fake
    result = run_module(llama_server_check, {"model_files": FILES})
    assert result.failed and "user is required" in result.result["msg"] and calls() == []
