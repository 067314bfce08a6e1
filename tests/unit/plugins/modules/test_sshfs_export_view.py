"""sshfs_export_view: one test per row of the decision, and the module against a stand-in systemd, stat and mount
table (check mode predicts and runs nothing; a run acts once; a rerun acts not; a view that is not read-only fails)."""

from __future__ import annotations

import pytest
from ansible.module_utils import basic

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _export
from ansible_collections.llamarpc.cluster.plugins.modules import sshfs_export_view

DIR = (2049, 1234)
UP = {"enabled": True, "active": True}
VIEW = "/srv/llamarpc/export/shards"
UNIT = "srv-llamarpc-export-shards.mount"


def test_a_current_view_and_an_unchanged_unit_restart_nothing():
    assert _export.decide(UP, DIR, DIR) == ([], [])


@pytest.mark.parametrize(
    "view",
    [
        (2049, 99),  # the directory was removed and made again: the bind still shows the removed one
        (2050, 1234),  # another filesystem's directory (a disk mounted on the directory since)
        (2049, 777),  # the bare mount point: not mounted
    ],
    ids=["directory-made-again", "other-filesystem", "not-mounted"],
)
def test_a_view_of_another_directory_is_mounted_anew(view):
    actions, reasons = _export.decide(UP, DIR, view)
    assert actions == ["restart"] and reasons == ["the view shows another directory than the exported one"]


def test_a_changed_unit_is_reloaded_and_mounted_anew():
    assert _export.decide(UP, DIR, DIR, unit_changed=True)[0] == ["daemon-reload", "restart"]


def test_a_first_run_starts_the_unit_it_wrote():
    # No view yet (systemd makes the mount point when it mounts); the unit was just written.
    fresh = {"enabled": False, "active": False}
    assert _export.decide(fresh, DIR, None, unit_changed=True)[0] == ["daemon-reload", "enable", "restart"]
    assert _export.decide(fresh, DIR, None)[0] == ["enable", "start"]


def test_an_unmounted_view_with_an_unchanged_unit_is_started():
    assert _export.decide({"enabled": True, "active": False}, DIR, None) == (
        ["start"],
        ["the view is not mounted"],
    )


def test_a_view_not_mounted_at_boot_is_enabled_only():
    assert _export.decide({"enabled": False, "active": True}, DIR, DIR)[0] == ["enable"]


def test_the_unit_is_named_after_the_view():
    assert _export.unit_of(VIEW + "/") == UNIT


class FakeHost:
    """systemd's view of the unit, the two directories' identities and the view's mount options."""

    def __init__(self, enabled=True, active=True, view=DIR, options=("ro", "relatime")):
        self.enabled, self.active, self.view, self.options = enabled, active, view, list(options)
        self.calls = []

    def run(self, args, **kwargs):
        self.calls.append(args[1:])
        if args[1] == "show":
            state = "enabled" if self.enabled else "disabled"
            return (
                0,
                f"LoadState=loaded\nActiveState={'active' if self.active else 'inactive'}\nUnitFileState={state}\n",
                "",
            )
        if args[1] == "enable":
            self.enabled = True
        elif args[1] in ("start", "restart"):
            self.active, self.view = True, DIR
        return 0, "", ""

    def identity(self, path):
        return DIR if path == "/data/shards" else self.view

    @property
    def actions(self):
        return [call[0] for call in self.calls if call[0] != "show"]


@pytest.fixture
def host(monkeypatch):
    def install(fake):
        monkeypatch.setattr(basic.AnsibleModule, "run_command", fake.run)
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: f"/bin/{name}")
        monkeypatch.setattr(_export, "_identity", fake.identity)
        monkeypatch.setattr(_export, "_mount_options", lambda path: fake.options if fake.active else None)
        return fake

    return install


ARGS = {"path": VIEW, "src": "/data/shards"}


def test_a_stale_view_check_mode_then_remount_then_nothing(run_module, host):
    fake = host(FakeHost(view=(2049, 99)))
    predicted = run_module(sshfs_export_view, ARGS, check_mode=True)
    assert predicted.result["changed"] and predicted.result["actions"] == ["restart"] and fake.actions == []
    applied = run_module(sshfs_export_view, ARGS)
    assert applied.result["changed"] and fake.actions == ["restart"]
    assert applied.result["options"] == ["ro", "relatime"]
    rerun = run_module(sshfs_export_view, ARGS)
    assert not rerun.failed and not rerun.result["changed"] and fake.actions == ["restart"]


def test_check_mode_with_a_new_unit_asks_nothing(run_module, host):
    fake = host(FakeHost(enabled=False, active=False, view=None))
    result = run_module(sshfs_export_view, dict(ARGS, unit_changed=True), check_mode=True)
    assert result.result["changed"] and fake.calls == []


def test_a_new_unit_is_reloaded_enabled_and_mounted(run_module, host):
    fake = host(FakeHost(enabled=False, active=False, view=None))
    result = run_module(sshfs_export_view, dict(ARGS, unit_changed=True))
    assert not result.failed and fake.actions == ["daemon-reload", "enable", "restart"]
    assert fake.calls[0] == ["daemon-reload"]


def test_a_view_that_is_not_read_only_fails_naming_the_unit(run_module, host):
    host(FakeHost(options=("rw", "relatime")))
    result = run_module(sshfs_export_view, ARGS)
    assert result.failed
    assert result.result["msg"] == f"{VIEW} is not a read-only mount (rw,relatime); see journalctl -u {UNIT}"


def test_a_view_that_does_not_mount_fails(run_module, host, monkeypatch):
    fake = host(FakeHost(active=False, view=None))
    monkeypatch.setattr(_export, "_mount_options", lambda path: None)
    result = run_module(sshfs_export_view, ARGS)
    assert result.failed and "(not mounted)" in result.result["msg"] and fake.actions == ["start"]
