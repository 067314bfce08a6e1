"""_systemd.Systemctl: the argv and environment systemctl runs with, for the system and for a user's manager.

No systemd here: stand-in ``systemctl`` and ``runuser`` executables first on PATH record how they were run
(argv, XDG_RUNTIME_DIR, LC_ALL, SYSTEMD_PAGER) and answer as systemctl would; ``env`` is the real one.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd import _systemd

SYSTEMCTL = textwrap.dedent(
    """\
    import json, os, sys
    args = sys.argv[1:]
    keys = ("XDG_RUNTIME_DIR", "LC_ALL", "SYSTEMD_PAGER")
    with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as log:
        env = {key: os.environ.get(key) for key in keys}
        log.write(json.dumps({"tool": "systemctl", "argv": args, "env": env}) + "\\n")
    if "gone.service" in args:
        sys.stderr.write("Failed to reset failed state of unit gone.service: Unit gone.service not loaded.\\n")
        sys.exit(1)
    if "broken.service" in args:
        sys.stderr.write("Failed to stop broken.service: Access denied\\n")
        sys.exit(4)
    if args[0] == "show":
        print("ActiveState=active\\nMainPID=42\\nExecStart={ path=/bin/x ; argv[]=/bin/x a=b ; }")
    """
)

RUNUSER = textwrap.dedent(
    """\
    import json, os, sys
    with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": "runuser", "argv": sys.argv[1:]}) + "\\n")
    rest = sys.argv[sys.argv.index("--") + 1 :]
    os.execvp(rest[0], rest)
    """
)

POOL = {"name": "pool", "uid": 1001, "runtime_dir": "/run/user/1001"}


class Failed(Exception):
    pass


@pytest.fixture
def host(tmp_path, monkeypatch):
    """Stand-ins first on PATH; returns a function reading what they recorded."""
    for name, code in (("systemctl", SYSTEMCTL), ("runuser", RUNUSER)):
        script = tmp_path / name
        script.write_text(f"#!{sys.executable}\n{code}", encoding="utf-8")
        script.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")

    def fail_json(self, msg, **kwargs):
        raise Failed({"msg": msg, **kwargs})

    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)

    def calls():
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]

    calls.bin = tmp_path
    return calls


@pytest.fixture
def module(host):
    with patch_module_args({}):
        return basic.AnsibleModule(argument_spec={})


def test_command_system_and_user_scopes():
    assert _systemd.command("/bin/systemctl", ["stop", "x.service"]) == ["/bin/systemctl", "stop", "x.service"]
    assert _systemd.command("/bin/systemctl", ["show", "x"], POOL) == [
        "env",
        "XDG_RUNTIME_DIR=/run/user/1001",
        "/bin/systemctl",
        "--user",
        "show",
        "x",
    ]
    assert _systemd.command("/bin/systemctl", ["show"], POOL, "/sbin/runuser")[:6] == [
        "/sbin/runuser",
        "-u",
        "pool",
        "--",
        "env",
        "XDG_RUNTIME_DIR=/run/user/1001",
    ]


def test_system_scope_runs_systemctl_in_the_c_locale_without_pager(module, host):
    systemctl = _systemd.Systemctl(module, required=True, root=True)
    assert systemctl.available and systemctl.binary == str(host.bin / "systemctl")
    rc, _out, _err = systemctl.run("daemon-reload")
    assert rc == 0
    (call,) = host()
    assert call["argv"] == ["daemon-reload"]
    assert call["env"] == {"XDG_RUNTIME_DIR": None, "LC_ALL": "C", "SYSTEMD_PAGER": ""}


def test_user_scope_as_that_user_reaches_its_runtime_dir(module, host):
    systemctl = _systemd.Systemctl(module, POOL, root=False)
    assert systemctl.available and systemctl.runuser is None
    systemctl.run("list-units", "--all")
    (call,) = host()
    assert call["argv"] == ["--user", "list-units", "--all"]
    assert call["env"]["XDG_RUNTIME_DIR"] == "/run/user/1001"


def test_user_scope_from_root_goes_through_runuser(module, host):
    systemctl = _systemd.Systemctl(module, POOL, root=True)
    assert systemctl.available
    systemctl.run("show", "-p", "Id", "--", "lsyncd.service")
    runuser, call = host()
    assert runuser["tool"] == "runuser" and runuser["argv"][:3] == ["-u", "pool", "--"]
    assert call["argv"] == ["--user", "show", "-p", "Id", "--", "lsyncd.service"]
    assert call["env"] == {"XDG_RUNTIME_DIR": "/run/user/1001", "LC_ALL": "C", "SYSTEMD_PAGER": ""}


def test_root_asks_its_own_user_manager_without_runuser(module, host):
    root_user = {"name": "root", "uid": 0, "runtime_dir": "/run/user/0"}
    _systemd.Systemctl(module, root_user, root=True).run("list-units")
    assert [call["tool"] for call in host()] == ["systemctl"]


def test_not_available_without_runuser_when_it_is_needed(module, monkeypatch):
    found = {"systemctl": "/bin/systemctl"}  # no runuser
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: found.get(name))
    assert not _systemd.Systemctl(module, POOL, root=True).available
    assert _systemd.Systemctl(module, POOL, root=False).available
    assert _systemd.Systemctl(module, root=True).available


def test_show_parses_properties(module, host):
    shown = _systemd.Systemctl(module, root=True).show("x.service", ["ActiveState", "MainPID", "ExecStart"])
    assert shown == {"ActiveState": "active", "MainPID": "42", "ExecStart": "{ path=/bin/x ; argv[]=/bin/x a=b ; }"}
    assert host()[0]["argv"] == ["show", "--property=ActiveState,MainPID,ExecStart", "x.service"]


def test_check_fails_the_module_with_what_systemctl_said(module, host):
    actions = ["write unit"]
    systemctl = _systemd.Systemctl(module, required=True, root=True, failure={"actions": actions})
    assert systemctl.check("start", "good.service") == ""
    with pytest.raises(Failed) as failed:
        systemctl.check("stop", "broken.service")
    assert failed.value.args[0] == {
        "msg": "systemctl stop broken.service failed: Failed to stop broken.service: Access denied",
        "rc": 4,
        "actions": ["write unit"],
    }
    with pytest.raises(Failed) as failed:
        systemctl.show("broken.service", ["ActiveState"])
    assert failed.value.args[0]["msg"].startswith("systemctl show broken.service failed: Failed to stop")
    # run() reports and never fails (callers that ignore a failed reset-failed or stop).
    assert systemctl.run("reset-failed", "broken.service")[0] == 4


def test_required_fails_when_systemctl_is_missing(module, monkeypatch):
    def missing(arg, opt_dirs=None):
        raise ValueError(f"Failed to find required executable {arg!r}")

    monkeypatch.setattr(basic, "get_bin_path", missing)
    with pytest.raises(Failed) as failed:
        _systemd.Systemctl(module, required=True, root=True)
    assert "systemctl" in failed.value.args[0]["msg"]
    assert not _systemd.Systemctl(module, root=True).available


def test_reset_failed_clears_tolerates_an_unloaded_unit_and_fails_on_anything_else(module, host):
    systemctl = _systemd.Systemctl(module, POOL, required=True, root=False)
    assert systemctl.reset_failed("lsyncd.service") is True
    assert systemctl.reset_failed("gone.service") is False  # stopped and unloaded at once: nothing to clear
    assert [call["argv"] for call in host()] == [
        ["--user", "reset-failed", "--", "lsyncd.service"],
        ["--user", "reset-failed", "--", "gone.service"],
    ]
    with pytest.raises(Failed) as failed:
        systemctl.reset_failed("broken.service")
    assert failed.value.args[0]["msg"].startswith("systemctl reset-failed broken.service failed: Failed to stop")
