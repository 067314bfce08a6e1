"""tensor_cache_seed: check mode -> apply -> apply again (unchanged) -> check mode (unchanged), with a diff; an
endpoint the plan does not use has nothing to seed; the keep file lists what is cached; errors are messages."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
from pathlib import Path

import pytest
from ansible.module_utils import basic
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed
from ansible_collections.llamarpc.cluster.plugins.modules import tensor_cache_seed

REPO = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("model"), preset="tiny", shards=2, seed=2)["files"][0]["path"]


@pytest.fixture
def args(model, hasher, tmp_path, monkeypatch):
    monkeypatch.setattr(_tensor_seed, "CACHE_THRESHOLD_BYTES", 300 * 1024)
    monkeypatch.setattr(_tensor_seed.seed_lists, "__defaults__", (300 * 1024,))
    cache = tmp_path / "rpc"
    cache.mkdir()
    return {
        "model": model,
        "rpc": "127.0.0.1:1,127.0.0.1:2",
        "tensor_split": "1,1",
        "endpoint": "127.0.0.1:2",
        "cache_dir": str(cache),
        "hasher": hasher,
        "_ansible_diff": True,
    }


def test_check_apply_apply_check(run_module, args):
    first = run_module(tensor_cache_seed, args, check_mode=True).result
    assert first["changed"] and first["written"] > 0 and first["present"] == 0
    assert first["diff"]["before"] == "" and first["diff"]["after"]
    assert list(Path(args["cache_dir"]).iterdir()) == []

    applied = run_module(tensor_cache_seed, args).result
    assert applied["changed"] and applied["written"] == first["written"]
    assert applied["bytes_written"] == sum(t["size"] for t in applied["tensors"])
    assert sorted(p.name for p in Path(args["cache_dir"]).iterdir()) == sorted(t["hash"] for t in applied["tensors"])

    for check in (False, True):
        again = run_module(tensor_cache_seed, args, check_mode=check).result
        assert not again["changed"] and again["written"] == 0
        assert again["present"] == len(applied["tensors"])
        assert again["diff"]["before"] == again["diff"]["after"] == first["diff"]["after"]


def test_check_mode_before_the_worker_role_made_the_cache_reports_every_tensor_to_write(run_module, args, tmp_path):
    """A check run on a fresh worker: the role would create the cache directory in this run, so it is not there yet."""
    fresh = dict(args, cache_dir=str(tmp_path / "not-yet" / "rpc"))
    out = run_module(tensor_cache_seed, fresh, check_mode=True).result
    assert out["changed"] and out["written"] > 0 and out["present"] == 0
    assert not (tmp_path / "not-yet").exists()
    # A real run still needs the directory.
    assert "is not a directory" in run_module(tensor_cache_seed, fresh).result["msg"]


def test_an_endpoint_outside_the_plan_has_nothing_to_seed(run_module, args):
    out = run_module(tensor_cache_seed, dict(args, endpoint="127.0.0.1:9")).result
    assert not out["changed"] and out["tensors"] == [] and "not in the plan" in out["msg"]


def test_a_missing_helper_falls_back_to_python_with_a_warning(run_module, args, tmp_path, monkeypatch):
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warned.append(text))
    out = run_module(tensor_cache_seed, dict(args, hasher=str(tmp_path / "none"), endpoint="127.0.0.1:1"))
    assert not out.failed and out.result["changed"]
    assert any("hashing in Python" in text for text in warned)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tensor_split": "1"}, "2 RPC endpoint(s) but 1"),
        ({"cache_dir": "/nonexistent/rpc"}, "creates the cache directory"),
        ({"model": "/nonexistent.gguf"}, "tensor cache seeding failed"),
    ],
)
def test_bad_input_fails_with_a_message(run_module, args, change, message):
    out = run_module(tensor_cache_seed, dict(args, **change))
    assert out.failed and message in out.result["msg"]


def test_the_coordinator_lists_and_a_worker_seeds_what_its_own_disk_holds(run_module, args, model, tmp_path):
    listing = {"model": model, "rpc": "127.0.0.1:1,127.0.0.1:2", "tensor_split": "1,1"}
    listed = run_module(tensor_cache_seed, listing).result
    assert not listed["changed"] and set(listed["lists"]) == {"127.0.0.1:1", "127.0.0.1:2"}
    assert not list(Path(args["cache_dir"]).iterdir())
    # One worker with every layer: its tensors come from both shards.
    mine = run_module(tensor_cache_seed, dict(listing, rpc="127.0.0.1:2", tensor_split="1")).result["lists"]
    mine = mine["127.0.0.1:2"]
    shards = sorted({t["file"] for t in mine})
    assert len(shards) == 2, shards

    # The worker holds the second shard only, in a directory of its own. The first is a link there, as on the
    # coordinator where it leads into another host's SSHFS mount: those bytes are not this host's, not a source.
    disk = tmp_path / "disk"
    disk.mkdir()
    shutil.copy(shards[1], disk)
    (disk / Path(shards[0]).name).symlink_to(shards[0])
    seeding = {"tensors": mine, "source_dirs": [str(disk)], "cache_dir": args["cache_dir"], "hasher": args["hasher"]}
    out = run_module(tensor_cache_seed, seeding).result
    held = [t for t in mine if t["file"] == shards[1]]
    assert out["changed"] and out["written"] == len(held) and out["unavailable"] == len(mine) - len(held)
    assert {t["name"] for t in out["tensors"] if t["state"] == "written"} == {t["name"] for t in held}
    assert all(t["file"].startswith(str(disk)) for t in out["tensors"] if t["state"] == "written")
    again = run_module(tensor_cache_seed, seeding).result
    assert not again["changed"] and again["present"] == len(held)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tensors": [{"name": "x", "file": "/f", "offset": "a", "size": 1}]}, "tensors[0] needs"),
        ({"tensors": [], "cache_dir": None}, "cache_dir is needed"),
        ({"endpoint": None}, "endpoint is needed"),
    ],
)
def test_incomplete_input_is_refused(run_module, args, change, message):
    given = dict(args, **change)
    if "tensors" in change:
        for name in ("model", "rpc", "tensor_split", "endpoint"):
            given.pop(name)
    given = {k: v for k, v in given.items() if v is not None}
    out = run_module(tensor_cache_seed, given)
    assert out.failed and message in out.result["msg"]


def keep_lines(tensors):
    return sorted(
        f"{t['hash']} {t['name']} {Path(t['file']).name} {t['offset']} {t['size']}"
        for t in tensors
        if t["state"] in ("present", "written")
    )


def test_the_keep_file_lists_the_plans_cached_tensors_and_is_kept_right(run_module, args, tmp_path):
    keep = tmp_path / "seeded-tensors"  # beside the cache directory (tmp_path/rpc), not in it
    given = dict(args, keep_file=str(keep))
    first = run_module(tensor_cache_seed, given, check_mode=True).result
    assert first["changed"] and first["keep_file_changed"] and not keep.exists()
    _cache_diff, keep_diff = first["diff"]
    assert keep_diff["before"] == "" and keep_diff["before_header"] == str(keep)

    applied = run_module(tensor_cache_seed, given).result
    assert applied["changed"] and applied["keep_file_changed"]
    text = keep.read_text(encoding="utf-8")
    assert text == keep_diff["after"] == "".join(f"{line}\n" for line in keep_lines(applied["tensors"]))
    assert {line.split()[0] for line in text.splitlines()} == {p.name for p in Path(args["cache_dir"]).iterdir()}
    assert stat.S_IMODE(keep.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rpc", "seeded-tensors"]  # no temporary left

    for check in (True, False):
        again = run_module(tensor_cache_seed, given, check_mode=check).result
        assert not again["changed"] and not again["keep_file_changed"]
        assert again["diff"][1]["before"] == again["diff"][1]["after"] == text
    keep.write_text("0123456789abcdef blk.0.x other.gguf 0 1\n", encoding="utf-8")
    mended = run_module(tensor_cache_seed, given).result
    assert mended["changed"] and mended["keep_file_changed"] and mended["written"] == 0
    assert keep.read_text(encoding="utf-8") == text


def test_the_keep_file_leaves_out_unavailable_tensors_and_empties_for_an_endpoint_outside_the_plan(
    run_module, args, model, tmp_path
):
    listing = {"model": model, "rpc": "127.0.0.1:2", "tensor_split": "1"}
    mine = run_module(tensor_cache_seed, listing).result["lists"]["127.0.0.1:2"]
    second = sorted({t["file"] for t in mine})[1]
    disk = tmp_path / "disk"
    disk.mkdir()
    shutil.copy(second, disk)
    keep = tmp_path / "seeded-tensors"
    seeding = {"tensors": mine, "source_dirs": [str(disk)], "cache_dir": args["cache_dir"], "keep_file": str(keep)}
    out = run_module(tensor_cache_seed, dict(seeding, hasher=args["hasher"])).result
    assert 0 < out["unavailable"] < len(mine)
    lines = keep.read_text(encoding="utf-8").splitlines()
    assert lines == keep_lines(out["tensors"]) and len(lines) == len(mine) - out["unavailable"]
    assert all(Path(second).name in line for line in lines)

    outside = run_module(tensor_cache_seed, dict(args, endpoint="127.0.0.1:9", keep_file=str(keep))).result
    assert outside["changed"] and outside["keep_file_changed"] and keep.read_text(encoding="utf-8") == ""


def test_a_keep_file_in_a_missing_directory_is_refused(run_module, args, tmp_path):
    out = run_module(tensor_cache_seed, dict(args, keep_file=str(tmp_path / "none" / "seeded-tensors")))
    assert out.failed and "create it before seeding with keep_file" in out.result["msg"]


def test_the_workers_pruner_keeps_what_the_keep_file_lists(run_module, args, tmp_path, capsys):
    script = REPO / "roles/llama_rpc_worker/files/llamarpc_cache_prune.py"
    spec = importlib.util.spec_from_file_location("llamarpc_cache_prune", script)
    pruner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pruner)
    keep = tmp_path / "seeded-tensors"
    out = run_module(tensor_cache_seed, dict(args, keep_file=str(keep))).result
    cache = Path(args["cache_dir"])
    plan = {p.name: p.stat().st_size for p in cache.iterdir()}
    for name in plan:
        os.utime(cache / name, (1, 1))  # the plan's files are the least recently used
    (cache / "0123456789abcdef").write_bytes(b"\0" * 1000)  # another plan's tensor, used since
    assert pruner.main(["prune", str(cache), str(sum(plan.values())), "--keep", str(keep)]) == 0
    assert {p.name for p in cache.iterdir()} == set(plan) == {t["hash"] for t in out["tensors"]}
    assert "seeded" not in capsys.readouterr().out
