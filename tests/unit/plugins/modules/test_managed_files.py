"""managed_files: directories made like ``file state=directory`` (missing parents with the same attributes), files
written only when their bytes differ (validated first, renamed into place), attributes set either way; check mode
predicts without touching anything; a rerun is unchanged."""

from __future__ import annotations

import json
import os
import pwd
import stat
import sys
from types import SimpleNamespace

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _managed_files
from ansible_collections.llamarpc.cluster.plugins.modules import managed_files


def mode_of(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_directories_are_made_with_their_missing_parents_then_left_alone(run_module, tmp_path):
    deep = tmp_path / "cache" / "worker" / "rpc"
    args = {"directories": [{"path": str(deep), "mode": "0750"}]}

    predicted = run_module(managed_files, args, check_mode=True)
    assert predicted.result["changed"] and predicted.result["changed_paths"] == [str(deep)]
    assert not (tmp_path / "cache").exists()

    made = run_module(managed_files, args)
    assert made.result["changed"]
    # Like the file module: each component it creates gets the entry's mode, not only the last one.
    assert [mode_of(path) for path in (tmp_path / "cache", deep.parent, deep)] == [0o750] * 3

    again = run_module(managed_files, args)
    assert not again.result["changed"] and again.result["changed_paths"] == []
    assert not run_module(managed_files, args, check_mode=True).result["changed"]


def test_an_existing_directory_gets_its_mode(run_module, tmp_path):
    directory = tmp_path / "lib"
    directory.mkdir(mode=0o700)
    args = {"directories": [{"path": str(directory), "mode": "0755"}]}
    assert run_module(managed_files, args, check_mode=True).result["changed"]
    assert mode_of(directory) == 0o700
    assert run_module(managed_files, args).result["changed_paths"] == [str(directory)]
    assert mode_of(directory) == 0o755


def test_a_file_in_a_new_directory_is_written_once(run_module, tmp_path):
    directory, unit = tmp_path / "etc", tmp_path / "etc" / "worker.service"
    args = {
        "directories": [{"path": str(directory), "mode": "0755"}],
        "files": [{"dest": str(unit), "content": "[Unit]\nDescription=worker\n", "mode": "0644"}],
    }
    predicted = run_module(managed_files, {**args, "_ansible_diff": True}, check_mode=True)
    assert predicted.result["changed_paths"] == [str(directory), str(unit)]
    assert predicted.result["diff"][1]["before"] == "" and predicted.result["diff"][1]["after"].endswith("worker\n")
    assert not directory.exists()

    run_module(managed_files, args)
    assert unit.read_text() == "[Unit]\nDescription=worker\n" and mode_of(unit) == 0o644

    again = run_module(managed_files, args)
    assert not again.result["changed"]


def test_only_a_file_whose_bytes_differ_is_rewritten(run_module, tmp_path):
    same, other = tmp_path / "same.py", tmp_path / "other.py"
    same.write_text("print(1)\n")
    other.write_text("print(1)")  # the last newline missing is a difference
    for path in (same, other):
        path.chmod(0o644)
    inode = same.stat().st_ino
    args = {"files": [{"dest": str(path), "content": "print(1)\n", "mode": "0644"} for path in (same, other)]}

    result = run_module(managed_files, {**args, "_ansible_diff": True}, check_mode=True)
    assert result.result["changed_paths"] == [str(other)]
    assert result.result["diff"] == [
        {"before_header": str(other), "after_header": str(other), "before": "print(1)", "after": "print(1)\n"}
    ]
    assert other.read_text() == "print(1)"

    assert run_module(managed_files, args).result["changed_paths"] == [str(other)]
    assert other.read_text() == "print(1)\n" and same.stat().st_ino == inode


def test_a_mode_alone_is_a_change(run_module, tmp_path):
    script = tmp_path / "prune.py"
    script.write_text("x\n")
    script.chmod(0o600)
    args = {"files": [{"dest": str(script), "content": "x\n", "mode": "0644"}]}
    assert run_module(managed_files, args, check_mode=True).result["changed_paths"] == [str(script)]
    assert mode_of(script) == 0o600
    assert run_module(managed_files, args).result["changed"]
    assert mode_of(script) == 0o644
    assert not run_module(managed_files, args).result["changed"]


def validator(tmp_path, exit_code):
    """A validate command that records the file it was given and exits ``exit_code``."""
    seen = tmp_path / "seen"
    script = tmp_path / f"validate{exit_code}"
    script.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\n"
        f"pathlib.Path({str(seen)!r}).write_text(open(sys.argv[2]).read())\nsys.exit({exit_code})\n"
    )
    script.chmod(0o755)
    return f"{script} --file %s", seen


def test_validation_runs_on_the_new_text_before_it_replaces_the_file(run_module, tmp_path):
    rules = tmp_path / "rpc-worker.nft"
    rules.write_text("old\n")
    validate, seen = validator(tmp_path, 0)
    run_module(managed_files, {"files": [{"dest": str(rules), "content": "new\n", "validate": validate}]})
    assert seen.read_text() == "new\n" and rules.read_text() == "new\n"


def test_a_failed_validation_leaves_the_file_as_it_was(run_module, tmp_path):
    rules = tmp_path / "rpc-worker.nft"
    rules.write_text("old\n")
    validate, seen = validator(tmp_path, 1)
    failed = run_module(managed_files, {"files": [{"dest": str(rules), "content": "bad\n", "validate": validate}]})
    assert failed.failed and "failed its validation" in failed.result["msg"] and str(rules) in failed.result["msg"]
    assert seen.read_text() == "bad\n" and rules.read_text() == "old\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["rpc-worker.nft", "seen", "validate1"]  # no temporary


def test_check_mode_does_not_validate(run_module, tmp_path):
    validate, seen = validator(tmp_path, 1)
    dest = tmp_path / "rules.nft"
    result = run_module(
        managed_files, {"files": [{"dest": str(dest), "content": "x\n", "validate": validate}]}, check_mode=True
    )
    assert result.result["changed"] and not seen.exists() and not dest.exists()


def test_validate_must_name_the_file(run_module, tmp_path):
    failed = run_module(
        managed_files, {"files": [{"dest": str(tmp_path / "r.nft"), "content": "x", "validate": "/bin/true"}]}
    )
    assert failed.failed and "must contain %s" in failed.result["msg"]
    assert not (tmp_path / "r.nft").exists()


def test_a_file_where_a_directory_should_be_fails(run_module, tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("")
    failed = run_module(managed_files, {"directories": [{"path": str(blocker)}]})
    assert (
        failed.failed
        and failed.result["msg"] == f"{blocker} exists and is not a directory: move it away or choose another path"
    )


def test_a_file_needs_its_directory(run_module, tmp_path):
    dest = tmp_path / "missing" / "unit.service"
    failed = run_module(managed_files, {"files": [{"dest": str(dest), "content": "x"}]})
    assert failed.failed and "its directory" in failed.result["msg"] and str(dest.parent) in failed.result["msg"]


def test_an_absent_file_is_removed_once(run_module, tmp_path):
    key = tmp_path / "api-keys"
    key.write_text("secret\n")
    args = {"files": [{"dest": str(key), "state": "absent"}]}
    predicted = run_module(managed_files, {**args, "_ansible_diff": True}, check_mode=True)
    assert predicted.result["changed_paths"] == [str(key)] and key.exists()
    assert predicted.result["diff"] == [
        {"before": {"path": str(key), "state": "file"}, "after": {"path": str(key), "state": "absent"}}
    ]
    assert run_module(managed_files, args).result["changed_paths"] == [str(key)]
    assert not key.exists()
    again = run_module(managed_files, args)
    assert not again.result["changed"] and again.result["changed_labels"] == {}


def test_absent_does_not_remove_a_directory(run_module, tmp_path):
    failed = run_module(managed_files, {"files": [{"dest": str(tmp_path), "state": "absent"}]})
    assert failed.failed and "is a directory" in failed.result["msg"] and tmp_path.is_dir()


def test_a_present_file_needs_its_content(run_module, tmp_path):
    failed = run_module(managed_files, {"files": [{"dest": str(tmp_path / "x")}]})
    assert failed.failed and "content" in failed.result["msg"]
    assert not (tmp_path / "x").exists()


def test_changed_labels_name_only_the_labels_whose_paths_changed(run_module, tmp_path):
    (tmp_path / "lib").mkdir(mode=0o755)
    (tmp_path / "lib").chmod(0o755)
    unit, env, script = tmp_path / "a.service", tmp_path / "a.env", tmp_path / "lib" / "helper.py"
    script.write_text("same\n")
    script.chmod(0o644)
    old_key = tmp_path / "old-key"
    old_key.write_text("k\n")
    args = {
        "directories": [{"path": str(tmp_path / "lib"), "mode": "0755", "label": "dirs"}],
        "files": [
            {"dest": str(unit), "content": "[Unit]\n", "label": "units"},
            {"dest": str(env), "content": "A=1\n", "label": "restart"},
            {"dest": str(script), "content": "same\n", "mode": "0644", "label": "restart"},
            {"dest": str(old_key), "state": "absent", "label": "restart"},
            {"dest": str(tmp_path / "plan.json"), "content": "{}\n"},
        ],
    }
    predicted = run_module(managed_files, args, check_mode=True)
    expected = {"units": [str(unit)], "restart": [str(env), str(old_key)]}
    assert predicted.result["changed_labels"] == expected
    assert run_module(managed_files, args).result["changed_labels"] == expected
    assert not old_key.exists() and env.read_text() == "A=1\n"
    env.write_text("A=2\n")  # only the env file differs now: only its label
    assert run_module(managed_files, args).result["changed_labels"] == {"restart": [str(env)]}
    assert run_module(managed_files, args).result["changed_labels"] == {}


# --- users: stand-ins for useradd and usermod first on PATH, and a passwd database of the test's own ------------------

RECORD = """import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
sys.stderr.write(os.environ.get("FAKE_ERR", ""))
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


@pytest.fixture
def accounts(tmp_path, monkeypatch):
    """(passwd: name -> (home, shell), calls(): each useradd/usermod call as [tool, args...])."""
    bin_dir = tmp_path / "sbin"
    bin_dir.mkdir()
    for tool in ("useradd", "usermod"):
        script = bin_dir / tool
        script.write_text(f"#!{sys.executable}\nimport sys; sys.argv[1:1] = [{tool!r}]\n{RECORD}", encoding="utf-8")
        script.chmod(0o755)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    passwd = {}

    def getpwnam(name):
        if name not in passwd:
            raise KeyError(name)
        home, shell = passwd[name]
        return SimpleNamespace(pw_name=name, pw_dir=home, pw_shell=shell)

    monkeypatch.setattr(_managed_files, "pwd", SimpleNamespace(getpwnam=getpwnam, getpwuid=pwd.getpwuid))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return passwd, calls


USER = {"name": "llamarpc", "home": "/var/cache/llamarpc/rpc-worker", "label": "users"}


def test_a_missing_system_user_is_made_before_the_directories_and_only_once(run_module, accounts, tmp_path):
    passwd, calls = accounts
    cache = tmp_path / "cache"
    args = {"users": [USER], "directories": [{"path": str(cache), "mode": "0750"}], "_ansible_diff": True}
    predicted = run_module(managed_files, args, check_mode=True)
    assert predicted.result["changed_paths"] == ["user:llamarpc", str(cache)]
    assert predicted.result["changed_labels"] == {"users": ["user:llamarpc"]}
    assert predicted.result["diff"][0]["before"] == {"user": "llamarpc", "state": "absent"}
    assert calls() == [] and not cache.exists()

    made = run_module(managed_files, args)
    assert not made.failed and made.result["changed_paths"] == ["user:llamarpc", str(cache)]
    assert calls() == [
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/var/cache/llamarpc/rpc-worker",
            "--shell",
            "/usr/sbin/nologin",
            "llamarpc",
        ]
    ]
    passwd["llamarpc"] = ("/var/cache/llamarpc/rpc-worker", "/usr/sbin/nologin")  # what useradd made
    again = run_module(managed_files, args)
    assert not again.result["changed"] and len(calls()) == 1


def test_an_existing_user_gets_the_home_and_shell_it_lacks(run_module, accounts):
    passwd, calls = accounts
    passwd["llamarpc"] = ("/var/cache/llamarpc/rpc-worker", "/bin/bash")
    result = run_module(managed_files, {"users": [USER]})
    assert result.result["changed_paths"] == ["user:llamarpc"]
    assert calls() == [["usermod", "--shell", "/usr/sbin/nologin", "llamarpc"]]


def test_a_failing_useradd_fails_the_task_saying_why(run_module, accounts, monkeypatch):
    _passwd, _calls = accounts
    monkeypatch.setenv("FAKE_RC", "9")
    monkeypatch.setenv("FAKE_ERR", "useradd: user 'llamarpc' already exists\n")
    result = run_module(managed_files, {"users": [USER]})
    assert result.failed
    assert result.result["msg"].endswith("failed for the user llamarpc (rc=9): useradd: user 'llamarpc' already exists")
