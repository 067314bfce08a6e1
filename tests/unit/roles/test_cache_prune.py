"""The worker's tensor-cache cap: least recently used tensors go first, until the cap holds."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "roles/llama_rpc_worker/files/llamarpc_cache_prune.py"
spec = importlib.util.spec_from_file_location("llamarpc_cache_prune", SCRIPT)
prune_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prune_mod)


def make(directory, name, size, used):
    path = directory / name
    path.write_bytes(b"\0" * size)
    os.utime(path, (used, used))
    return path


def test_removes_least_recently_used_until_under_the_cap(tmp_path):
    old = make(tmp_path, "old", 400, 1000)
    mid = make(tmp_path, "mid", 400, 2000)
    new = make(tmp_path, "new", 400, 3000)
    removed, left = prune_mod.prune(str(tmp_path), 800)
    assert removed == [str(old)]
    assert left == 800
    assert not old.exists() and mid.exists() and new.exists()


def test_under_the_cap_nothing_is_removed(tmp_path):
    make(tmp_path, "a", 10, 1)
    assert prune_mod.prune(str(tmp_path), 10) == ([], 10)


def test_a_missing_directory_is_empty(tmp_path):
    assert prune_mod.prune(str(tmp_path / "nope"), 0) == ([], 0)


def test_subdirectories_and_links_are_left_alone(tmp_path):
    (tmp_path / "sub").mkdir()
    target = make(tmp_path / "sub", "kept", 100, 1)
    (tmp_path / "link").symlink_to(target)
    removed, _left = prune_mod.prune(str(tmp_path), 0)
    assert removed == [] and target.exists()


def test_cli_prunes_and_rejects_bad_sizes(tmp_path, capsys):
    make(tmp_path, "a", 100, 1)
    make(tmp_path, "b", 100, 2)
    assert prune_mod.main(["prune", str(tmp_path), "100"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]
    assert prune_mod.main(["prune", str(tmp_path), "20G"]) == 2
    assert "whole number of bytes" in capsys.readouterr().err
