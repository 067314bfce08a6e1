"""_neutralize's decision table: what each mode does with what the scan found, one test per row.

The facts are built by hand in the shape ``_sync_scan.Scanner.facts`` returns (units, cron_lines, processes,
lsyncd_configs); the module's run on a faked host is in tests/unit/plugins/modules/test_sync_hazard.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _neutralize, _syncers

MODELS = "/data/models"


def unit(tool="lsyncd", scope="user", user="pool", name="lsyncd.service", **changes):
    record = {
        "tool": tool,
        "scope": scope,
        "user": user if scope == "user" else None,
        "uid": 1001 if scope == "user" else None,
        "unit": name,
        "timers": [],
        "manager_running": True,
        "active_state": "active",
        "sub_state": "running",
        "unit_file_state": "enabled",
        "masked": False,
        "masked_and_stopped": False,
        "relocate_from": None,
        "relocate_to": None,
        "mask_path": f"/home/{user}/.config/systemd/user/{name}",
        "wants_links": [],
        "configs": [],
        "overlaps_model_dir": True,
        "run_in_exclude_mode": tool == "lsyncd",
        "enable_in_exclude_mode": tool == "lsyncd",
    }
    record.update(changes)
    return record


def cron(tool="lsyncd", **changes):
    record = {
        "tool": tool,
        "file": "/var/spool/cron/crontabs/pool",
        "line_no": 1,
        "line": f"@reboot {tool} x",
        "disabled_line": _syncers.CRON_DISABLED_MARKER + f"@reboot {tool} x",
        "disabled": False,
        "overlaps_model_dir": True,
    }
    record.update(changes)
    return record


def proc(tool="lsyncd", pid=900, **changes):
    return {"tool": tool, "pid": pid, "user": "root", "argv": [tool], "overlaps_model_dir": True, **changes}


def config(path="/home/pool/.lsyncd.conf.lua", **changes):
    record = {"path": path, "exists": True, "exclude_changes": True, "rewrite_problems": [], "excluded_content": "x"}
    record.update(changes)
    return record


def facts(units=(), cron_lines=(), processes=(), configs=()):
    return {
        "units": list(units),
        "cron_lines": list(cron_lines),
        "processes": list(processes),
        "lsyncd_configs": list(configs),
    }


def names(entries, key="unit"):
    return [e[key] for e in entries]


# -- the table: one test per row ------------------------------------------------------------------------------


def test_disable_takes_every_lsyncd_unit_even_one_reaching_no_model_directory():
    decided = _neutralize.plan(facts([unit(), unit(name="other.service", overlaps_model_dir=False)]), "disable", False)
    assert names(decided["units_off"]) == ["lsyncd.service", "other.service"]


def test_a_unit_already_masked_and_stopped_is_done():
    decided = _neutralize.plan(facts([unit(masked=True, masked_and_stopped=True)]), "disable", False)
    assert decided["units_off"] == []
    assert not _neutralize.work_left(decided)


def test_other_syncers_units_only_when_asked_and_only_when_they_reach_a_model_directory():
    units = [unit(tool="rsync", scope="system", name="backup.service"), unit(tool="rsync", name="far.service")]
    units[1]["overlaps_model_dir"] = False
    assert _neutralize.plan(facts(units), "disable", False)["units_off"] == []
    assert names(_neutralize.plan(facts(units), "disable", True)["units_off"]) == ["backup.service"]


def test_disable_takes_lsyncd_cron_lines_not_yet_disabled():
    lines = [cron(line_no=1), cron(line_no=2, disabled=True), cron(tool="rsync", line_no=3)]
    decided = _neutralize.plan(facts(cron_lines=lines), "disable", False)
    assert names(decided["cron_off"], "line_no") == [1]
    decided = _neutralize.plan(facts(cron_lines=lines), "disable", True)
    assert names(decided["cron_off"], "line_no") == [1, 3]


def test_disable_ends_lsyncd_processes_and_others_only_when_asked():
    processes = [proc(pid=900), proc(tool="unison", pid=901), proc(tool="rsync", pid=902, overlaps_model_dir=False)]
    assert names(_neutralize.plan(facts(processes=processes), "disable", False)["kill"], "pid") == [900]
    assert names(_neutralize.plan(facts(processes=processes), "disable", True)["kill"], "pid") == [900, 901]


def test_audit_does_nothing_even_with_other_syncers_on():
    found = facts([unit(), unit(tool="rsync", name="b.service")], [cron(), cron(tool="rsync")], [proc()], [config()])
    decided = _neutralize.plan(found, "audit", True)
    assert not _neutralize.work_left(decided)
    assert decided["unprotectable"] == []


def test_exclude_leaves_lsyncd_running_and_disables_only_other_syncers():
    found = facts([unit(), unit(tool="rsync", name="b.service")], [cron()], [proc(), proc(tool="rsync", pid=7)])
    decided = _neutralize.plan(found, "exclude", True)
    assert names(decided["units_off"]) == ["b.service"]
    assert decided["cron_off"] == []
    assert names(decided["kill"], "pid") == [7]


def test_exclude_rewrites_existing_configs_that_change():
    configs = [config("/a"), config("/b", exclude_changes=False), config("/c", exists=False)]
    assert names(_neutralize.plan(facts(configs=configs), "exclude", False)["rewrite"], "path") == ["/a"]
    assert _neutralize.plan(facts(configs=configs), "disable", False)["rewrite"] == []


def test_exclude_refuses_what_it_cannot_protect():
    configs = [config("/a", rewrite_problems=["/a: sync 1 exclude is an expression"]), config("/b", exists=False)]
    decided = _neutralize.plan(facts(configs=configs), "exclude", False)
    assert decided["unprotectable"] == ["/a: sync 1 exclude is an expression"]
    assert _neutralize.plan(facts(configs=configs), "disable", False)["unprotectable"] == []


def test_exclude_restarts_a_unit_whose_config_is_rewritten():
    found = facts([unit(configs=["/a"])], configs=[config("/a")])
    (on,) = _neutralize.plan(found, "exclude", False)["units_on"]
    assert on["steps"] == ["restart"]


def test_exclude_starts_unmasks_and_enables_a_masked_unit():
    masked = unit(masked=True, masked_and_stopped=True, active_state="inactive", unit_file_state="masked")
    (on,) = _neutralize.plan(facts([masked]), "exclude", False)["units_on"]
    assert on["steps"] == ["unmask", "enable", "start"]


def test_exclude_leaves_a_running_enabled_unit_with_an_unchanged_config_alone():
    found = facts([unit(configs=["/a"])], configs=[config("/a", exclude_changes=False)])
    decided = _neutralize.plan(found, "exclude", False)
    assert decided["units_on"] == []
    assert not _neutralize.work_left(decided)


def test_exclude_skips_lsyncd_units_it_does_not_run():
    idle = unit(active_state="inactive", unit_file_state="disabled", run_in_exclude_mode=False)
    assert _neutralize.plan(facts([idle]), "exclude", False)["units_on"] == []


def test_exclude_only_unmasks_a_user_unit_whose_manager_is_not_running():
    dormant = unit(manager_running=False, masked=True, active_state="inactive", unit_file_state="masked")
    (on,) = _neutralize.plan(facts([dormant]), "exclude", False)["units_on"]
    assert on["steps"] == ["unmask-link"]
    assert _neutralize.plan(facts([{**dormant, "masked": False}]), "exclude", False)["units_on"] == []


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="purge"):
        _neutralize.plan(facts(), "purge", False)


# -- the steps per unit -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "steps"),
    [
        ({}, ["stop", "disable", "reset-failed", "mask"]),
        ({"active_state": "activating"}, ["stop", "disable", "reset-failed", "mask"]),  # Restart= pending
        ({"active_state": "failed", "unit_file_state": "static"}, ["mask"]),
        ({"masked": True, "unit_file_state": "masked"}, ["stop", "reset-failed"]),  # masked, still running
        ({"unit_file_state": "generated"}, ["stop", "disable", "reset-failed", "mask"]),  # an init script
        ({"timers": ["b.timer"], "active_state": "inactive", "unit_file_state": "static"}, ["timers", "mask"]),
        ({"relocate_from": "/etc/systemd/system/b.service"}, ["stop", "disable", "reset-failed", "relocate", "mask"]),
        ({"manager_running": False, "wants_links": ["/w"]}, ["unlink-wants", "mask-link"]),
        ({"manager_running": False, "relocate_from": "/x"}, ["relocate", "mask-link"]),
    ],
)
def test_unit_off_steps(changes, steps):
    assert _neutralize.unit_off_steps(unit(**changes)) == steps


def test_lsyncd_down_ignores_units_left_to_the_next_login():
    units = [
        unit(active_state="failed"),
        unit(name="b.service", active_state="inactive", manager_running=False),
        unit(name="c.service"),
        unit(tool="rsync", name="d.service", active_state="failed", run_in_exclude_mode=False),
    ]
    assert names(_neutralize.lsyncd_down(facts(units))) == ["lsyncd.service"]


# -- crontab lines ------------------------------------------------------------------------------------------------


def test_disable_cron_lines_prefixes_the_line_and_keeps_the_rest():
    text = "MAILTO=x\n*/5 * * * * rsync -a --delete /a/ /b/\n@daily true\n"
    entry = cron(line_no=2, line="*/5 * * * * rsync -a --delete /a/ /b/")
    entry["disabled_line"] = _syncers.CRON_DISABLED_MARKER + entry["line"]
    after = _neutralize.disable_cron_lines(text, [entry])
    assert after == f"MAILTO=x\n{entry['disabled_line']}\n@daily true\n"
    assert _syncers.parse_crontab(after, owner="pool")[0]["disabled"]
    assert _neutralize.disable_cron_lines(after, [entry]) == after  # a second run changes nothing


def test_disable_cron_lines_finds_a_line_that_moved_and_ends_it_with_a_newline():
    entry = cron(line_no=1, line="@reboot lsyncd x")
    text = "# added since the scan\n@reboot lsyncd x"
    assert _neutralize.disable_cron_lines(text, [entry]) == f"# added since the scan\n{entry['disabled_line']}\n"
