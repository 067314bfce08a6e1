"""Seeding a worker's tensor cache: which tensors each endpoint of a plan is offered (the planner's layer mapping, a
tied output on the output layer's device), their bytes found in the shards, and cache files written atomically under
their FNV-1a names, left alone when already right."""

from __future__ import annotations

import os

import gguf
import pytest
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as planner
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _fnv1a
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed as ts

THRESHOLD = 300 * 1024  # the tiny model's FFN matrices (384 KiB), its embedding and output are over it
RPC = "10.0.0.2:50052,10.0.0.3:50052"


@pytest.fixture(scope="module")
def split_model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("split"), preset="tiny", shards=3, seed=5)


@pytest.fixture(scope="module")
def tensors(split_model):
    return ts.model_tensors(split_model["files"][0]["path"])


def lists(tensors, rpc=RPC, split="1,1"):
    found, n_layer = tensors
    return ts.seed_lists(found, n_layer, rpc, split, threshold=THRESHOLD)


def source_bytes(entry):
    with open(entry["file"], "rb") as handle:
        handle.seek(entry["offset"])
        return handle.read(entry["size"])


def test_python_and_the_helper_hash_ranges_alike(hasher, tmp_path):
    data = os.urandom(200_000)
    path = tmp_path / "data"
    path.write_bytes(data)
    ranges = [(str(path), 0, len(data)), (str(path), 3, 0), (str(path), 1000, 65_536), (str(path), 199_999, 1)]
    expected = [f"{_fnv1a.fnv1a(data[o : o + n]):016x}" for _p, o, n in ranges]
    assert _fnv1a.hash_ranges(ranges) == expected
    assert _fnv1a.hash_ranges(ranges, hasher) == expected
    assert _fnv1a.hash_ranges([(str(path), 0, 6)], hasher) == [f"{_fnv1a.fnv1a(data[:6]):016x}"]


def test_a_range_past_the_end_is_an_error_both_ways(hasher, tmp_path):
    path = tmp_path / "short"
    path.write_bytes(b"foobar")
    for program in (None, hasher):
        with pytest.raises(_fnv1a.HashError):
            _fnv1a.hash_ranges([(str(path), 2, 5)], program)
    with pytest.raises((_fnv1a.HashError, OSError)):
        _fnv1a.hash_ranges([(str(tmp_path / "gone"), 0, 1)], hasher)


def test_offsets_point_at_each_tensors_bytes_in_its_shard(split_model, tensors):
    found, n_layer = tensors
    assert n_layer == split_model["block_count"]
    assert len(found) == split_model["tensor_count"]
    for shard in split_model["files"]:
        reader = gguf.GGUFReader(shard["path"])
        mine = {t["name"]: t for t in found if t["file"] == shard["path"]}
        assert set(mine) == {t.name for t in reader.tensors}
        for tensor in reader.tensors:
            assert mine[tensor.name]["size"] == int(tensor.n_bytes)
            assert source_bytes(mine[tensor.name]) == tensor.data.tobytes()


def test_each_endpoint_gets_the_big_tensors_of_its_layers_as_llama_cpp_assigns_them(tensors):
    found, n_layer = tensors
    for split in ("1,1", "3,1", "1,5"):
        got = lists(tensors, split=split)
        devices = planner.assign_layers(n_layer, [float(v) for v in split.split(",")])
        endpoints = RPC.split(",")
        expected = {endpoint: [] for endpoint in endpoints}
        for tensor in found:
            if tensor["size"] <= THRESHOLD or tensor["name"].startswith("token_embd."):
                continue  # untied: the embedding stays on the coordinator
            slot = int(tensor["name"].split(".")[1]) if tensor["name"].startswith("blk.") else n_layer
            expected[endpoints[devices[slot]]].append(tensor["name"])
        assert {e: [t["name"] for t in rows] for e, rows in got.items()} == expected
        assert "output.weight" in expected[endpoints[devices[n_layer]]]
        assert all(t["size"] > THRESHOLD for rows in got.values() for t in rows)


def test_a_tied_output_sends_the_embedding_to_the_output_layers_endpoint(tensors):
    found, n_layer = tensors
    tied = [t for t in found if t["name"] != "output.weight"]
    got = ts.seed_lists(tied, n_layer, RPC, "1,1", threshold=THRESHOLD)
    last = RPC.split(",")[planner.assign_layers(n_layer, [1.0, 1.0])[n_layer]]
    assert "token_embd.weight" in [t["name"] for t in got[last]]
    assert all("token_embd.weight" not in [t["name"] for t in rows] for e, rows in got.items() if e != last)


def test_the_planner_counts_the_same_tied_bytes():
    model = {
        "metadata": {
            "general.architecture": "llama",
            "llama.block_count": 1,
            "llama.embedding_length": 8,
            "llama.attention.head_count": 1,
        },
        "tensors": [
            {"name": "token_embd.weight", "bytes": 100},
            {"name": "blk.0.ffn_up.weight", "bytes": 10},
            {"name": "output_norm.weight", "bytes": 1},
        ],
    }
    summary = planner.summarize(model)
    assert (summary["layer_bytes"], summary["output_bytes"], summary["embedding_bytes"]) == ([10], 101, 100)


@pytest.mark.parametrize(
    ("rpc", "split", "message"),
    [
        ("", "", "no RPC endpoint"),
        (RPC, "1", "2 RPC endpoint(s) but 1"),
        ("a:1,a:1", "1,1", "listed twice"),
    ],
)
def test_plans_that_cannot_be_seeded_are_refused(tensors, rpc, split, message):
    with pytest.raises(planner.PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        lists(tensors, rpc, split)


@pytest.fixture
def entries(tensors):
    got = lists(tensors)
    return got[RPC.split(",")[1]]


def cache_files(cache):
    return {p.name: p.read_bytes() for p in cache.iterdir()}


@pytest.mark.parametrize("fast", [True, False], ids=["helper", "python"])
def test_seeding_writes_each_tensor_under_its_hash_and_then_leaves_it(fast, hasher, entries, tmp_path):
    program = hasher if fast else None
    if not fast:
        entries = entries[:2]  # Python hashes about 5 MB/s
    cache = tmp_path / "rpc"
    cache.mkdir()
    rows, stale = ts.seed(entries, str(cache), program, check_mode=True)
    assert stale == [] and {r["state"] for r in rows} == {"missing"}
    assert list(cache.iterdir()) == []  # check mode writes nothing

    rows, stale = ts.seed(entries, str(cache), program)
    assert {r["state"] for r in rows} == {"written"}
    files = cache_files(cache)
    assert files == {f"{_fnv1a.fnv1a(source_bytes(e)):016x}": source_bytes(e) for e in entries}
    assert {r["hash"] for r in rows} == set(files)
    times = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}

    for check in (True, False):
        rows, stale = ts.seed(entries, str(cache), program, check_mode=check)
        assert {r["state"] for r in rows} == {"present"}
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == times


def test_a_wrong_file_under_the_right_name_and_a_killed_runs_leftover_are_replaced(hasher, entries, tmp_path):
    cache = tmp_path / "rpc"
    cache.mkdir()
    ts.seed(entries, str(cache), hasher)
    good = cache_files(cache)
    victim = cache / sorted(good)[0]
    data = bytearray(victim.read_bytes())
    data[5] ^= 0x40  # same size, one bit flipped: only the hash tells
    victim.write_bytes(bytes(data))
    leftover = cache / f"{ts.TEMP_PREFIX}{victim.name}.999"
    leftover.write_bytes(b"half")

    rows, stale = ts.seed(entries, str(cache), hasher, check_mode=True)
    assert [r["hash"] for r in rows if r["state"] == "missing"] == [victim.name]
    assert stale == [str(leftover)] and leftover.exists()

    rows, stale = ts.seed(entries, str(cache), hasher)
    assert [r["hash"] for r in rows if r["state"] == "written"] == [victim.name]
    assert cache_files(cache) == good


def test_a_source_that_changes_under_the_copy_leaves_no_cache_file(hasher, entries, tmp_path, monkeypatch):
    cache = tmp_path / "rpc"
    cache.mkdir()
    real = ts._copy_range

    def changed(source, offset, size, target):
        real(source, offset, size, target)
        os.pwrite(target, b"\xff", 0)

    monkeypatch.setattr(ts, "_copy_range", changed)
    with pytest.raises(ts.SeedError, match="changed while it was read"):
        ts.seed(entries[:1], str(cache), hasher)
    assert list(cache.iterdir()) == []


def test_no_room_is_refused_before_anything_is_written(hasher, entries, tmp_path, monkeypatch):
    cache = tmp_path / "rpc"
    cache.mkdir()

    class Full:
        f_bavail = 1
        f_frsize = 4096

    monkeypatch.setattr(ts.os, "statvfs", lambda path: Full)
    with pytest.raises(ts.SeedError, match="free space there"):
        ts.seed(entries, str(cache), hasher)
    assert list(cache.iterdir()) == []


def test_a_missing_cache_directory_is_an_error(entries, tmp_path):
    with pytest.raises(ts.SeedError, match="creates the cache directory"):
        ts.seed(entries, str(tmp_path / "nope"))
