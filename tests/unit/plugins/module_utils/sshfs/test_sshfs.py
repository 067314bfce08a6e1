"""The pure helpers of sshfs_masked_mount: escaping, options, the unit, mountinfo and /proc parsing, health."""

from __future__ import annotations

import shutil
import signal
import string
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sshfs

MOUNTINFO = """\
22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
95 22 0:45 / /data rw,relatime shared:40 - ext4 /dev/loop3 rw
140 95 0:52 / /data/models/node2 ro,nosuid,nodev,relatime shared:75 - fuse.sshfs \
llamarpc-shards@10.213.5.12:/ ro,user_id=0,group_id=0,allow_other
141 95 0:53 / /data/with\\040blank rw,relatime shared:76 - fuse.sshfs h:/x\\040y rw,user_id=0,group_id=0
142 140 0:54 / /data/models/node2 rw,relatime shared:77 - tmpfs tmpfs rw
"""


@pytest.mark.parametrize(
    ("path", "escaped"),
    [
        ("/data/models/node2", "data-models-node2"),
        ("/data/models/remote-node2", "data-models-remote\\x2dnode2"),
        ("//data//x/", "data-x"),
        ("/", "-"),
        ("/.hidden/a.b", "\\x2ehidden-a.b"),
        ("/with blank/ü", "with\\x20blank-\\xc3\\xbc"),
    ],
)
def test_systemd_escape_path(path, escaped):
    assert _sshfs.systemd_escape_path(path) == escaped


@pytest.mark.skipif(shutil.which("systemd-escape") is None, reason="systemd-escape not installed")
@given(
    st.lists(
        st.text(alphabet=string.ascii_letters + string.digits + "-_.: @%\\ü", min_size=1, max_size=12),
        min_size=1,
        max_size=4,
    )
)
def test_escape_matches_systemd_escape(parts):
    path = "/" + "/".join(parts)
    expected = subprocess.run(["systemd-escape", "--path", path], capture_output=True, text=True, check=False)
    if expected.returncode != 0 or {".", ".."} & set(parts):  # mount points with . or .. are refused earlier
        return
    assert _sshfs.systemd_escape_path(path) == expected.stdout.strip()


def test_unit_name():
    assert _sshfs.unit_name("/data/models/node2") == "llamarpc-sshfs-data-models-node2.service"


@pytest.mark.parametrize("bad", ["relative/path", "", "/", "/a/../b", "/a/./b", "/a\nb"])
def test_normalize_mount_path_refuses(bad):
    with pytest.raises(_sshfs.SshfsError):
        _sshfs.normalize_mount_path(bad)


def test_normalize_mount_path():
    assert _sshfs.normalize_mount_path("//data/models//node2/") == "/data/models/node2"


@pytest.mark.parametrize(
    ("src", "user", "source"),
    [
        ("node2:/data/shards", None, "node2:/data/shards"),
        ("llamarpc-shards@10.213.5.12:/", None, "llamarpc-shards@10.213.5.12:/"),
        ("10.213.5.12:/", "llamarpc-shards", "llamarpc-shards@10.213.5.12:/"),
        ("[fd00::2]:/srv", "u", "u@[fd00::2]:/srv"),
        ("host:", None, "host:"),
    ],
)
def test_mount_source(src, user, source):
    assert _sshfs.mount_source(src, user) == source


@pytest.mark.parametrize(
    ("src", "user"),
    [("no-colon", None), ("a@b:/x", "c"), ("bad host:/x", None), ("h:/a,b", None), ("-oProxyCommand=x:/", None)],
)
def test_mount_source_refuses(src, user):
    with pytest.raises(_sshfs.SshfsError):
        _sshfs.mount_source(src, user)


def test_default_options_are_read_only_reconnecting_without_direct_io():
    opts = _sshfs.build_options()
    assert opts[:2] == ["ro", "reconnect"]
    assert "ServerAliveInterval=15" in opts and "ServerAliveCountMax=3" in opts
    assert "direct_io" not in opts and "allow_other" not in opts
    assert "BatchMode=yes" in opts


def test_auto_cache_only_where_there_is_a_page_cache():
    assert _sshfs.build_options(auto_cache=True)[-1] == "auto_cache"
    assert "auto_cache" not in _sshfs.build_options()
    with_direct_io = _sshfs.build_options(direct_io=True, auto_cache=True)
    assert "direct_io" in with_direct_io and "auto_cache" not in with_direct_io


def test_all_options():
    opts = _sshfs.build_options(
        read_only=False,
        reconnect=False,
        server_alive_interval=0,
        allow_other=True,
        identity_file="/etc/k",
        known_hosts_file="/etc/kh",
        port=2222,
        direct_io=True,
        extra_opts=["Ciphers=aes128-gcm@openssh.com", "Ciphers=aes128-gcm@openssh.com"],
    )
    assert opts == [
        "allow_other",
        "BatchMode=yes",
        "IdentityFile=/etc/k",
        "IdentitiesOnly=yes",
        "UserKnownHostsFile=/etc/kh",
        "StrictHostKeyChecking=yes",
        "port=2222",
        "direct_io",
        "Ciphers=aes128-gcm@openssh.com",
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"extra_opts": ["a,b"]},
        {"extra_opts": [""]},
        {"extra_opts": ["direct_io"]},
        {"extra_opts": ["auto_cache"]},
        {"extra_opts": ["rw"]},
        {"identity_file": "/k,ey"},
        {"port": 70000},
        {"server_alive_interval": -1},
    ],
)
def test_options_refused(kwargs):
    with pytest.raises(_sshfs.SshfsError):
        _sshfs.build_options(**kwargs)


def test_signal_names():
    assert _sshfs.signal_names(["hup", "SIGTERM", "INT", "QUIT", "HUP"]) == ["HUP", "TERM", "INT", "QUIT"]
    for bad in ("KILL", "STOP", "NOPE"):
        with pytest.raises(_sshfs.SshfsError):
            _sshfs.signal_names([bad])


def test_masked_argv_passes_arguments_as_positional_parameters():
    argv = ["/usr/bin/sshfs", "-f", "-o", "ro", "h:/a b", "/mnt/x"]
    masked = _sshfs.masked_argv(argv, ["HUP", "TERM", "INT", "QUIT"])
    assert masked[:4] == ["/bin/sh", "-c", 'trap "" HUP TERM INT QUIT; exec "$@"', "sshfs-masked"]
    assert masked[4:] == argv
    assert _sshfs.masked_argv(argv, []) == argv


def test_masked_argv_really_ignores_the_signals():
    """Run the wrapper for real: the exec'd process reports the four signals as ignored (SigIgn)."""
    argv = ["/bin/sh", "-c", "grep ^SigIgn: /proc/self/status"]
    script = _sshfs.masked_argv(argv, ["HUP", "TERM", "INT", "QUIT"])
    out = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    ignored = _sshfs.parse_status_mask(out)
    assert {signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT} <= ignored


@pytest.mark.parametrize(
    ("arg", "quoted"),
    [
        ("/usr/bin/sshfs", "/usr/bin/sshfs"),
        ("50%", "50%%"),
        ('trap "" HUP; exec "$@"', '\'trap "" HUP; exec "$$@"\''),
        ("a b", "'a b'"),
        ("it's", '"it\'s"'),
        ("back\\slash", '"back\\\\slash"'),
    ],
)
def test_systemd_quote(arg, quoted):
    assert _sshfs.systemd_quote(arg) == quoted


def render(**kwargs):
    argv = _sshfs.masked_argv(
        _sshfs.sshfs_argv("/usr/bin/sshfs", "u@h:/", "/data/m", _sshfs.build_options()), ["HUP", "TERM", "INT", "QUIT"]
    )
    args = {
        "path": "/data/m",
        "source": "u@h:/",
        "argv": argv,
        "fusermount_bin": "/usr/bin/fusermount3",
        "signals": ["HUP", "TERM", "INT", "QUIT"],
    }
    args.update(kwargs)
    return _sshfs.render_unit(**args)


def test_unit_supervises_and_stops_by_unmounting():
    unit = render()
    lines = unit.splitlines()
    start = next(line for line in lines if line.startswith("ExecStart="))
    assert start.startswith(
        'ExecStart=/bin/sh -c \'trap "" HUP TERM INT QUIT; exec "$$@"\' sshfs-masked /usr/bin/sshfs -f -o ro,'
    )
    assert start.endswith(" u@h:/ /data/m")
    for line in (
        "Restart=always",
        "ExecStop=-/usr/bin/fusermount3 -u /data/m",
        "ExecStopPost=-/usr/bin/fusermount3 -u -z /data/m",
        "ExecStartPre=-/usr/bin/fusermount3 -u -z /data/m",
        "KillSignal=SIGKILL",
        "WantedBy=multi-user.target",
        "StartLimitIntervalSec=0",
    ):
        assert line in lines
    # Anything that gives the service its own mount namespace would hide the mount from everyone else.
    for forbidden in ("PrivateTmp=", "ProtectSystem=", "ProtectHome=", "PrivateDevices=", "ReadWritePaths="):
        assert not any(line.startswith(forbidden) for line in lines)
    assert render() == unit  # deterministic


def test_mount_point_with_a_blank_is_quoted():
    assert "ExecStop=-/usr/bin/fusermount3 -u '/data/a b'" in render(path="/data/a b").splitlines()


def test_parse_mountinfo():
    entries = _sshfs.parse_mountinfo(MOUNTINFO + "garbage line\n")
    assert len(entries) == 5
    sshfs = entries[2]
    assert sshfs["mount_point"] == "/data/models/node2"
    assert sshfs["fstype"] == "fuse.sshfs"
    assert sshfs["source"] == "llamarpc-shards@10.213.5.12:/"
    assert "ro" in sshfs["options"] and "allow_other" in sshfs["super_options"]
    assert entries[3]["mount_point"] == "/data/with blank"
    assert entries[3]["source"] == "h:/x y"


def test_find_mount_takes_the_topmost():
    entries = _sshfs.parse_mountinfo(MOUNTINFO)
    assert _sshfs.find_mount(entries, "/data/models/node2")["fstype"] == "tmpfs"
    assert _sshfs.mounts_at(entries, "/data/models/node2") == 2
    assert _sshfs.find_mount(entries, "/nowhere") is None


@given(st.text(alphabet=string.printable.replace("\n", "").replace("\r", ""), min_size=1, max_size=30))
def test_parse_proc_stat_with_any_command_name(comm):
    text = f"1234 ({comm}) D 1 1234 1234 0 -1 4194560 0 0"
    assert _sshfs.parse_proc_stat(text) == "D"


def test_parse_status_mask():
    status = "Name:\tsshfs\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000005007\nSigCgt:\t0000000100000000\n"
    ignored = _sshfs.parse_status_mask(status)
    assert ignored == {1, 2, 3, 13, 15}
    assert _sshfs.numbers_to_names(ignored) == ["HUP", "INT", "QUIT", "PIPE", "TERM"]
    assert _sshfs.signal_numbers(["HUP", "TERM"]) == {1, 15}
    with pytest.raises(_sshfs.SshfsError):
        _sshfs.parse_status_mask("Name:\tx\n")


SRC = "u@h:/"
MOUNTED = {"mount_point": "/m", "fstype": "fuse.sshfs", "source": SRC}


@pytest.mark.parametrize(
    ("mount", "probe_result", "states", "active", "health"),
    [
        (None, None, [], False, "not_mounted"),
        ({**MOUNTED, "fstype": "tmpfs"}, None, [], False, "foreign"),
        ({**MOUNTED, "source": "other:/"}, None, ["S"], True, "foreign"),
        (MOUNTED, "ok", [], False, "unsupervised"),
        (MOUNTED, "timeout", ["T", "T", "T"], True, "stopped"),
        (MOUNTED, "ok", ["S", "Z"], True, "stopped"),
        (MOUNTED, "timeout", ["D", "D", "D"], True, "blocked"),
        (MOUNTED, "ok", ["D", "S", "D"], True, "ok"),
        (MOUNTED, "timeout", ["S", "S", "S"], True, "hung"),
        (MOUNTED, "Input/output error (errno 5)", ["S"], True, "stale"),
        (MOUNTED, "ok", ["S", "R", "S"], True, "ok"),
    ],
)
def test_classify_health(mount, probe_result, states, active, health):
    got, detail = _sshfs.classify_health(
        mount=mount, source=SRC, probe_result=probe_result, proc_states=states, unit_active=active
    )
    assert got == health
    assert detail
