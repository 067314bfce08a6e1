"""gguf_shard_check: every shard of the plan read through the model directory (links followed into the mounts) at
its size, in one run; a missing shard, a dangling link (a mount that is down) and a wrong size each named with the
mount to look at."""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.modules import gguf_shard_check


@pytest.fixture
def layout(tmp_path):
    """The coordinator's model directory: shard 1 local, shard 2 a link into node2's mount."""
    model, mount = tmp_path / "model", tmp_path / "mnt" / "node2"
    model.mkdir()
    mount.mkdir(parents=True)
    (model / "m-00001-of-00002.gguf").write_bytes(b"a" * 10)
    (mount / "m-00002-of-00002.gguf").write_bytes(b"b" * 7)
    (model / "m-00002-of-00002.gguf").symlink_to(mount / "m-00002-of-00002.gguf")
    plan = [
        {"name": "m-00001-of-00002.gguf", "size": 10, "host": "node1", "path": "/data/models/model/x"},
        {"name": "m-00002-of-00002.gguf", "size": 7, "host": "node2", "url": "https://example.invalid/x"},
    ]
    args = {"model_dir": str(model), "shards": plan, "mount_root": str(tmp_path / "mnt"), "coordinator": "node1"}
    return model, mount, args


def test_every_shard_there_at_its_size_passes_in_normal_and_check_mode(run_module, layout):
    _model, _mount, args = layout
    for check_mode in (False, True):
        result = run_module(gguf_shard_check, args, check_mode=check_mode)
        assert not result.failed and not result.result["changed"]
        assert [(s["name"], s["state"], s["size"]) for s in result.result["shards"]] == [
            ("m-00001-of-00002.gguf", "ok", 10),
            ("m-00002-of-00002.gguf", "ok", 7),  # the link followed: the size of the file in the mount
        ]


def test_a_mount_that_is_down_names_the_shard_and_the_mount(run_module, layout):
    model, mount, args = layout
    (mount / "m-00002-of-00002.gguf").unlink()  # the link dangles, as when node2's mount is gone
    result = run_module(gguf_shard_check, args)
    assert result.failed
    assert result.result["msg"] == (
        f"{model}/m-00002-of-00002.gguf on node1 (placed on node2) is missing or unreadable: "
        f"check the mount {mount.parent}/node2."
    )
    assert result.result["shards"][1] == {
        "name": "m-00002-of-00002.gguf",
        "host": "node2",
        "state": "missing",
        "size": None,
    }


def test_a_shard_of_another_size_and_a_missing_one_are_both_named(run_module, layout):
    model, mount, args = layout
    (model / "m-00001-of-00002.gguf").unlink()
    (mount / "m-00002-of-00002.gguf").write_bytes(b"b" * 5)
    result = run_module(gguf_shard_check, args)
    assert result.failed
    lines = result.result["msg"].splitlines()
    assert lines == [
        f"{model}/m-00001-of-00002.gguf on node1 (placed on node1) is missing or unreadable: "
        f"check the mount {mount.parent}/node1.",
        f"{model}/m-00002-of-00002.gguf on node1 (placed on node2) is of size 5 instead of 7: "
        f"check the mount {mount.parent}/node2.",
    ]


def test_a_plan_item_without_a_size_fails_with_a_message(run_module, layout):
    _model, _mount, args = layout
    result = run_module(gguf_shard_check, {**args, "shards": [{"name": "m-00001-of-00002.gguf"}]})
    assert result.failed and result.result["msg"].startswith("each shard needs a file name and a size in bytes")
