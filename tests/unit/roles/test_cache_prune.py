"""The worker's tensor-cache cap: least recently used tensors go first, until the cap holds."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
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


def test_kept_files_survive_while_others_can_go(tmp_path, capsys):
    seeded = make(tmp_path, "00000000000000aa", 400, 1000)  # the oldest, but the plan's
    other = make(tmp_path, "00000000000000bb", 400, 2000)
    new = make(tmp_path, "00000000000000cc", 400, 3000)
    keep = tmp_path.parent / "seeded-tensors"
    keep.write_text(f"{seeded.name} blk.0.ffn_up.weight model.gguf 1024 400\n\n", encoding="utf-8")
    assert prune_mod.main(["prune", str(tmp_path), "800", "--keep", str(keep)]) == 0
    assert seeded.exists() and not other.exists() and new.exists()
    assert "seeded" not in capsys.readouterr().out


def test_kept_files_go_only_when_the_cap_needs_it_and_the_output_says_so(tmp_path, capsys):
    kept_old = make(tmp_path, "00000000000000aa", 400, 1000)
    kept_new = make(tmp_path, "00000000000000bb", 400, 4000)
    other = make(tmp_path, "00000000000000cc", 400, 3000)
    keep = tmp_path.parent / "seeded-tensors"
    keep.write_text(f"{kept_new.name} x f 0 400\n{kept_old.name} y f 0 400\n", encoding="utf-8")
    removed, left, kept_removed, over = prune_mod.prune_keeping(str(tmp_path), 400, {kept_old.name, kept_new.name})
    assert removed == [str(other), str(kept_old)] and kept_removed == [str(kept_old)]
    assert (left, over) == (400, 400) and kept_new.exists()

    make(tmp_path, "00000000000000dd", 100, 5000)
    assert prune_mod.main(["prune", f"--keep={keep}", str(tmp_path), "0"]) == 0
    out = capsys.readouterr().out
    assert "had to remove 1 seeded tensor(s) of the plan in force" in out and "400 bytes over the cap" in out
    assert list(tmp_path.iterdir()) == []


def test_a_missing_keep_file_keeps_nothing_and_says_so(tmp_path, capsys):
    old = make(tmp_path, "00000000000000aa", 400, 1000)
    new = make(tmp_path, "00000000000000bb", 400, 2000)
    assert prune_mod.main(["prune", str(tmp_path), "400", "--keep", str(tmp_path / "none")]) == 0
    assert not old.exists() and new.exists()
    assert "not read (No such file or directory): no seeded tensor is kept" in capsys.readouterr().out


def test_an_incomplete_command_line_prints_the_usage(tmp_path, capsys):
    for argv in (["prune", str(tmp_path)], ["prune", str(tmp_path), "1", "--keep"], ["prune", "a", "1", "2"]):
        assert prune_mod.main(argv) == 2
        assert (
            "Usage: llamarpc_cache_prune.py DIRECTORY MAX_BYTES [--keep FILE] [--metrics FILE]"
            in capsys.readouterr().err
        )


def test_metrics_give_the_cache_after_the_pruning_as_the_worker_installs_it(tmp_path):
    """The pruner as the role installs it (beside _textfile.py and _atomic.py), in a child process."""
    root = SCRIPT.parents[3]
    lib = tmp_path / "lib"
    lib.mkdir()
    for source in (
        SCRIPT,
        root / "plugins/module_utils/metrics/_textfile.py",
        root / "plugins/module_utils/files/_atomic.py",
    ):
        shutil.copy(source, lib / source.name)
    cache = tmp_path / "rpc"
    cache.mkdir()
    make(cache, "00000000000000aa", 400, 1000)
    make(cache, "00000000000000bb", 300, 2000)
    metrics = tmp_path / "tensor_cache.prom"
    done = subprocess.run(
        [sys.executable, "-I", str(lib / SCRIPT.name), str(cache), "500", "--metrics", str(metrics)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and not done.stderr, done
    text = metrics.read_text()
    assert "llamarpc_tensor_cache_bytes 300\n" in text and "llamarpc_tensor_cache_files 1\n" in text
    assert "llamarpc_tensor_cache_max_bytes 500\n" in text
