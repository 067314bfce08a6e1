"""sshfs_export_preflight: one test per rule, each failing alone with its own message, on a stand-in file system
(os.lstat answers from a table), and the module failing with every problem and changing nothing."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _export
from ansible_collections.llamarpc.cluster.plugins.modules import sshfs_export_preflight

DIR = "/data/home/pool/work"
ROOT = "/srv/llamarpc/export"


def entry(kind=stat.S_IFDIR, mode=0o755, uid=0):
    return os.stat_result((kind | mode, 1, 2049, 1, uid, 0, 4096, 0, 0, 0))


def fs(**changes):
    """Paths to lstat results: a good layout (the export root not made yet), with ``changes`` (None: missing)."""
    table = {
        "/": entry(),
        "/srv": entry(),
        "/srv/llamarpc": entry(),
        DIR: entry(mode=0o755, uid=1000),
    }
    for path, value in changes.items():
        table[path.replace("_", "/")] = value
    return table


def problems(table):
    return _export.problems(DIR, ROOT, "llamarpc-shards", lstat=table.get, owner=lambda st: f"uid{st.st_uid}")


def test_the_chain_is_the_root_and_every_parent():
    assert _export.chain("/srv/llamarpc/export/") == ["/", "/srv", "/srv/llamarpc", "/srv/llamarpc/export"]
    assert _export.chain("/") == ["/"]


def test_a_good_layout_has_no_problem():
    assert problems(fs()) == []
    # The export root existing, root-owned, 0755, is fine too.
    assert problems({**fs(), ROOT: entry()}) == []


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            DIR,
            None,
            f"{DIR} must be an existing directory that others may read and search: the export user "
            "llamarpc-shards reads it. Its owner can make it so with chmod o+rx; this role does not change it "
            "(found missing).",
        ),
        (DIR, entry(kind=stat.S_IFLNK, mode=0o777, uid=1000), "(found not a directory, owner uid1000, mode 0777)."),
        (DIR, entry(mode=0o750, uid=1000), "(found owner uid1000, mode 0750)."),
        (DIR, entry(mode=0o744, uid=1000), "(found owner uid1000, mode 0744)."),
        (
            "/srv/llamarpc",
            entry(kind=stat.S_IFREG, mode=0o644),
            "/srv/llamarpc must be a directory, or not exist yet: sshd refuses an SFTP chroot otherwise",
        ),
        (
            "/srv",
            entry(uid=1000),
            "/srv must be owned by root: sshd refuses an SFTP chroot otherwise (found owner uid 1000",
        ),
        (
            ROOT,
            entry(mode=0o775),
            f"{ROOT} must be writable by root alone: sshd refuses an SFTP chroot otherwise (found mode 0775).",
        ),
        ("/", entry(mode=0o757), "/ must be writable by root alone"),
    ],
    ids=[
        "dir-missing",
        "dir-a-link",
        "dir-not-readable",
        "dir-not-searchable",
        "parent-a-file",
        "parent-not-root",
        "root-group-writable",
        "slash-other-writable",
    ],
)
def test_each_rule_fails_alone_with_its_own_message(path, value, message):
    found = problems({**fs(), path: value})
    assert len(found) == 1 and message in found[0], found


def test_the_module_fails_with_every_problem(run_module, monkeypatch):
    table = {**fs(), DIR: None, "/srv": entry(uid=1000)}
    monkeypatch.setattr(_export, "_lstat", table.get)
    result = run_module(sshfs_export_preflight, {"dir": DIR, "root": ROOT, "user": "u"}, check_mode=True)
    assert result.failed and len(result.result["problems"]) == 2
    assert result.result["msg"] == " ".join(result.result["problems"])


def test_the_module_passes_a_good_layout(run_module, monkeypatch):
    monkeypatch.setattr(_export, "_lstat", fs().get)
    result = run_module(sshfs_export_preflight, {"dir": DIR, "root": ROOT, "user": "u"})
    assert not result.failed and result.result == {"changed": False, "problems": []}
