"""systemd_units: enable, then start, only what is not enabled or not running; a failed start (219/CGROUP) tried
again; an unknown unit fails; check mode reads and predicts without acting; a rerun changes nothing.

No systemd here: a stand-in ``systemctl`` first on PATH keeps each unit's state in a JSON file and records its argv.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from ansible_collections.llamarpc.cluster.plugins.modules import systemd_units

SYSTEMCTL = textwrap.dedent(
    """\
    import json, os, sys
    path = os.environ["FAKE_UNITS"]
    units = json.load(open(path))
    args = sys.argv[1:]
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(" ".join(args) + "\\n")
    unit = units.get(args[-1])
    if args[0] == "show":
        if unit is None:
            print("LoadState=not-found\\nActiveState=inactive")
        else:
            print(f"LoadState=loaded\\nActiveState={unit['active']}")
    elif args[0] == "is-enabled":
        state = unit.get("file", "enabled" if unit["enabled"] else "disabled") if unit else "disabled"
        print(state)
        sys.exit(0 if state in ("enabled", "static") else 1)
    elif args[0] == "enable":
        unit["enabled"] = True
    elif args[0] == "disable":
        unit["enabled"] = False
    elif args[0] == "stop":
        unit["active"] = "inactive"
    elif args[0] == "start":
        if unit.get("fail_starts", 0) > 0:
            unit["fail_starts"] -= 1
            json.dump(units, open(path, "w"))
            sys.stderr.write(f"Job for {args[-1]} failed because the control process exited with error code.\\n")
            sys.exit(1)
        unit["active"] = "active"
    json.dump(units, open(path, "w"))
    """
)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A stand-in systemctl over ``units`` (name: {active, enabled, fail_starts}); returns (set_units, calls)."""
    script = tmp_path / "systemctl"
    script.write_text(f"#!{sys.executable}\n{SYSTEMCTL}", encoding="utf-8")
    script.chmod(0o755)
    state, log = tmp_path / "units.json", tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_UNITS", str(state))
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    def set_units(units):
        state.write_text(json.dumps(units))

    def calls():
        """The state-changing systemctl calls so far (enable, start, disable, stop)."""
        lines = log.read_text().splitlines() if log.exists() else []
        return [line for line in lines if line.split()[0] in ("enable", "start", "disable", "stop")]

    set_units.read = lambda: json.loads(state.read_text())
    return set_units, calls


UNITS = ["w-firewall.service", "w.service", "w-prune.timer"]
ARGS = {"units": UNITS, "delay": 0}


def test_running_enabled_units_are_left_alone(run_module, host):
    set_units, calls = host
    set_units({name: {"active": "active", "enabled": True} for name in UNITS})
    result = run_module(systemd_units, ARGS)
    assert not result.result["changed"] and result.result["actions"] == [] and calls() == []


def test_an_activating_unit_is_not_started_again(run_module, host):
    set_units, calls = host
    set_units({name: {"active": "activating" if name == "w.service" else "active", "enabled": True} for name in UNITS})
    assert not run_module(systemd_units, ARGS).result["changed"] and calls() == []


def test_only_what_is_missing_is_done_enable_before_start_then_a_rerun_changes_nothing(run_module, host):
    set_units, calls = host
    set_units(
        {
            "w-firewall.service": {"active": "active", "enabled": True},
            "w.service": {"active": "failed", "enabled": False},
            "w-prune.timer": {"active": "inactive", "enabled": True},
        }
    )
    result = run_module(systemd_units, ARGS)
    assert result.result["actions"] == ["enable w.service", "start w.service", "start w-prune.timer"]
    assert calls() == ["enable w.service", "start w.service", "start w-prune.timer"]
    assert all(unit["active"] == "active" and unit["enabled"] for unit in set_units.read().values())
    assert not run_module(systemd_units, ARGS).result["changed"]


def test_check_mode_predicts_and_does_nothing(run_module, host):
    set_units, calls = host
    set_units({name: {"active": "inactive", "enabled": False} for name in UNITS})
    result = run_module(systemd_units, {**ARGS, "_ansible_diff": True}, check_mode=True)
    assert result.result["changed"] and len(result.result["actions"]) == 6
    assert result.result["diff"]["before"]["w.service"] == {"active": "inactive", "enabled": False}
    assert result.result["diff"]["after"]["w.service"] == {"active": "active", "enabled": True}
    assert calls() == []


def test_a_start_that_fails_with_219_cgroup_is_tried_again(run_module, host):
    set_units, calls = host
    set_units({"w.service": {"active": "inactive", "enabled": True, "fail_starts": 2}})
    result = run_module(systemd_units, {"units": ["w.service"], "delay": 0})
    assert not result.failed and result.result["actions"] == ["start w.service"]
    assert calls() == ["start w.service"] * 3
    assert set_units.read()["w.service"]["active"] == "active"


def test_a_start_that_keeps_failing_fails_the_task_after_the_retries(run_module, host):
    set_units, calls = host
    set_units({"w.service": {"active": "inactive", "enabled": True, "fail_starts": 10}})
    result = run_module(systemd_units, {"units": ["w.service"], "delay": 0, "retries": 3})
    assert result.failed and calls() == ["start w.service"] * 4
    assert result.result["msg"].startswith("systemctl start w.service failed (4 attempts): Job for w.service failed")


def test_an_unknown_unit_fails_before_anything_is_done(run_module, host):
    set_units, calls = host
    set_units({"w.service": {"active": "inactive", "enabled": False}})
    result = run_module(systemd_units, {"units": ["w.service", "nope.service"], "delay": 0})
    assert result.failed and "Could not find the requested unit nope.service" in result.result["msg"]
    assert calls() == []


def test_units_to_stop_are_disabled_then_stopped_after_the_others_then_left_alone(run_module, host):
    set_units, calls = host
    set_units(
        {
            "w.service": {"active": "inactive", "enabled": True},
            "w-watch.timer": {"active": "active", "enabled": True},
        }
    )
    args = {"units": ["w.service"], "stopped": ["w-watch.timer"], "delay": 0, "_ansible_diff": True}
    predicted = run_module(systemd_units, args, check_mode=True)
    assert predicted.result["actions"] == ["start w.service", "disable w-watch.timer", "stop w-watch.timer"]
    assert predicted.result["diff"]["after"]["w-watch.timer"] == {"active": "inactive", "enabled": False}
    assert calls() == []
    assert run_module(systemd_units, args).result["actions"] == predicted.result["actions"]
    assert calls() == predicted.result["actions"]
    assert set_units.read()["w-watch.timer"] == {"active": "inactive", "enabled": False}
    assert not run_module(systemd_units, args).result["changed"]


def test_a_stopped_unit_that_is_inactive_is_only_disabled(run_module, host):
    set_units, calls = host
    set_units({"w-watch.timer": {"active": "inactive", "enabled": True}})
    result = run_module(systemd_units, {"units": [], "stopped": ["w-watch.timer"], "delay": 0})
    assert result.result["actions"] == ["disable w-watch.timer"] and calls() == ["disable w-watch.timer"]


def test_a_static_unit_to_stop_is_not_disabled(run_module, host):
    set_units, calls = host
    set_units({"w-once.service": {"active": "active", "enabled": True, "file": "static"}})
    result = run_module(systemd_units, {"units": [], "stopped": ["w-once.service"], "delay": 0})
    assert result.result["actions"] == ["stop w-once.service"] and calls() == ["stop w-once.service"]


def test_an_unknown_unit_to_stop_fails_before_anything_is_done(run_module, host):
    set_units, calls = host
    set_units({"w.service": {"active": "inactive", "enabled": True}})
    result = run_module(systemd_units, {"units": ["w.service"], "stopped": ["nope.timer"], "delay": 0})
    assert result.failed and "Could not find the requested unit nope.timer" in result.result["msg"]
    assert calls() == []
