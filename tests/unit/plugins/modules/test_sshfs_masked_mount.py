"""sshfs_masked_mount on a faked host: systemctl, the mount table, /proc and the probes are recorded answers.

The real thing (real sshfs, systemd, a hung and a killed sshfs, sshd going away) runs in the sshfs molecule
scenario; here every decision the module takes is checked, in check mode and for real.
"""

from __future__ import annotations

import pytest
from ansible.module_utils import basic

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sshfs
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sshfs_mount as mech
from ansible_collections.llamarpc.cluster.plugins.modules import sshfs_masked_mount as smm

PATH = "/data/models/node2"
SRC = "llamarpc-shards@10.213.5.12:/"
UNIT = "llamarpc-sshfs-data-models-node2.service"
ARGS = {"path": PATH, "src": SRC, "identity_file": "/etc/llamarpc/sshfs/id_ed25519"}


class FakeHost:
    """systemd, the mount table and sshfs of one host; ``calls`` records what the module ran."""

    def __init__(self):
        self.active = False
        self.enabled = False
        self.mounted = False
        self.pid = 0
        self.proc_state = "S"
        self.stat = "ok"  # or "timeout" or an error string
        self.mmap_ok = True
        self.starts_mount = True
        self.calls = []

    def systemctl(self, args):
        self.calls.append(args)
        verb = args[0]
        if verb == "show":
            return (
                0,
                (
                    f"ActiveState={'active' if self.active else 'inactive'}\nSubState=running\nMainPID={self.pid}\n"
                    f"UnitFileState={'enabled' if self.enabled else 'disabled'}\nLoadState=loaded\n"
                ),
                "",
            )
        if verb == "enable":
            self.enabled = True
        elif verb == "disable":
            self.enabled = False
        elif verb in {"start", "restart"}:
            self.active, self.pid, self.proc_state, self.stat = True, self.pid + 100, "S", "ok"
            self.mounted = self.starts_mount
        elif verb == "stop":
            self.active, self.pid, self.mounted = False, 0, False
        return 0, "", ""

    def entry(self):
        return {"mount_point": PATH, "fstype": "fuse.sshfs", "source": SRC} if self.mounted else None


@pytest.fixture
def host(monkeypatch, tmp_path):
    fake = FakeHost()
    monkeypatch.setattr(_sshfs, "UNIT_DIR", str(tmp_path))

    def run_command(self, args, **kwargs):
        assert args[0] == "/usr/bin/systemctl", args
        return fake.systemctl(args[1:])

    def read_proc(pid, name):
        if not fake.active or pid != fake.pid:
            return None
        if name == "stat":
            return f"{pid} (sshfs) {fake.proc_state} 1 {pid} {pid} 0 -1"
        if name == "status":
            return "Name:\tsshfs\nSigIgn:\t0000000000005007\n"
        return "fuse_dev_do_read\n"

    def run_in_child(function, args, timeout):
        if function is mech.statvfs_probe:
            return (
                None
                if fake.stat == "timeout"
                else ({"ok": True} if fake.stat == "ok" else {"ok": False, "error": fake.stat})
            )
        if function is mech.mmap_probe:
            return {"ok": fake.mmap_ok}
        return {"bytes": 16_000_000, "seconds": 1.6}

    def run_bounded(argv, timeout):
        fake.calls.append(argv)
        fake.mounted = False
        return 0, "", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(
        basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}"
    )
    monkeypatch.setattr(mech, "mount_entry", lambda path: fake.entry())
    monkeypatch.setattr(mech, "read_proc", read_proc)
    monkeypatch.setattr(
        mech, "proc_states", lambda pid, samples=3: ([fake.proc_state] if read_proc(pid, "stat") else [], [])
    )
    monkeypatch.setattr(mech, "run_in_child", run_in_child)
    monkeypatch.setattr(mech, "run_bounded", run_bounded)
    monkeypatch.setattr(mech.time, "sleep", lambda seconds: None)
    fake.unit_dir = tmp_path
    return fake


def verbs(fake):
    return [c[0] for c in fake.calls if c[0] != "show"]


def test_fresh_mount_check_apply_rerun(run_module, host):
    check = run_module(smm, ARGS, check_mode=True)
    assert check.result["changed"]
    assert check.result["actions"] == ["write unit", "enable unit", "start unit"]
    assert not (host.unit_dir / UNIT).exists() and verbs(host) == []

    applied = run_module(smm, ARGS)
    assert not applied.failed, applied.result
    assert applied.result["changed"] and applied.result["health"] == "ok"
    assert verbs(host) == ["daemon-reload", "enable", "start"]
    unit = (host.unit_dir / UNIT).read_text()
    assert 'trap "" HUP TERM INT QUIT; exec "$$@"' in unit
    assert applied.result["mmap_ok"] is True
    assert applied.result["signals_ignored"] == ["HUP", "INT", "QUIT", "PIPE", "TERM"]
    assert applied.result["options"][:2] == ["ro", "reconnect"]
    # By default a reopened file keeps its page cache (a model reload does not cross the network again).
    assert "auto_cache" in applied.result["options"] and "auto_cache" in unit

    host.calls.clear()
    for check_mode in (False, True):
        again = run_module(smm, ARGS, check_mode=check_mode)
        assert not again.result["changed"], again.result
        assert again.result["health"] == "ok"
    assert verbs(host) == []


def mounted_host(run_module, host):
    run_module(smm, ARGS)
    host.calls.clear()


@pytest.mark.parametrize(
    ("breakage", "health"),
    [
        ({"stat": "timeout"}, "hung"),
        ({"proc_state": "T", "stat": "timeout"}, "stopped"),
        ({"proc_state": "D"}, "blocked"),
        ({"stat": "Transport endpoint is not connected (errno 107)"}, "stale"),
        ({"active": False, "pid": 0}, "unsupervised"),
    ],
)
def test_unhealthy_mount_is_lazily_unmounted_and_restarted(run_module, host, breakage, health):
    mounted_host(run_module, host)
    for key, value in breakage.items():
        setattr(host, key, value)
    check = run_module(smm, ARGS, check_mode=True)
    assert check.result["changed"] and check.result["health"] == health
    assert verbs(host) == []
    result = run_module(smm, ARGS)
    assert result.result["changed"]
    assert result.result["health_before"] == health and result.result["health"] == "ok"
    assert result.result["actions"] == [f"lazy unmount ({health})", "restart unit"]
    assert verbs(host) == ["/usr/bin/umount", "restart"]


def test_option_change_rewrites_the_unit_with_a_diff_and_remounts(run_module, host):
    mounted_host(run_module, host)
    args = {**ARGS, "direct_io": True, "_ansible_diff": True}
    check = run_module(smm, args, check_mode=True)
    assert check.result["changed"] and check.result["actions"] == ["write unit", "restart unit"]
    assert "direct_io" in check.result["diff"]["after"] and "direct_io" not in check.result["diff"]["before"]
    assert "direct_io" not in (host.unit_dir / UNIT).read_text()
    # direct_io has no page cache to keep: auto_cache goes.
    assert "auto_cache" in check.result["diff"]["before"] and "auto_cache" not in check.result["diff"]["after"]
    host.mmap_ok = False
    result = run_module(smm, args)
    assert result.result["changed"] and result.result["mmap_ok"] is False
    assert verbs(host) == ["daemon-reload", "restart"]


def test_unmasked_signals(run_module, host):
    run_module(smm, {**ARGS, "mask_signals": False})
    unit = (host.unit_dir / UNIT).read_text()
    assert "ExecStart=/usr/bin/sshfs -f" in unit and "trap" not in unit


def test_read_probe_reports_throughput(run_module, host):
    result = run_module(smm, {**ARGS, "read_probe": "model-00001-of-00003.gguf"})
    assert result.result["throughput_mbps"] == 10.0
    assert result.result["probe_bytes"] == 16_000_000


def test_remounted_always_restarts(run_module, host):
    mounted_host(run_module, host)
    result = run_module(smm, {**ARGS, "state": "remounted"})
    assert result.result["changed"] and result.result["actions"] == ["restart unit"]
    assert verbs(host) == ["restart"]


def test_unmounted_and_absent(run_module, host):
    mounted_host(run_module, host)
    check = run_module(smm, {"path": PATH, "state": "unmounted"}, check_mode=True)
    assert check.result["changed"] and host.mounted
    result = run_module(smm, {"path": PATH, "state": "unmounted"})
    assert result.result["changed"] and result.result["health"] == "not_mounted"
    assert host.enabled and (host.unit_dir / UNIT).exists()
    assert not run_module(smm, {"path": PATH, "state": "unmounted"}).result["changed"]
    absent = run_module(smm, {"path": PATH, "state": "absent"})
    assert absent.result["changed"] and absent.result["actions"] == ["disable unit", "remove unit"]
    assert not host.enabled and not (host.unit_dir / UNIT).exists()
    assert not run_module(smm, {"path": PATH, "state": "absent"}).result["changed"]


def test_mount_that_never_comes_up_fails_with_a_hint(run_module, host):
    host.starts_mount = False
    result = run_module(smm, {**ARGS, "mount_timeout": 0})
    assert result.failed and result.result["changed"]
    assert "journalctl -u" in result.result["msg"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"path": "relative", "src": SRC}, "absolute"),
        ({"path": PATH, "src": "no-colon"}, "host:path"),
        ({"path": PATH}, "src"),
        ({**ARGS, "read_probe": "/etc/passwd"}, "relative"),
        ({**ARGS, "masked_signals": ["KILL"]}, "KILL"),
        ({**ARGS, "extra_opts": ["direct_io"]}, "module's own option"),
    ],
)
def test_bad_input_fails_before_anything_changes(run_module, host, args, words):
    result = run_module(smm, args)
    assert result.failed
    assert words in result.result["msg"]
    assert verbs(host) == []
    assert not (host.unit_dir / UNIT).exists()
