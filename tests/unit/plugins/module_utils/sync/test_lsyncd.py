"""The lsyncd config reader, command lines, protection and the exclude-mode rewrite."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _lsyncd

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
    return _lsyncd.read_lsyncd_config(text)["syncs"]


# -- the config reader -----------------------------------------------------------------------------------


def test_seed_config_deletes_by_default_and_keeps_the_loop_variable_as_a_placeholder():
    config = _lsyncd.read_lsyncd_config(SEED)
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
    config = _lsyncd.read_lsyncd_config(
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
    config = _lsyncd.read_lsyncd_config(
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
    config = _lsyncd.read_lsyncd_config(deep)
    assert any("deeper" in p for p in config["problems"])
    unary = "x = " + "- " * 3000 + "1"
    assert _lsyncd.read_lsyncd_config(unary)["syncs"] == []


def test_lsyncd_argv_forms():
    assert _lsyncd.lsyncd_argv(["/usr/bin/lsyncd", "-nodaemon", "-log", "all", "/etc/l.lua"])["config"] == "/etc/l.lua"
    wrapped = ["/bin/sh", "-c", "nice", "lsyncd", "--pidfile", "/run/p", "conf.lua"]
    assert _lsyncd.lsyncd_argv(wrapped)["config"] == "conf.lua"
    cmdline = _lsyncd.lsyncd_argv(["lsyncd", "-rsyncssh", "/src", "node3", "/data/models", "-direct", "/a", "/b"])
    assert cmdline["config"] is None
    assert [s["target"] for s in cmdline["syncs"]] == ["node3:/data/models", "/b"]
    assert all(s["delete"] is True for s in cmdline["syncs"])
    init = _lsyncd.lsyncd_argv(["/etc/init.d/lsyncd", "start"])
    assert init == {"config": "/etc/lsyncd/lsyncd.conf.lua", "syncs": [], "init_script": True}
    assert not _lsyncd.is_lsyncd_argv(["/usr/bin/rsync", "-a"])


@pytest.mark.parametrize(
    ("argv", "index"),
    [
        (["/usr/bin/lsyncd", "-nodaemon", "/etc/l.lua"], 0),
        (["sudo", "-u", "pool", "lsyncd", "/home/pool/l.lua"], 3),
        (["nice", "-n", "10", "lsyncd", "l.lua"], 3),
        (["timeout", "5m", "lsyncd", "l.lua"], 2),
        (["/usr/bin/env", "LUA_PATH=/x", "lsyncd", "l.lua"], 2),
        (["runuser", "-u", "pool", "--", "lsyncd", "l.lua"], 4),
        (["cd", "/srv", "&&", "lsyncd", "l.lua"], 3),
        (["/etc/init.d/lsyncd", "start"], 0),
        # An argument named lsyncd is not lsyncd running: the role would end these processes.
        (["molecule", "test", "-s", "lsyncd"], None),
        (["vim", "/etc/lsyncd"], None),
        (["python3", "-m", "lsyncd"], None),
        (["sudo", "-u", "pool", "less", "/var/log/lsyncd"], None),
    ],
)
def test_lsyncd_runs_only_in_a_commands_place(argv, index):
    assert _lsyncd.lsyncd_index(argv) == index


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
    assert _lsyncd.excluded(patterns, relative) is expected


def test_sync_protection():
    (sync,) = syncs(SEED)
    assert _lsyncd.sync_protection(sync, [MODELS, "/srv/other"]) == [
        {"model_dir": MODELS, "relation": "contains", "excluded": False, "protected": False}
    ]
    (safe,) = syncs(SEED.replace("delay  = 1,", "delay = 1, exclude = { '/models/' },"))
    assert _lsyncd.sync_protection(safe, [MODELS])[0]["protected"] is True
    (into,) = syncs('sync { default.rsync, source = "/srv/m/", target = "n:' + MODELS + '/", delete = false }')
    assert _lsyncd.sync_protection(into, [MODELS]) == [
        {"model_dir": MODELS, "relation": "same", "excluded": False, "protected": True}
    ]


# -- exclude rewrite -------------------------------------------------------------------------------------


def test_rewrite_seed_config_and_rewrite_again_changes_nothing():
    result = _lsyncd.exclude_rewrite(SEED, [MODELS])
    assert result["changed"] and result["problems"] == []
    assert "    delete = false,\n    exclude = { '/models/' },\n    default.rsync," in result["content"]
    (sync,) = syncs(result["content"])
    assert sync["delete"] is False and sync["excludes"] == ["/models/"]
    assert _lsyncd.sync_protection(sync, [MODELS])[0]["protected"]
    again = _lsyncd.exclude_rewrite(result["content"], [MODELS])
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
    result = _lsyncd.exclude_rewrite(text, ["/data/work/models"], extra_patterns=["*.gguf"])
    first, second, third = syncs(result["content"])
    assert first["delete"] is False and first["excludes"] == [".git/", "/models/", "*.gguf"]
    assert second["delete"] is False and second["excludes"] == ["*.tmp", "/models/", "*.gguf"]
    assert 'sync{ delete = false, default.rsync, source="/data/work/"' in result["content"]
    assert third["delete"] is True and third["excludes"] == []  # deletes in /mnt/else only: left alone
    assert [s["touched"] for s in result["syncs"]] == [True, True, False]
    assert _lsyncd.exclude_rewrite(result["content"], ["/data/work/models"], ["*.gguf"])["changed"] is False


def test_rewrite_refuses_what_it_cannot_protect():
    text = """
sync { default.rsync, source = "/data/", target = "n:/data/", exclude = patterns }
sync { default.rsync, source = "/data/", target = "n:/data/", rsync = { _extra = { "--delete-after" } } }
sync(make())
"""
    result = _lsyncd.exclude_rewrite(text, ["/data/models"])
    assert result["changed"] is False
    assert len(result["problems"]) == 3
    assert "exclude is an expression" in result["problems"][0]
    assert "--delete" in result["problems"][1]
    assert "not written out" in result["problems"][2]


def test_rewrite_of_a_sync_into_the_model_directory_turns_delete_off_and_notes_it():
    result = _lsyncd.exclude_rewrite(
        'sync{default.rsync, source="/srv/m/", target="n:/data/models/"}', ["/data/models"]
    )
    (sync,) = syncs(result["content"])
    assert sync["delete"] is False and sync["excludes"] == []
    assert result["notes"] and "overwritten" in result["notes"][0]


def test_a_table_shared_by_two_syncs_is_edited_once():
    text = 'local c = { default.rsync, source = "/d/", target = "n:/d/" }\nsync(c)\nsync(c)\n'
    result = _lsyncd.exclude_rewrite(text, ["/d/m"])
    assert result["content"].count("delete = false") == 1
    assert _lsyncd.exclude_rewrite(result["content"], ["/d/m"])["changed"] is False


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
    config = _lsyncd.read_lsyncd_config(text)
    assert isinstance(config["syncs"], list)
    result = _lsyncd.exclude_rewrite(text, [MODELS])
    assert isinstance(result["content"], str)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(LUA_WORDS), max_size=80).map(" ".join))
def test_reader_never_crashes_on_lua_like_text_and_rewrite_is_a_fixed_point(text):
    _lsyncd.read_lsyncd_config(text)
    first = _lsyncd.exclude_rewrite(text, ["/a/m"])
    if first["changed"] and not first["problems"]:
        assert _lsyncd.exclude_rewrite(first["content"], ["/a/m"])["content"] == first["content"]
