"""The probes of sshfs_masked_mount, for real on a local directory, each in a forked child as the module runs them."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sshfs_mount as mech
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._child import run_in_child


def test_statvfs_probe(tmp_path):
    assert run_in_child(mech.statvfs_probe, [str(tmp_path)], 60) == {"ok": True}
    missing = run_in_child(mech.statvfs_probe, [str(tmp_path / "gone")], 60)
    assert missing == {"ok": False, "error": "No such file or directory (errno 2)"}


def test_mmap_probe_tries_the_named_or_the_first_file(tmp_path):
    assert run_in_child(mech.mmap_probe, [str(tmp_path), ""], 60) == {"ok": None, "error": "no file to try"}
    (tmp_path / "b.gguf").write_bytes(b"GGUF" * 10)
    (tmp_path / "a-empty").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    assert run_in_child(mech.mmap_probe, [str(tmp_path), ""], 60) == {"ok": None, "error": "empty file"}
    assert run_in_child(mech.mmap_probe, [str(tmp_path), "b.gguf"], 60) == {"ok": True, "file": "b.gguf"}
    assert run_in_child(mech.mmap_probe, [str(tmp_path), "nope"], 60) == {
        "ok": False,
        "file": "nope",
        "error": "No such file or directory (errno 2)",
    }


def test_read_probe_reads_at_most_the_limit(tmp_path):
    shard = tmp_path / "shard"
    shard.write_bytes(b"x" * 3_000_000)
    read = run_in_child(mech.read_probe, [str(shard), 2_500_000], 60)
    assert read["bytes"] == 2_500_000 and read["seconds"] >= 0
    assert run_in_child(mech.read_probe, [str(shard), 10_000_000], 60)["bytes"] == 3_000_000
    failed = run_in_child(mech.read_probe, [str(tmp_path / "gone"), 1], 60)
    assert failed["ok"] is False and "FileNotFoundError" in failed["error"]
