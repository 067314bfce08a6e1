"""The small parsers: systemd, rsync, cron, tmpfiles, syncthing, unison (and that none of them crashes)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _lsyncd, _lua, _sync_paths, _syncers

# -- systemd ---------------------------------------------------------------------------------------------

# Recorded from `systemctl --user show` on a lab host (systemd 252), property order as systemctl prints it.
SHOW = (
    "Restart=always\nMainPID=574\nNRestarts=1\n"
    "ExecStart={ path=/usr/bin/lsyncd ; argv[]=/usr/bin/lsyncd -nodaemon /data/home/pool/.lsyncd.conf.lua ;"
    " ignore_errors=no ; start_time=[Sun 2026-11-29 14:33:53 UTC] ; stop_time=[n/a] ; pid=574 ; code=(null) ;"
    " status=0/0 }\n"
    "Id=lsyncd.service\nTriggeredBy=\nActiveState=active\n"
    "FragmentPath=/data/home/pool/.config/systemd/user/lsyncd.service\nUnitFileState=enabled\n"
    "\n"
    "Id=backup.service\n"
    "ExecStart={ path=/bin/sh ; argv[]=/bin/sh -c rsync -a --delete /srv/ node2:/data/ ; ignore_errors=no ;"
    " start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n"
    "TriggeredBy=backup.timer\n"
)


def test_parse_systemctl_show():
    lsyncd, backup = _syncers.parse_systemctl_show(SHOW)
    assert lsyncd["Id"] == "lsyncd.service"
    assert lsyncd["ExecStart"] == [["/usr/bin/lsyncd", "-nodaemon", "/data/home/pool/.lsyncd.conf.lua"]]
    assert lsyncd["MainPID"] == "574"
    assert backup["TriggeredBy"] == "backup.timer"
    assert _syncers.rsync_deletes(backup["ExecStart"][0])["destination"] == "node2:/data/"


def test_parse_unit_file_and_exec_argv():
    unit = _syncers.parse_unit_file(
        "[Unit]\nDescription=x\n# comment\n[Service]\nExecStart=\n"
        "ExecStart=-/usr/bin/lsyncd \\\n  -nodaemon %h/.lsyncd.conf.lua\nRestart=always\n"
    )
    (value,) = unit["Service"]["ExecStart"]
    argv = _syncers.unit_exec_argv(value, {"h": "/home/pool"})
    assert argv == ["/usr/bin/lsyncd", "-nodaemon", "/home/pool/.lsyncd.conf.lua"]
    assert unit["Service"]["Restart"] == ["always"]
    assert _syncers.unit_exec_argv('@/bin/sh "a b" 100%%') == ["/bin/sh", "a b", "100%"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "9:name=systemd:/user.slice/user-1001.slice/user@1001.service/app.slice/lsyncd.service\n0::/\n",
            {"scope": "user", "uid": 1001, "unit": "lsyncd.service"},
        ),
        ("0::/system.slice/lsyncd.service\n", {"scope": "system", "uid": None, "unit": "lsyncd.service"}),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", {"scope": "system", "uid": None, "unit": None}),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n",
            {"scope": "user", "uid": 1000, "unit": None},
        ),
        ("", {"scope": None, "uid": None, "unit": None}),
    ],
)
def test_cgroup_unit(text, expected):
    assert _syncers.cgroup_unit(text) == expected


# -- rsync, cron, tmpfiles, syncthing, unison ------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "destination"),
    [
        ("rsync -a --delete /srv/ /data/models/", "/data/models/"),
        ("cd /x && /usr/bin/rsync -e ssh --delete-after -a src/ node2:/data/models", "node2:/data/models"),
        ("rsync -av --del --exclude .git /a /b /c", "/c"),
        ("rsync --delete-excluded --filter='- *.tmp' /a/ /b/", "/b/"),
        ("rsync -a /a /b", None),
        ("rsync -a --remove-source-files /a /b", None),
        ("cp -a /a /b", None),
    ],
)
def test_rsync_deletes(command, destination):
    found = _syncers.rsync_deletes(_syncers.shell_words(command))
    assert (found and found["destination"]) == destination or (found is None and destination is None)


def test_parse_crontab_user_system_and_disabled_lines():
    user = _syncers.parse_crontab(
        'MAILTO=""\n# c\n*/5 * * * * rsync -a --delete /a /b\n@reboot lsyncd /home/p/l.lua\n'
        + _syncers.CRON_DISABLED_MARKER
        + "0 1 * * * rsync --delete /x /y\n",
        owner="pool",
    )
    assert [(e["line_no"], e["command"], e["user"], e["disabled"]) for e in user] == [
        (3, "rsync -a --delete /a /b", "pool", False),
        (4, "lsyncd /home/p/l.lua", "pool", False),
        (5, "rsync --delete /x /y", "pool", True),
    ]
    system = _syncers.parse_crontab(
        "SHELL=/bin/sh\n17 * * * * root cd / && run-parts /etc/cron.hourly\n@daily pool lsyncd x\n", system=True
    )
    assert [(e["user"], e["command"]) for e in system] == [
        ("root", "cd / && run-parts /etc/cron.hourly"),
        ("pool", "lsyncd x"),
    ]


def test_tmpfiles_effects():
    entries = _syncers.parse_tmpfiles(
        "# comment\nd /scratch 1777 root root 10d\nD! /run/x 0755 - - -\nR /srv/old\ne /data/models - - - 1d\n"
        'x /data/models/keep\nd "/data/with space" 0755 - - -\n'
    )
    effects = {e["path"]: _syncers.tmpfiles_effect(e) for e in entries}
    assert effects == {
        "/scratch": "ages",
        "/run/x": "empties",
        "/srv/old": "removes",
        "/data/models": "ages",
        "/data/models/keep": None,
        "/data/with space": None,
    }


def test_syncthing_and_unison():
    folders = _syncers.syncthing_folders(
        '<configuration><folder id="m" label="models" path="/data/models" type="sendreceive">'
        '<device id="X"></device></folder><folder id="s" path="~/Sync" type="sendonly"></folder></configuration>'
    )
    assert folders == [
        {"id": "m", "path": "/data/models", "type": "sendreceive"},
        {"id": "s", "path": "~/Sync", "type": "sendonly"},
    ]
    assert _syncers.unison_roots("root = /data/models\n# root = /x\nroot=ssh://node2//data/models\n") == [
        "/data/models",
        "ssh://node2//data/models",
    ]
    assert _syncers.unison_root_path("ssh://pool@node2//data/models") == ("node2", "/data/models")
    assert _syncers.unison_root_path("ssh://node2/relative") == ("node2", None)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.printable))
def test_small_parsers_never_crash(text):
    _lua.tokenize(text)
    _syncers.parse_unit_file(text)
    _syncers.parse_systemctl_show(text)
    _syncers.parse_crontab(text, system=True)
    _syncers.parse_crontab(text, owner="x")
    for entry in _syncers.parse_tmpfiles(text):
        _syncers.tmpfiles_effect(entry)
    _syncers.syncthing_folders(text)
    _syncers.unison_roots(text)
    _syncers.cgroup_unit(text)
    _syncers.rsync_deletes(_syncers.shell_words(text))
    _lsyncd.lsyncd_argv(text.split())
    _sync_paths.split_target(text)
    _lsyncd.excluded([text], "models")
