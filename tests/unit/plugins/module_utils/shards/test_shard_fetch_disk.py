"""Where a tensor cache is, seen from a model directory: same filesystem (st_dev of the nearest existing
ancestor of each path) and the bytes already cached, on real paths."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as sf

PRUNER = Path(__file__).resolve().parents[5] / "roles/llama_rpc_worker/files/llamarpc_cache_prune.py"


def other_device():
    """An existing directory on another filesystem than the temp directory (/proc always is)."""
    return "/proc"


def test_two_directories_of_one_filesystem(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "cache").mkdir()
    assert sf.same_filesystem(str(tmp_path / "models"), str(tmp_path / "cache")) is True


def test_a_cache_directory_not_created_yet_counts_where_its_nearest_parent_is(tmp_path):
    model_dir = tmp_path / "data/models/model"
    model_dir.mkdir(parents=True)
    cache_dir = tmp_path / "var/cache/llamarpc/rpc-worker"  # none of var/... exists yet
    assert sf.existing_ancestor(str(cache_dir)) == str(tmp_path)
    assert sf.same_filesystem(str(model_dir), str(cache_dir)) is True
    # Neither exists yet: both count where tmp_path is.
    assert sf.same_filesystem(str(tmp_path / "a/b"), str(tmp_path / "c/d")) is True


def test_another_filesystem_is_told_apart(tmp_path):
    assert os.stat(tmp_path).st_dev != os.stat(other_device()).st_dev
    assert sf.same_filesystem(str(tmp_path), other_device()) is False
    # A path still to be created under the other filesystem is on it, not on ours.
    assert sf.same_filesystem(str(tmp_path), os.path.join(other_device(), "no-such-dir/rpc-worker")) is False


def test_a_symlinked_parent_leads_to_the_filesystem_it_points_to(tmp_path):
    (tmp_path / "cache").symlink_to(other_device())
    assert sf.existing_ancestor(str(tmp_path / "cache/llamarpc")) == str(tmp_path / "cache")
    assert sf.same_filesystem(str(tmp_path), str(tmp_path / "cache/llamarpc")) is False


def test_cached_bytes_counts_the_regular_files_directly_in_the_directory(tmp_path):
    rpc = tmp_path / "rpc"
    assert sf.cached_bytes(str(rpc)) == 0  # no cache yet
    rpc.mkdir()
    (rpc / "0123456789abcdef").write_bytes(b"x" * 1000)
    (rpc / "fedcba9876543210").write_bytes(b"y" * 24)
    (rpc / "sub").mkdir()
    (rpc / "sub" / "deeper").write_bytes(b"z" * 5000)  # not a tensor of this cache (the pruner ignores it too)
    (rpc / "link").symlink_to(rpc / "0123456789abcdef")
    assert sf.cached_bytes(str(rpc)) == 1024
    (tmp_path / "file").write_bytes(b"w")
    assert sf.cached_bytes(str(tmp_path / "file")) == 0


def test_cached_bytes_measures_what_the_worker_pruner_counts(tmp_path):
    """The cap is the pruner's: the bytes already cached must be counted the same way."""
    spec = importlib.util.spec_from_file_location("llamarpc_cache_prune", PRUNER)
    pruner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pruner)
    for index, size in enumerate((10, 0, 4097, 65536)):
        (tmp_path / f"{index:016x}").write_bytes(b"\0" * size)
    (tmp_path / "dir").mkdir()
    assert sf.cached_bytes(str(tmp_path)) == sum(size for _used, size, _path in pruner.cache_files(str(tmp_path)))


@pytest.mark.parametrize("shared", [True, False])
def test_inspect_reports_the_tensor_cache(tmp_path, shared):
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    if shared:
        cache_dir = tmp_path / "cache"
        (cache_dir / "rpc").mkdir(parents=True)
        (cache_dir / "rpc" / "0123456789abcdef").write_bytes(b"t" * 300)
        (cache_dir / "not-a-tensor").write_bytes(b"h" * 7)  # the worker user's home: not under the cap
    else:
        cache_dir = Path(other_device()) / "no-such-dir"
    report = sf.inspect(str(model_dir), [], str(cache_dir))
    assert report["tensor_cache"] == {
        "path": str(cache_dir),
        "same_filesystem": shared,
        "cached": 300 if shared else 0,
    }
    assert "tensor_cache" not in sf.inspect(str(model_dir), [])
