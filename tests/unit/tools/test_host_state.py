"""The check-mode record (molecule/_shared/host_state.py) and its comparison (host_state.state_changes) can fail: every
kind of change a check run could make to a file is reported, and only Ansible's own temporary files are left out."""

from __future__ import annotations

import os

import host_state
import pytest
from host_state import state_changes


def record(scope):
    return {"packages": {"bash": "ii 5.2"}, "unit_files": {"a.service": "enabled"}, "running_units": [], "files": scope}


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "kept.conf").write_text("x")
    (tmp_path / "mnt").mkdir()
    return tmp_path


def files(tree):
    return host_state.files((str(tree / "etc"), str(tree / "mnt"), str(tree / "absent")))


@pytest.mark.parametrize(
    "change",
    [
        lambda t: (t / "etc" / "new.conf").write_text("y"),  # a file written
        lambda t: (t / "mnt" / "node2").mkdir(),  # a mount point made
        lambda t: (t / "etc" / "kept.conf").chmod(0o600),  # a mode changed
        lambda t: (t / "etc" / "kept.conf").write_text("longer"),  # content (size) changed
        lambda t: (t / "etc" / "kept.conf").unlink(),  # a file removed
        lambda t: os.symlink("/elsewhere", t / "etc" / "link"),  # a link made
    ],
)
def test_every_file_change_is_reported(tree, change):
    before = files(tree)
    change(tree)
    changes = state_changes(record(before), record(files(tree)))
    assert changes and all(line.startswith("files: ") for line in changes), changes


def test_packages_units_and_running_units_are_compared(tree):
    before = record(files(tree))
    after = {
        **before,
        "packages": {"bash": "ii 5.2", "nftables": "ii 1.0"},
        "unit_files": {"a.service": "disabled"},
        "running_units": ["b.service"],
    }
    changes = state_changes(before, after)
    assert any(line.startswith("packages: nftables") for line in changes)
    assert any(line.startswith("unit_files: a.service") for line in changes)
    assert "running_units: b.service started" in changes


def test_only_ansibles_temporary_files_are_left_out(tree):
    before = files(tree)
    (tree / "etc" / ".ansible" / "tmp").mkdir(parents=True)
    (tree / "etc" / ".ansible" / "tmp" / "AnsiballZ_x.py").write_text("#")
    assert state_changes(record(before), record(files(tree))) == []
