"""sync_hazard on the recorded host of test_sync_hazard_facts.py: each state acts, a rerun changes nothing, check
mode writes nothing.

systemctl's answers come from that host's fake, extended here with what stop, disable, mask, unmask, enable, start and
restart do to a unit; files and processes go through _neutralize's seam (move, mask_link, remove, write_file,
terminate...), faked over the same FakeFs. The real thing runs in the lsyncd molecule scenario.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import test_sync_hazard_facts
from ansible.module_utils import basic
from test_sync_hazard_facts import FILES, MODELS

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _neutralize, _sync_scan, _syncers
from ansible_collections.llamarpc.cluster.plugins.modules import sync_hazard

host = test_sync_hazard_facts.host  # the recorded host's fixture, shared with the facts module's tests

POOL_CONFIG = "/data/home/pool/.lsyncd.conf.lua"
BOB_CONFIG = "/home/bob/l.lua"
MUTATING = {"stop", "disable", "mask", "unmask", "enable", "start", "restart", "reset-failed", "daemon-reload"}
TIMERS = {"backup.timer": {"ActiveState": "active", "UnitFileState": "enabled"}}


@pytest.fixture
def world(host, monkeypatch):  # noqa: F811
    """The recorded host, with systemctl verbs and the file and process operations acting on it."""
    scanning = basic.AnsibleModule.run_command
    timers = copy.deepcopy(TIMERS)
    done = SimpleNamespace(writes=[], backups=[], terms=[], sleeps=[], verbs=[], host=host, timers=timers)
    restart_result = {"ActiveState": "active", "SubState": "running"}
    premask = {}
    done.restart_result = restart_result

    def run_command(self, argv, environ_update=None, **kwargs):
        if isinstance(argv, str) or "systemctl" not in " ".join(argv):
            raise AssertionError(f"unexpected command {argv}")
        rest = argv[argv.index("/bin/systemctl") + 1 :]
        user = "--user" in rest
        rest = [a for a in rest if a not in {"--user", "--"}]
        verb = rest[0]
        if verb == "show" and rest[1].startswith("--property="):
            units = host.pool_units if user else host.system_units
            props = timers.get(rest[2]) or {"UnitFileState": units[rest[2]]["UnitFileState"]}
            return 0, "".join(f"{k}={v}\n" for k, v in props.items()), ""
        if verb not in MUTATING:
            return scanning(self, argv, environ_update=environ_update, **kwargs)
        done.verbs.append((verb, "pool" if user else None, *rest[1:]))
        units = host.pool_units if user else host.system_units
        name = rest[1] if len(rest) > 1 else None
        if name in timers:
            timers[name].update({"stop": {"ActiveState": "inactive"}, "disable": {"UnitFileState": "disabled"}}[verb])
        elif verb == "stop":
            units[name].update({"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"})
            host.processes[:] = [p for p in host.processes if p["cgroup"]["unit"] != name]
        elif verb == "disable" and units[name]["UnitFileState"] != "generated":  # an init script's unit stays so
            units[name]["UnitFileState"] = "disabled"
        elif verb == "mask":
            premask[(user, name)] = dict(units[name])
            units[name].update({"UnitFileState": "masked", "LoadState": "masked", "ExecStart": "", "FragmentPath": ""})
            assert mask_path(user, name) not in host.fs.files, "systemctl mask refuses a file in its way"
            host.fs.files[mask_path(user, name)] = ("link", "/dev/null")
        elif verb == "unmask":
            units[name].update(premask.pop((user, name)))
            del host.fs.files[mask_path(user, name)]
        elif verb == "enable":
            units[name]["UnitFileState"] = "enabled"
        elif verb in {"start", "restart"}:
            units[name].update(restart_result)
        return 0, "", ""

    def move(source, target, owner):
        assert target not in host.fs.files
        host.fs.files[target] = host.fs.files.pop(source)

    def mask_link(path, owner):
        host.fs.files[path] = ("link", "/dev/null")

    def write_file(module, path, content, validate=None):
        done.writes.append(path)
        host.fs.files[path] = content

    def terminate(pid):
        done.terms.append(pid)
        host.processes[:] = [p for p in host.processes if p["pid"] != pid]
        return True

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "backup_local", lambda self, path: done.backups.append(path) or "b~")
    monkeypatch.setattr(_neutralize, "move", move)
    monkeypatch.setattr(_neutralize, "mask_link", mask_link)
    monkeypatch.setattr(_neutralize, "remove", host.fs.files.pop)
    monkeypatch.setattr(_neutralize, "lexists", lambda path: path in host.fs.files)
    monkeypatch.setattr(_neutralize, "write_file", write_file)
    monkeypatch.setattr(_neutralize, "terminate", terminate)
    monkeypatch.setattr(_neutralize, "alive", lambda pid: any(p["pid"] == pid for p in host.processes))
    monkeypatch.setattr(_neutralize, "owner_of", lambda unit: (0, 0) if unit["scope"] == "system" else (1001, 1001))
    monkeypatch.setattr(_neutralize.time, "sleep", done.sleeps.append)
    return done


def mask_path(user, name):
    return f"{'/data/home/pool/.config/systemd/user' if user else '/etc/systemd/system'}/{name}"


def snapshot(world):
    return (
        copy.deepcopy(world.host.fs.files),
        copy.deepcopy(world.host.system_units),
        copy.deepcopy(world.host.pool_units),
        copy.deepcopy(world.host.processes),
        copy.deepcopy(world.timers),
    )


def run(run_module, args, check_mode=False):
    outcome = run_module(sync_hazard, {"model_dirs": [MODELS], "_ansible_diff": True, **args}, check_mode=check_mode)
    assert not outcome.failed, outcome.result
    return outcome.result


DISABLE = {"state": "disable", "disable_other_syncers": True}
EXPECTED_DISABLE = [
    "stop system unit backup.service",
    "stop timer backup.timer of system unit backup.service",
    "disable timer backup.timer of system unit backup.service",
    "move /etc/systemd/system/backup.service to /usr/local/lib/systemd/system/backup.service (out of the mask's way)",
    "mask system unit backup.service",
    "stop system unit lsyncd.service",
    "disable system unit lsyncd.service",
    "mask system unit lsyncd.service",
    "remove the enablement link /home/bob/.config/systemd/user/default.target.wants/mirror.service of user unit "
    "mirror.service of bob",
    "move /home/bob/.config/systemd/user/mirror.service to /home/bob/.local/share/systemd/user/mirror.service "
    "(out of the mask's way)",
    "mask user unit mirror.service of bob (link /home/bob/.config/systemd/user/mirror.service to /dev/null)",
    "stop user unit lsyncd.service of pool",
    "disable user unit lsyncd.service of pool",
    "move /data/home/pool/.config/systemd/user/lsyncd.service to "
    "/data/home/pool/.local/share/systemd/user/lsyncd.service (out of the mask's way)",
    "mask user unit lsyncd.service of pool",
    "disable crontab line /var/spool/cron/crontabs/pool:1",
    "end lsyncd process 900 of root (SIGTERM, no unit runs it)",
]


def test_disable_in_check_mode_predicts_and_writes_nothing(run_module, world):
    world.host.system_units["backup.service"]["ActiveState"] = "active"
    before = snapshot(world)
    result = run(run_module, DISABLE, check_mode=True)
    assert result["changed"] is True
    assert result["actions"] == EXPECTED_DISABLE
    assert snapshot(world) == before
    assert world.verbs == [] and world.writes == [] and world.terms == [] and world.sleeps == []
    crontab = next(d for d in result["diff"] if d["before_header"] == "/var/spool/cron/crontabs/pool")
    assert crontab["after"].startswith(_syncers.CRON_DISABLED_MARKER + "*/5 * * * * rsync -a --delete")
    pool = next(d for d in result["diff"] if d["before_header"] == "user unit lsyncd.service of pool")
    assert pool == {
        "before_header": "user unit lsyncd.service of pool",
        "after_header": "user unit lsyncd.service of pool",
        "before": "ActiveState=active\nUnitFileState=enabled\n",
        "after": "ActiveState=inactive\nUnitFileState=masked\n",
    }
    # Check mode reports the first scan: everything is still there.
    unresolved = {h["id"] for h in result["ansible_facts"]["sync_hazards"]["unresolved"]}
    assert "lsyncd:unit:user:pool:lsyncd.service" in unresolved


def test_disable_acts_through_systemctl_then_a_rerun_and_check_mode_change_nothing(run_module, world):
    world.host.system_units["backup.service"]["ActiveState"] = "active"
    first = run(run_module, DISABLE)
    assert first["changed"] is True
    assert first["actions"] == EXPECTED_DISABLE
    pool_verbs = [v for v in world.verbs if v[1] == "pool"]
    assert pool_verbs == [
        ("stop", "pool", "lsyncd.service"),
        ("disable", "pool", "lsyncd.service"),
        ("reset-failed", "pool", "lsyncd.service"),
        ("daemon-reload", "pool"),  # the unit file moved: the manager reads it again before the mask
        ("mask", "pool", "lsyncd.service"),
    ]
    assert ("reset-failed", None, "backup.service") in world.verbs
    assert world.terms == [900]
    assert world.writes == ["/var/spool/cron/crontabs/pool"]
    files = world.host.fs.files
    assert files["/data/home/pool/.config/systemd/user/lsyncd.service"] == ("link", "/dev/null")
    assert (
        files["/data/home/pool/.local/share/systemd/user/lsyncd.service"]
        == FILES["/data/home/pool/.config/systemd/user/lsyncd.service"]
    )
    assert files["/home/bob/.config/systemd/user/mirror.service"] == ("link", "/dev/null")
    assert "/home/bob/.config/systemd/user/default.target.wants/mirror.service" not in files
    # The second scan: only the tmpfiles rule is left (the role reports it, it rewrites no tmpfiles.d).
    after = first["ansible_facts"]["sync_hazards"]
    assert [h["id"] for h in after["unresolved"]] == ["tmpfiles:/etc/tmpfiles.d/models.conf:1"]

    world.verbs.clear()
    again = run(run_module, DISABLE)
    assert again["changed"] is False and again["actions"] == [] and "diff" not in again
    assert world.verbs == []
    checked = run(run_module, DISABLE, check_mode=True)
    assert checked["changed"] is False and checked["actions"] == []


def test_disable_leaves_other_syncers_alone_unless_asked(run_module, world):
    result = run(run_module, {"state": "disable"})
    assert not any("backup" in a or "crontab" in a for a in result["actions"])
    unresolved = {h["id"] for h in result["ansible_facts"]["sync_hazards"]["unresolved"]}
    assert {"rsync:unit:system:backup.service", "rsync:cron:/var/spool/cron/crontabs/pool:1"} <= unresolved


def test_audit_changes_nothing(run_module, world):
    before = snapshot(world)
    result = run(run_module, {"state": "audit", "disable_other_syncers": True})
    assert result["changed"] is False and result["actions"] == []
    assert snapshot(world) == before and world.verbs == []
    assert len(result["ansible_facts"]["sync_hazards"]["unresolved"]) == 5


EXCLUDE = {"state": "exclude"}


def test_exclude_rewrites_the_config_restarts_lsyncd_and_settles(run_module, world):
    before = snapshot(world)
    checked = run(run_module, EXCLUDE, check_mode=True)
    assert checked["actions"] == [
        f"rewrite {POOL_CONFIG} with the model directories excluded and delete off",
        f"rewrite {BOB_CONFIG} with the model directories excluded and delete off",  # delete = false: excludes added
        "restart user unit lsyncd.service of pool",  # bob's manager is not running: his unit starts at his login
    ]
    assert snapshot(world) == before and world.verbs == [] and world.backups == [] and world.sleeps == []
    (config_diff,) = [d for d in checked["diff"] if d["before_header"] == POOL_CONFIG]
    assert "delete = false" in config_diff["after"] and "delete = false" not in config_diff["before"]

    first = run(run_module, EXCLUDE)
    assert first["actions"] == checked["actions"]
    assert world.backups == [POOL_CONFIG, BOB_CONFIG] and world.writes == [POOL_CONFIG, BOB_CONFIG]
    assert world.verbs == [("restart", "pool", "lsyncd.service")]
    assert world.sleeps == [3]
    hazards = {h["id"]: h for h in first["ansible_facts"]["sync_hazards"]["hazards"]}
    pool = hazards["lsyncd:unit:user:pool:lsyncd.service"]
    assert pool["neutralised"] and pool["deletes"] is False

    again = run(run_module, EXCLUDE)
    assert again["changed"] is False and again["actions"] == []
    assert world.backups == [POOL_CONFIG, BOB_CONFIG]  # kept once


def test_exclude_starts_again_what_the_disable_mode_masked(run_module, world):
    run(run_module, {"state": "disable"})
    world.verbs.clear()
    result = run(run_module, EXCLUDE)
    assert "unmask user unit lsyncd.service of pool" in result["actions"]
    assert [v for v in world.verbs if v[1] == "pool"] == [
        ("unmask", "pool", "lsyncd.service"),
        ("enable", "pool", "lsyncd.service"),
        ("restart", "pool", "lsyncd.service"),  # its config was rewritten
    ]
    # The init script's unit: unmasked, it is enabled already (generated); started, not enabled again.
    assert [v for v in world.verbs if v[1] is None] == [
        ("unmask", None, "lsyncd.service"),
        ("start", None, "lsyncd.service"),
    ]
    again = run(run_module, EXCLUDE)
    assert again["changed"] is False, again["actions"]
    assert (
        "unmask user unit mirror.service of bob (remove /home/bob/.config/systemd/user/mirror.service; it starts at "
        "the next login)" in result["actions"]
    )


def test_exclude_fails_when_lsyncd_does_not_come_back(run_module, world):
    world.restart_result.update({"ActiveState": "failed", "SubState": "failed"})
    outcome = run_module(sync_hazard, {"model_dirs": [MODELS], **EXCLUDE})
    assert outcome.failed
    assert outcome.result["msg"] == (
        "lsyncd did not come back after its config was rewritten (check its log and journal): lsyncd.service"
    )
    assert outcome.result["changed"] is True


def test_exclude_refuses_an_unprotectable_config_before_changing_anything(run_module, world):
    world.host.fs.files[POOL_CONFIG] = (
        'sync { default.rsync, source = "/data/home/pool/work/", target = "n:/data/home/pool/work/",'
        ' rsync = { _extra = { "--delete-after" } } }\n'
    )
    before = snapshot(world)
    outcome = run_module(sync_hazard, {"model_dirs": [MODELS], "state": "exclude", "disable_other_syncers": True})
    assert outcome.failed
    assert outcome.result["msg"].startswith("the exclude mode cannot protect these lsyncd syncs")
    assert outcome.result["unprotectable"]
    assert snapshot(world) == before and world.verbs == [] and world.writes == []


@pytest.mark.parametrize("state", ["disable", "exclude"])
def test_acting_needs_root_and_fails_before_the_scan(run_module, world, monkeypatch, state):
    monkeypatch.setattr(_sync_scan.os, "geteuid", lambda: 1001)
    monkeypatch.setattr(_sync_scan.Scanner, "scan", lambda self: pytest.fail("scanned without root"))
    outcome = run_module(sync_hazard, {"model_dirs": [MODELS], "state": state})
    assert outcome.failed
    assert outcome.result["msg"] == f"the {state} mode needs root on the host: run it with become"


def test_audit_without_root_scans_what_it_can(run_module, world, monkeypatch):
    monkeypatch.setattr(_sync_scan.os, "geteuid", lambda: 1001)
    result = run(run_module, {"state": "audit"})
    assert any("not root" in w for w in result["ansible_facts"]["sync_hazards"]["warnings"])


def test_bad_input_fails_before_scanning(run_module, monkeypatch):
    monkeypatch.setattr(_sync_scan.Scanner, "__init__", lambda *a: pytest.fail("scanned despite bad input"))
    outcome = run_module(sync_hazard, {"model_dirs": ["data/models"], "state": "disable"})
    assert outcome.failed and "is not an absolute path" in outcome.result["msg"]
