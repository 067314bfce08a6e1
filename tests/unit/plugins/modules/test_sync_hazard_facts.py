"""sync_hazard_facts on a recorded host: systemctl answers, files, users and processes are faked.

The real thing runs in the lsyncd molecule scenario (real lsyncd, real user managers); here every branch
of the scan is exercised on one host holding one of each hazard.
"""

from __future__ import annotations

import copy
import fnmatch
import posixpath
import pwd
import stat
from types import SimpleNamespace

import pytest
from ansible.module_utils import basic

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _sync_host, _sync_scan, _syncers
from ansible_collections.llamarpc.cluster.plugins.modules import sync_hazard_facts as shf

MODELS = "/data/home/pool/work/models"

SEED = """\
settings { logfile = "/data/home/pool/.lsyncd.log", nodaemon = true }
local workers = { "10.0.0.12", "10.0.0.13" }
for _, host in ipairs(workers) do
  sync {
    default.rsync,
    source = "/data/home/pool/work/",
    target = host .. ":/data/home/pool/work/",
  }
end
"""

USERS = [
    ("root", 0, "/root"),
    ("lab", 1000, "/home/lab"),
    ("pool", 1001, "/data/home/pool"),
    ("bob", 1002, "/home/bob"),
]

FILES = {
    "/run/systemd/system/.keep": "",
    "/run/user/1001/systemd/private": "",
    "/var/lib/systemd/linger/pool": "",
    "/data/home/pool/.lsyncd.conf.lua": SEED,
    "/data/home/pool/.config/systemd/user/lsyncd.service": (
        "[Service]\nExecStart=/usr/bin/lsyncd -nodaemon %h/.lsyncd.conf.lua\n"
    ),
    "/etc/init.d/lsyncd": "#!/bin/sh\n",
    "/etc/systemd/system/backup.service": "[Service]\nExecStart=/usr/bin/rsync -a --delete /srv/m/ " + MODELS + "/\n",
    # bob's manager is not running: his unit is read from disk (and it protects the models: delete = false).
    "/home/bob/.config/systemd/user/mirror.service": "[Service]\nExecStart=/usr/bin/lsyncd %h/l.lua\nRestart=always\n",
    "/home/bob/.config/systemd/user/default.target.wants/mirror.service": ("link", "../mirror.service"),
    "/home/bob/l.lua": 'sync { default.rsync, source = "/data/home/pool/work/", target = "n:/data/home/pool/work/",'
    " delete = false }\n",
    "/home/bob/.config/syncthing/config.xml": f'<folder id="models" path="{MODELS}" type="sendreceive"></folder>',
    "/var/spool/cron/crontabs/pool": "*/5 * * * * rsync -a --delete /srv/m/ " + MODELS + "/\n"
    "@daily rsync -a --delete /data/home/pool/work/ /srv/backup/\n"
    "@hourly rsync -a /srv/m/ /data/home/pool/work/models/\n",
    "/etc/crontab": "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n",
    "/etc/tmpfiles.d/models.conf": f"e {MODELS} - - - 7d\n",
    "/usr/lib/tmpfiles.d/tmp.conf": "D /tmp 1777 root root -\n",
}

SYSTEM_UNITS = {
    "lsyncd.service": {
        "ExecStart": "{ path=/etc/init.d/lsyncd ; argv[]=/etc/init.d/lsyncd start ; ignore_errors=no ; x=[x] }",
        "FragmentPath": "/run/systemd/generator.late/lsyncd.service",
        "UnitFileState": "generated",
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "exited",
        "Restart": "no",
        "MainPID": "0",
        "NRestarts": "0",
        "TriggeredBy": "",
    },
    "backup.service": {
        "ExecStart": "{ path=/usr/bin/rsync ; argv[]=/usr/bin/rsync -a --delete /srv/m/ " + MODELS + "/ ; "
        "ignore_errors=no ; start_time=[n/a] }",
        "FragmentPath": "/etc/systemd/system/backup.service",
        "UnitFileState": "static",
        "LoadState": "loaded",
        "ActiveState": "inactive",
        "SubState": "dead",
        "Restart": "no",
        "MainPID": "0",
        "NRestarts": "0",
        "TriggeredBy": "backup.timer",
    },
    "ssh.service": {
        "ExecStart": "{ path=/usr/sbin/sshd ; argv[]=/usr/sbin/sshd -D ; ignore_errors=no ; start_time=[x] }",
        "FragmentPath": "/lib/systemd/system/ssh.service",
        "UnitFileState": "enabled",
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "running",
        "Restart": "on-failure",
        "MainPID": "80",
        "NRestarts": "0",
        "TriggeredBy": "",
    },
}

POOL_UNITS = {
    "lsyncd.service": {
        "ExecStart": "{ path=/usr/bin/lsyncd ; argv[]=/usr/bin/lsyncd -nodaemon /data/home/pool/.lsyncd.conf.lua ;"
        " ignore_errors=no ; start_time=[x] }",
        "FragmentPath": "/data/home/pool/.config/systemd/user/lsyncd.service",
        "UnitFileState": "enabled",
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "running",
        "Restart": "always",
        "MainPID": "574",
        "NRestarts": "1",
        "TriggeredBy": "",
    },
}

PROCESSES = [
    {
        "pid": 574,
        "argv": ["/usr/bin/lsyncd", "-nodaemon", "/data/home/pool/.lsyncd.conf.lua"],
        "tool": "lsyncd",
        "uid": 1001,
        "user": "pool",
        "cgroup": {"scope": "user", "uid": 1001, "unit": "lsyncd.service"},
        "cwd": "/data/home/pool",
        "started": 2_000_000_000.0,
    },
    {
        "pid": 900,
        "argv": ["lsyncd", "-rsyncssh", "/srv/x", "node3", MODELS],
        "tool": "lsyncd",
        "uid": 0,
        "user": "root",
        "cgroup": {"scope": "system", "uid": None, "unit": "cron.service"},
        "cwd": "/",
        "started": 2_000_000_000.0,
    },
]


class FakeFs:
    def __init__(self, files):
        self.files = dict(files)

    def dirs(self):
        found = set()
        for path in self.files:
            parent = posixpath.dirname(path)
            while parent not in {"/", ""}:
                found.add(parent)
                parent = posixpath.dirname(parent)
        return found

    def content(self, path):
        value = self.files.get(path)
        return value if isinstance(value, str) else None

    def exists(self, path):
        return path in self.files or path in self.dirs()

    def isfile(self, path):
        return isinstance(self.files.get(path), str)

    def islink(self, path):
        return isinstance(self.files.get(path), tuple)

    def realpath(self, path):
        value = self.files.get(path)
        if isinstance(value, tuple):
            return posixpath.normpath(posixpath.join(posixpath.dirname(path), value[1]))
        return path

    def listdir(self, path):
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix) :].split("/")[0] for p in [*self.files, *self.dirs()] if p.startswith(prefix)})

    def glob(self, pattern):
        depth = pattern.count("/")
        return sorted(p for p in [*self.files, *self.dirs()] if p.count("/") == depth and fnmatch.fnmatch(p, pattern))

    def stat(self, path):
        owner = next((uid for _name, uid, home in USERS if uid and path.startswith(home + "/")), 0)
        return SimpleNamespace(st_uid=owner, st_gid=owner, st_mode=stat.S_IFREG | 0o644, st_mtime=1_000.0, st_size=100)


def show_output(units, names):
    blocks = []
    for name in names:
        props = units.get(name, {"LoadState": "not-found", "ActiveState": "inactive"})
        blocks.append("\n".join([f"Id={name}"] + [f"{k}={v}" for k, v in props.items()]))
    return "\n\n".join(blocks) + "\n"


@pytest.fixture
def host(monkeypatch):
    """A fake host; returns the FakeFs (tests may add files) and the recorded systemctl calls."""
    fs = FakeFs(FILES)
    calls = []
    system_units = copy.deepcopy(SYSTEM_UNITS)
    pool_units = copy.deepcopy(POOL_UNITS)
    processes = copy.deepcopy(PROCESSES)
    entries = {name: pwd.struct_passwd((name, "x", uid, uid, "", home, "/bin/sh")) for name, uid, home in USERS}

    def getpwnam(name):
        return entries[name]

    def getpwuid(uid):
        return next(e for e in entries.values() if e.pw_uid == uid)

    fake_path = SimpleNamespace(
        exists=fs.exists,
        isfile=fs.isfile,
        isdir=lambda p: p in fs.dirs(),
        islink=fs.islink,
        realpath=fs.realpath,
    )
    fake_os = SimpleNamespace(
        path=fake_path,
        listdir=fs.listdir,
        stat=fs.stat,
        geteuid=lambda: 0,
        getpid=lambda: 1,
        sysconf=lambda name: 100,
        readlink=lambda p: "/",
    )
    fakes = {
        "os": fake_os,
        "glob": SimpleNamespace(glob=fs.glob),
        "pwd": SimpleNamespace(getpwall=lambda: list(entries.values()), getpwnam=getpwnam, getpwuid=getpwuid),
        "grp": SimpleNamespace(getgrgid=lambda gid: SimpleNamespace(gr_name=getpwuid(gid).pw_name)),
    }
    for module in (_sync_host, _sync_scan):
        for name, fake in fakes.items():
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fake)
    monkeypatch.setattr(_sync_host, "read_text", lambda path, limit=0: fs.content(path))
    monkeypatch.setattr(_sync_host, "processes_now", lambda *_args: copy.deepcopy(processes))
    monkeypatch.setattr(
        basic.AnsibleModule,
        "get_bin_path",
        lambda self, name, *a, **k: {"systemctl": "/bin/systemctl", "runuser": "/sbin/runuser"}.get(name),
    )

    def run_command(self, argv, environ_update=None, **_kwargs):
        assert environ_update == {"LC_ALL": "C", "SYSTEMD_PAGER": ""}  # output parsed in the C locale
        calls.append(argv)
        units = pool_units if "--user" in argv else system_units
        if "list-unit-files" in argv:
            return 0, "".join(f"{n} {u['UnitFileState']} enabled\n" for n, u in units.items()), ""
        if "list-units" in argv:
            return 0, "".join(f"{n} loaded {u['ActiveState']} {u['SubState']} x\n" for n, u in units.items()), ""
        if "show" in argv:
            names = argv[argv.index("--") + 1 :]
            return 0, show_output(units, names), ""
        return 1, "", "unexpected"

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return SimpleNamespace(fs=fs, calls=calls, system_units=system_units, pool_units=pool_units, processes=processes)


def facts_of(outcome):
    assert not outcome.failed, outcome.result
    assert outcome.result["changed"] is False
    return outcome.result["ansible_facts"]["sync_hazards"]


def by_id(facts):
    return {h["id"]: h for h in facts["hazards"]}


def test_scan_finds_every_hazard(run_module, host):
    facts = facts_of(run_module(shf, {"model_dirs": [MODELS + "/"]}))
    assert facts["model_dirs"] == [MODELS]
    hazards = by_id(facts)

    pool = hazards["lsyncd:unit:user:pool:lsyncd.service"]
    assert pool["overlaps_model_dir"] and not pool["neutralised"]
    assert pool["deletes"] is True
    assert pool["paths"] == [{"host": "{host}", "path": "/data/home/pool/work/"}]
    assert "deletes by default" in pool["detail"] and "Restart=always" in pool["detail"]

    system_lsyncd = hazards["lsyncd:unit:system:lsyncd.service"]
    assert not system_lsyncd["overlaps_model_dir"]
    assert "does not exist" in system_lsyncd["detail"]

    assert hazards["rsync:unit:system:backup.service"]["where"] == "system unit backup.service (timer backup.timer)"
    assert hazards["lsyncd:process:900"]["overlaps_model_dir"]
    assert hazards["rsync:cron:/var/spool/cron/crontabs/pool:1"]["overlaps_model_dir"]
    assert not hazards["rsync:cron:/var/spool/cron/crontabs/pool:2"]["overlaps_model_dir"]  # deletes elsewhere
    assert "rsync:cron:/var/spool/cron/crontabs/pool:3" not in hazards  # rsync without --delete
    assert hazards["tmpfiles:/etc/tmpfiles.d/models.conf:1"]["overlaps_model_dir"]
    assert not any(h.startswith("tmpfiles:/usr/lib") for h in hazards)  # /tmp cleanup does not reach the models

    bob = hazards["lsyncd:unit:user:bob:mirror.service"]
    assert bob["overlaps_model_dir"] and bob["neutralised"]  # delete = false
    syncthing = hazards["syncthing:/home/bob/.config/syncthing/config.xml:models"]
    assert syncthing["overlaps_model_dir"] and syncthing["neutralised"]  # syncthing is not running

    assert sorted(h["id"] for h in facts["unresolved"]) == [
        "lsyncd:process:900",
        "lsyncd:unit:user:pool:lsyncd.service",
        "rsync:cron:/var/spool/cron/crontabs/pool:1",
        "rsync:unit:system:backup.service",
        "tmpfiles:/etc/tmpfiles.d/models.conf:1",
    ]
    assert facts["summary_lines"][0].startswith("[HAZARD]")
    assert facts["summary"] == "\n".join(facts["summary_lines"])


def test_units_carry_what_acting_needs(run_module, host):
    facts = facts_of(run_module(shf, {"model_dirs": [MODELS]}))
    units = {(u["scope"], u["user"], u["unit"]): u for u in facts["units"]}
    pool = units[("user", "pool", "lsyncd.service")]
    assert pool["uid"] == 1001 and pool["manager_running"]
    assert pool["mask_path"] == "/data/home/pool/.config/systemd/user/lsyncd.service"
    assert pool["relocate_from"] == pool["mask_path"]
    assert pool["relocate_to"] == "/data/home/pool/.local/share/systemd/user/lsyncd.service"
    assert pool["configs"] == ["/data/home/pool/.lsyncd.conf.lua"]
    assert pool["pids"] == [574]
    assert pool["run_in_exclude_mode"] and pool["enable_in_exclude_mode"]
    assert not pool["masked_and_stopped"]  # running and enabled: the role has work to do

    backup = units[("system", None, "backup.service")]
    assert backup["timers"] == ["backup.timer"]
    assert backup["relocate_to"] == "/usr/local/lib/systemd/system/backup.service"

    system_lsyncd = units[("system", None, "lsyncd.service")]
    assert system_lsyncd["relocate_from"] is None  # generated: masking in /etc/systemd/system works as is

    bob = units[("user", "bob", "mirror.service")]
    assert not bob["manager_running"]
    assert bob["wants_links"] == ["/home/bob/.config/systemd/user/default.target.wants/mirror.service"]
    assert ("system", None, "ssh.service") not in units

    assert [p["pid"] for p in facts["processes"]] == [900]
    assert facts["processes"][0]["cgroup_unit"] == "cron.service"
    (cron,) = facts["cron_lines"]
    assert cron["disabled_line"] == _syncers.CRON_DISABLED_MARKER + cron["line"]

    # The user manager was asked as its user, with its runtime directory.
    user_calls = [c for c in host.calls if "--user" in c]
    assert user_calls and all(c[:4] == ["/sbin/runuser", "-u", "pool", "--"] for c in user_calls)
    assert all("XDG_RUNTIME_DIR=/run/user/1001" in c for c in user_calls)


def test_configs_come_with_the_exclude_rewrite(run_module, host):
    facts = facts_of(run_module(shf, {"model_dirs": [MODELS], "exclude_patterns": ["*.gguf"]}))
    configs = {c["path"]: c for c in facts["lsyncd_configs"]}
    seed = configs["/data/home/pool/.lsyncd.conf.lua"]
    assert seed["owner"] == "pool" and seed["group"] == "pool" and seed["mode"] == "0644"
    assert seed["exclude_changes"] and seed["rewrite_problems"] == []
    assert "delete = false" in seed["excluded_content"]
    assert "'/models/', '*.gguf'" in seed["excluded_content"]
    assert seed["validate"] is None  # no Lua compiler on this host
    assert seed["settings"] == {"logfile": "/data/home/pool/.lsyncd.log", "nodaemon": True}
    assert seed["syncs"][0]["protection"][0]["protected"] is False
    assert configs["/etc/lsyncd/lsyncd.conf.lua"]["exists"] is False


def test_after_neutralising(run_module, host):
    """What the role leaves behind reads as neutralised: masked units, disabled cron lines, no bare process."""
    host.fs.files["/var/spool/cron/crontabs/pool"] = (
        _syncers.CRON_DISABLED_MARKER + "*/5 * * * * rsync -a --delete /srv/m/ " + MODELS + "/\n"
    )
    del host.fs.files["/etc/tmpfiles.d/models.conf"]
    for unit in (host.pool_units["lsyncd.service"], host.system_units["backup.service"]):
        # What systemctl shows for a masked unit: no ExecStart, no fragment behind the mask.
        unit.update({"UnitFileState": "masked", "LoadState": "masked", "ActiveState": "inactive", "SubState": "dead"})
        unit.update({"ExecStart": "", "MainPID": "0", "FragmentPath": ""})
    host.fs.files["/data/home/pool/.local/share/systemd/user/lsyncd.service"] = host.fs.files.pop(
        "/data/home/pool/.config/systemd/user/lsyncd.service"
    )
    host.fs.files["/data/home/pool/.config/systemd/user/lsyncd.service"] = ("link", "/dev/null")
    host.fs.files["/usr/local/lib/systemd/system/backup.service"] = host.fs.files.pop(
        "/etc/systemd/system/backup.service"
    )
    host.fs.files["/etc/systemd/system/backup.service"] = ("link", "/dev/null")
    host.processes.clear()
    facts = facts_of(run_module(shf, {"model_dirs": [MODELS]}, check_mode=True))
    hazards = by_id(facts)
    pool = hazards["lsyncd:unit:user:pool:lsyncd.service"]
    assert pool["neutralised"] and pool["overlaps_model_dir"]  # masked unit read from the relocated file
    unit = next(u for u in facts["units"] if u["unit"] == "lsyncd.service" and u["user"] == "pool")
    assert unit["fragment_path"] == "/data/home/pool/.local/share/systemd/user/lsyncd.service"
    assert unit["relocate_from"] is None and unit["run_in_exclude_mode"]
    # The two units masked above have nothing left to stop or mask; the others still have.
    off = {(u["user"], u["unit"]) for u in facts["units"] if u["masked_and_stopped"]}
    assert off == {("pool", "lsyncd.service"), (None, "backup.service")}, off
    assert hazards["rsync:unit:system:backup.service"]["neutralised"]
    assert hazards["rsync:cron:/var/spool/cron/crontabs/pool:1"]["neutralised"]
    assert facts["unresolved"] == []


def test_hygiene_off_reports_lsyncd_only(run_module, host):
    facts = facts_of(run_module(shf, {"model_dirs": [MODELS], "hygiene": False}))
    assert {h["tool"] for h in facts["hazards"]} == {"lsyncd"}


def test_users_restricts_the_user_scan(run_module, host):
    facts = facts_of(run_module(shf, {"model_dirs": [MODELS], "users": ["bob"]}))
    assert not any(h.get("user") == "pool" and h["kind"] == "unit" for h in facts["hazards"])
    assert any(h["id"] == "lsyncd:unit:user:bob:mirror.service" for h in facts["hazards"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"model_dirs": ["data/models"]}, "model directory 'data/models' is not an absolute path"),
        ({"model_dirs": ["/"]}, "cannot be / itself"),
        ({"model_dirs": []}, "model_dirs is empty"),
        ({"model_dirs": ["/data/models"], "users": ["nobody-here"]}, "user 'nobody-here' does not exist on this host"),
    ],
)
def test_bad_input_fails_before_scanning(run_module, monkeypatch, args, message):
    def no_scan(*_args, **_kwargs):
        raise AssertionError("scanned despite bad input")

    monkeypatch.setattr(_sync_scan.Scanner, "__init__", no_scan)
    outcome = run_module(shf, args)
    assert outcome.failed
    assert message in outcome.result["msg"]
