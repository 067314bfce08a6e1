"""The pure helpers of sync_hazard_facts: the lsyncd config reader and rewrite, and the small parsers."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llamarpc.cluster.plugins.module_utils import _sync_hazards as sh

MODELS = "/data/home/pool/work/models"

# The seed's config, as the lsyncd molecule scenario writes it: delete never set, targets built in a loop.
SEED = """\
-- Mirror the master's work directory to every worker.
settings {
  logfile    = "/data/home/pool/.lsyncd.log",
  statusFile = "/data/home/pool/.lsyncd.status",
  nodaemon   = true,
  insist     = true,
}

local workers = { "10.213.4.12", "10.213.4.13" }

for _, host in ipairs(workers) do
  sync {
    default.rsync,
    source = "/data/home/pool/work/",
    target = host .. ":/data/home/pool/work/",
    delay  = 1,
    rsync  = {
      archive = true,
      rsh     = "/usr/bin/ssh -o BatchMode=yes",
    },
  }
end
"""


def syncs(text):
    return sh.read_lsyncd_config(text)["syncs"]


# -- tokenizer -------------------------------------------------------------------------------------------


def test_tokenize_strings_comments_and_numbers():
    text = (
        "-- line comment sync{}\n--[==[ long\n comment sync{} ]==]\n"
        "a = 'it\\'s' .. \"tab\\there\" .. [[long\nstring]] .. [=[with ]] inside]=]"
        ' .. 0x1F .. 1.5e3 .. "\\65\\x42\\u{43}"'
    )
    tokens, problems = sh.tokenize(text)
    assert problems == []
    strings = [t.value for t in tokens if t.kind == "string"]
    assert strings == ["it's", "tab\there", "long\nstring", "with ]] inside", "ABC"]
    numbers = [t.value for t in tokens if t.kind == "number"]
    assert numbers == ["0x1F", "1.5e3"]
    assert not any(t.is_name("sync") for t in tokens)


def test_tokenize_reports_unterminated_pieces():
    for text, word in (("a = 'open", "string"), ("--[[ never closed", "comment"), ("x = [==[ open", "long string")):
        _tokens, problems = sh.tokenize(text)
        assert any(word in p for p in problems), (text, problems)


# -- the config reader -----------------------------------------------------------------------------------


def test_seed_config_deletes_by_default_and_keeps_the_loop_variable_as_a_placeholder():
    config = sh.read_lsyncd_config(SEED)
    assert config["problems"] == []
    assert config["settings"] == {
        "logfile": "/data/home/pool/.lsyncd.log",
        "statusFile": "/data/home/pool/.lsyncd.status",
        "nodaemon": True,
        "insist": True,
    }
    (sync,) = config["syncs"]
    assert sync["layer"] == "default.rsync"
    assert sync["source"] == "/data/home/pool/work/"
    assert sync["target"] == "{host}:/data/home/pool/work/"
    assert sync["target_parts"] == {"kind": "ssh", "host": "{host}", "path": "/data/home/pool/work/"}
    assert sync["delete"] is True
    assert "default" in sync["delete_reason"]
    assert sync["delete_explicit"] is None
    assert sync["excludes"] == []


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("delete = false,", False),
        ("delete = true,", True),
        ("delete = 'startup',", "startup"),
        ('delete = "running",', "running"),
        ("delete = nil,", True),
        ("delete = not true,", False),
        ("delete = os.getenv('X') == '1',", None),
    ],
)
def test_explicit_delete(field, expected):
    (sync,) = syncs(f'sync {{ default.rsync, source = "/a/", target = "/b/", {field} }}')
    assert sync["delete"] == expected


def test_rsync_extra_delete_option_deletes_whatever_delete_says():
    text = 'sync{ default.rsync, source="/a", target="h:/b", delete=false, rsync={ _extra={"--delete-excluded"} } }'
    (sync,) = syncs(text)
    assert sync["delete"] is True
    assert "_extra" in sync["delete_reason"]
    assert sync["rsync_extra"] == ["--delete-excluded"]


def test_rsyncssh_host_and_targetdir_and_direct():
    config = sh.read_lsyncd_config(
        """
        sync { default.rsyncssh, source = "/srv/a", host = "backup@node2", targetdir = "/data/models" }
        sync { default.direct, source = "/srv/b", target = "/data/local" }
        """
    )
    rsyncssh, direct = config["syncs"]
    assert rsyncssh["target"] == "backup@node2:/data/models"
    assert rsyncssh["target_parts"] == {"kind": "ssh", "host": "node2", "path": "/data/models"}
    assert rsyncssh["delete"] is True
    assert direct["target_parts"] == {"kind": "local", "host": None, "path": "/data/local"}
    assert direct["delete"] is True


def test_custom_layer_is_unknown_unless_it_says():
    (custom,) = syncs('sync { source = "/a", target = "/b", onCreate = function(event) spawn(event, "/bin/cp") end }')
    assert custom["layer"] == "custom"
    assert custom["delete"] is None
    assert custom["custom_actions"] == ["onCreate"]


def test_locals_concatenation_and_sync_of_a_variable():
    config = sh.read_lsyncd_config(
        """
        local base = "/data"
        local cfg = { default.rsync, source = base .. "/work/", target = "node2:" .. base .. "/work/" }
        sync(cfg)
        settings = { logfile = base .. "/lsyncd.log" }
        """
    )
    (sync,) = config["syncs"]
    assert sync["source"] == "/data/work/"
    assert sync["target_parts"] == {"kind": "ssh", "host": "node2", "path": "/data/work/"}
    assert sync["rewritable"] is True
    assert config["settings"] == {"logfile": "/data/lsyncd.log"}


def test_sync_in_strings_comments_and_members_is_not_a_sync():
    text = """
    -- sync { default.rsync, source = "/x", target = "/y" }
    local s = "sync { default.rsync }"
    helpers.sync { source = "/x" }
    local function sync2() end
    """
    assert syncs(text) == []


def test_excludes_literal_string_and_expression():
    table, single, expression = syncs(
        """
        sync { default.rsync, source = "/a", target = "/b", exclude = { ".git/", "*.tmp" } }
        sync { default.rsync, source = "/a", target = "/b", exclude = "/models/" }
        sync { default.rsync, source = "/a", target = "/b", exclude = my_list }
        """
    )
    assert table["excludes"] == [".git/", "*.tmp"] and table["excludes_resolved"]
    assert single["excludes"] == ["/models/"]
    assert expression["excludes_resolved"] is False


def test_sync_with_unknown_argument():
    (sync,) = syncs("sync(make_config())")
    assert sync["rewritable"] is False
    assert sync["problems"]


def test_deep_nesting_is_bounded():
    deep = "sync { source = " + "{" * 500 + "}" * 500 + " }"
    config = sh.read_lsyncd_config(deep)
    assert any("deeper" in p for p in config["problems"])
    unary = "x = " + "- " * 3000 + "1"
    assert sh.read_lsyncd_config(unary)["syncs"] == []


# -- targets and command lines ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/data/models/", {"kind": "local", "host": None, "path": "/data/models/"}),
        ("node2:/data/x", {"kind": "ssh", "host": "node2", "path": "/data/x"}),
        ("pool@10.0.0.2:/data/x", {"kind": "ssh", "host": "10.0.0.2", "path": "/data/x"}),
        ("[fd00::2]:/data/x", {"kind": "ssh", "host": "[fd00::2]", "path": "/data/x"}),
        ("node2::models/x", {"kind": "rsyncd", "host": "node2", "path": None, "module": "models/x"}),
        ("rsync://u@node2/models", {"kind": "rsyncd", "host": "node2", "path": None, "module": "models"}),
        (None, {"kind": "unknown", "host": None, "path": None}),
    ],
)
def test_split_target(target, expected):
    assert sh.split_target(target) == expected


def test_lsyncd_argv_forms():
    assert sh.lsyncd_argv(["/usr/bin/lsyncd", "-nodaemon", "-log", "all", "/etc/l.lua"])["config"] == "/etc/l.lua"
    wrapped = ["/bin/sh", "-c", "nice", "lsyncd", "--pidfile", "/run/p", "conf.lua"]
    assert sh.lsyncd_argv(wrapped)["config"] == "conf.lua"
    cmdline = sh.lsyncd_argv(["lsyncd", "-rsyncssh", "/src", "node3", "/data/models", "-direct", "/a", "/b"])
    assert cmdline["config"] is None
    assert [s["target"] for s in cmdline["syncs"]] == ["node3:/data/models", "/b"]
    assert all(s["delete"] is True for s in cmdline["syncs"])
    init = sh.lsyncd_argv(["/etc/init.d/lsyncd", "start"])
    assert init == {"config": "/etc/lsyncd/lsyncd.conf.lua", "syncs": [], "init_script": True}
    assert not sh.is_lsyncd_argv(["/usr/bin/rsync", "-a"])


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
    lsyncd, backup = sh.parse_systemctl_show(SHOW)
    assert lsyncd["Id"] == "lsyncd.service"
    assert lsyncd["ExecStart"] == [["/usr/bin/lsyncd", "-nodaemon", "/data/home/pool/.lsyncd.conf.lua"]]
    assert lsyncd["MainPID"] == "574"
    assert backup["TriggeredBy"] == "backup.timer"
    assert sh.rsync_deletes(backup["ExecStart"][0])["destination"] == "node2:/data/"


def test_parse_unit_file_and_exec_argv():
    unit = sh.parse_unit_file(
        "[Unit]\nDescription=x\n# comment\n[Service]\nExecStart=\n"
        "ExecStart=-/usr/bin/lsyncd \\\n  -nodaemon %h/.lsyncd.conf.lua\nRestart=always\n"
    )
    (value,) = unit["Service"]["ExecStart"]
    argv = sh.unit_exec_argv(value, {"h": "/home/pool"})
    assert argv == ["/usr/bin/lsyncd", "-nodaemon", "/home/pool/.lsyncd.conf.lua"]
    assert unit["Service"]["Restart"] == ["always"]
    assert sh.unit_exec_argv('@/bin/sh "a b" 100%%') == ["/bin/sh", "a b", "100%"]


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
    assert sh.cgroup_unit(text) == expected


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
    found = sh.rsync_deletes(sh.shell_words(command))
    assert (found and found["destination"]) == destination or (found is None and destination is None)


def test_parse_crontab_user_system_and_disabled_lines():
    user = sh.parse_crontab(
        'MAILTO=""\n# c\n*/5 * * * * rsync -a --delete /a /b\n@reboot lsyncd /home/p/l.lua\n'
        + sh.CRON_DISABLED_MARKER
        + "0 1 * * * rsync --delete /x /y\n",
        owner="pool",
    )
    assert [(e["line_no"], e["command"], e["user"], e["disabled"]) for e in user] == [
        (3, "rsync -a --delete /a /b", "pool", False),
        (4, "lsyncd /home/p/l.lua", "pool", False),
        (5, "rsync --delete /x /y", "pool", True),
    ]
    system = sh.parse_crontab(
        "SHELL=/bin/sh\n17 * * * * root cd / && run-parts /etc/cron.hourly\n@daily pool lsyncd x\n", system=True
    )
    assert [(e["user"], e["command"]) for e in system] == [
        ("root", "cd / && run-parts /etc/cron.hourly"),
        ("pool", "lsyncd x"),
    ]


def test_tmpfiles_effects():
    entries = sh.parse_tmpfiles(
        "# comment\nd /scratch 1777 root root 10d\nD! /run/x 0755 - - -\nR /srv/old\ne /data/models - - - 1d\n"
        'x /data/models/keep\nd "/data/with space" 0755 - - -\n'
    )
    effects = {e["path"]: sh.tmpfiles_effect(e) for e in entries}
    assert effects == {
        "/scratch": "ages",
        "/run/x": "empties",
        "/srv/old": "removes",
        "/data/models": "ages",
        "/data/models/keep": None,
        "/data/with space": None,
    }


def test_syncthing_and_unison():
    folders = sh.syncthing_folders(
        '<configuration><folder id="m" label="models" path="/data/models" type="sendreceive">'
        '<device id="X"></device></folder><folder id="s" path="~/Sync" type="sendonly"></folder></configuration>'
    )
    assert folders == [
        {"id": "m", "path": "/data/models", "type": "sendreceive"},
        {"id": "s", "path": "~/Sync", "type": "sendonly"},
    ]
    assert sh.unison_roots("root = /data/models\n# root = /x\nroot=ssh://node2//data/models\n") == [
        "/data/models",
        "ssh://node2//data/models",
    ]
    assert sh.unison_root_path("ssh://pool@node2//data/models") == ("node2", "/data/models")
    assert sh.unison_root_path("ssh://node2/relative") == ("node2", None)


# -- paths and protection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/data/models", "same"),
        ("/data/models/", "same"),
        ("/data", "contains"),
        ("/", "contains"),
        ("/data/models/qwen", "inside"),
        ("/data/modelsx", None),
        ("relative/path", None),
        ("{host}/x", None),
    ],
)
def test_relation(path, expected):
    assert sh.relation(path, "/data/models") == expected


def test_reached_is_conservative_for_unknown_paths():
    assert sh.reached("$DST", ["/a", "/b"]) == ["/a", "/b"]
    assert sh.reached("/c", ["/a", "/b"]) == []


@pytest.mark.parametrize(
    ("patterns", "relative", "expected"),
    [
        (["/models/"], "models", True),
        (["/models/"], "other/models", False),
        (["models/"], "other/models", True),
        (["/mod*/"], "models", True),
        (["/work/**"], "work/a/models", True),
        (["/mod?ls/"], "models", True),
        (["/modelsx/"], "models", False),
        (["/a/"], "a/models", True),
        ([], "models", False),
    ],
)
def test_excluded_follows_lsyncd_patterns(patterns, relative, expected):
    assert sh.excluded(patterns, relative) is expected


def test_sync_protection():
    (sync,) = syncs(SEED)
    assert sh.sync_protection(sync, [MODELS, "/srv/other"]) == [
        {"model_dir": MODELS, "relation": "contains", "excluded": False, "protected": False}
    ]
    (safe,) = syncs(SEED.replace("delay  = 1,", "delay = 1, exclude = { '/models/' },"))
    assert sh.sync_protection(safe, [MODELS])[0]["protected"] is True
    (into,) = syncs('sync { default.rsync, source = "/srv/m/", target = "n:' + MODELS + '/", delete = false }')
    assert sh.sync_protection(into, [MODELS]) == [
        {"model_dir": MODELS, "relation": "same", "excluded": False, "protected": True}
    ]


# -- exclude rewrite -------------------------------------------------------------------------------------


def test_rewrite_seed_config_and_rewrite_again_changes_nothing():
    result = sh.exclude_rewrite(SEED, [MODELS])
    assert result["changed"] and result["problems"] == []
    assert "    delete = false,\n    exclude = { '/models/' },\n    default.rsync," in result["content"]
    (sync,) = syncs(result["content"])
    assert sync["delete"] is False and sync["excludes"] == ["/models/"]
    assert sh.sync_protection(sync, [MODELS])[0]["protected"]
    again = sh.exclude_rewrite(result["content"], [MODELS])
    assert again["changed"] is False and again["content"] == result["content"]


def test_rewrite_replaces_delete_and_merges_excludes():
    text = """sync {
    default.rsync,
    source = "/data/work/",
    target = "node2:/data/work/",
    delete = 'running',
    exclude = {
        '.git/',
    },
}
sync{default.rsync, source="/data/work/", target="node3:/data/work/", exclude='*.tmp'}
sync{default.rsync, source="/data/work/", target="/mnt/else/"}
"""
    result = sh.exclude_rewrite(text, ["/data/work/models"], extra_patterns=["*.gguf"])
    first, second, third = syncs(result["content"])
    assert first["delete"] is False and first["excludes"] == [".git/", "/models/", "*.gguf"]
    assert second["delete"] is False and second["excludes"] == ["*.tmp", "/models/", "*.gguf"]
    assert 'sync{ delete = false, default.rsync, source="/data/work/"' in result["content"]
    assert third["delete"] is True and third["excludes"] == []  # deletes in /mnt/else only: left alone
    assert [s["touched"] for s in result["syncs"]] == [True, True, False]
    assert sh.exclude_rewrite(result["content"], ["/data/work/models"], ["*.gguf"])["changed"] is False


def test_rewrite_refuses_what_it_cannot_protect():
    text = """
sync { default.rsync, source = "/data/", target = "n:/data/", exclude = patterns }
sync { default.rsync, source = "/data/", target = "n:/data/", rsync = { _extra = { "--delete-after" } } }
sync(make())
"""
    result = sh.exclude_rewrite(text, ["/data/models"])
    assert result["changed"] is False
    assert len(result["problems"]) == 3
    assert "exclude is an expression" in result["problems"][0]
    assert "--delete" in result["problems"][1]
    assert "not written out" in result["problems"][2]


def test_rewrite_of_a_sync_into_the_model_directory_turns_delete_off_and_notes_it():
    result = sh.exclude_rewrite('sync{default.rsync, source="/srv/m/", target="n:/data/models/"}', ["/data/models"])
    (sync,) = syncs(result["content"])
    assert sync["delete"] is False and sync["excludes"] == []
    assert result["notes"] and "overwritten" in result["notes"][0]


def test_a_table_shared_by_two_syncs_is_edited_once():
    text = 'local c = { default.rsync, source = "/d/", target = "n:/d/" }\nsync(c)\nsync(c)\n'
    result = sh.exclude_rewrite(text, ["/d/m"])
    assert result["content"].count("delete = false") == 1
    assert sh.exclude_rewrite(result["content"], ["/d/m"])["changed"] is False


def test_summary_lines_put_unresolved_first():
    def hazard(name, reached, neutralised):
        return {
            "id": name,
            "where": name.upper(),
            "detail": "d",
            "model_dirs_reached": reached,
            "overlaps_model_dir": bool(reached),
            "neutralised": neutralised,
        }

    hazards = [hazard("b", [], False), hazard("a", ["/m"], True), hazard("c", ["/m"], False)]
    lines = sh.summary_lines(hazards, ["/m"])
    assert [line.split("]", maxsplit=1)[0] for line in lines] == ["[HAZARD", "[neutralised", "[elsewhere"]
    assert sh.summary_lines([], ["/m"]) == ["no deleting syncer found that could reach /m"]


# -- never crash -----------------------------------------------------------------------------------------

LUA_WORDS = [
    "sync", "settings", "local", "function", "end", "do", "for", "if", "then", "else", "repeat", "until",
    "default.rsync", "source", "target", "delete", "exclude", "true", "false", "nil", "=", "==", "..", "{", "}",
    "(", ")", "[", "]", "[[", "]]", "[=[", "]=]", ",", ";", ".", ":", "-", "--", "--[[", "#", "not", "'", '"',
    "\\", "'/a/'", '"n:/b/"', "1", "0x", "\n", " ",
]  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_reader_never_crashes_on_any_text(text):
    config = sh.read_lsyncd_config(text)
    assert isinstance(config["syncs"], list)
    result = sh.exclude_rewrite(text, [MODELS])
    assert isinstance(result["content"], str)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(LUA_WORDS), max_size=80).map(" ".join))
def test_reader_never_crashes_on_lua_like_text_and_rewrite_is_a_fixed_point(text):
    sh.read_lsyncd_config(text)
    first = sh.exclude_rewrite(text, ["/a/m"])
    if first["changed"] and not first["problems"]:
        assert sh.exclude_rewrite(first["content"], ["/a/m"])["content"] == first["content"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.printable))
def test_small_parsers_never_crash(text):
    sh.tokenize(text)
    sh.parse_unit_file(text)
    sh.parse_systemctl_show(text)
    sh.parse_crontab(text, system=True)
    sh.parse_crontab(text, owner="x")
    for entry in sh.parse_tmpfiles(text):
        sh.tmpfiles_effect(entry)
    sh.syncthing_folders(text)
    sh.unison_roots(text)
    sh.cgroup_unit(text)
    sh.rsync_deletes(sh.shell_words(text))
    sh.lsyncd_argv(text.split())
    sh.split_target(text)
    sh.excluded([text], "models")
