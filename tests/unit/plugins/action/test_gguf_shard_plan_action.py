"""Shard placement, controller side (gguf_shard_plan): the tensor_caches option and planning from the hosts' reports."""

from __future__ import annotations

import hashlib

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_plan_run as plan_run
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_source as source
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_plan import PlanError

MB = 1000**2
CACHE = "/var/cache/llamarpc/rpc-worker"
MODEL_DIR = "/data/models/model"
SHARDS = [
    {"name": f"m-0000{i}-of-00003.gguf", "size": size, "sha256": "0" * 64}
    for i, size in enumerate((5 * MB, 3 * MB, 5 * MB), 1)
]


def report(free, cache=None):
    rep = {"free": free, "partial_bytes": 0, "complete": {}, "files": {}, "exists": False}
    if cache is not None:
        rep["tensor_cache"] = cache
    return rep


def request(caches):
    return {
        "coordinator": "node1",
        "mounts": {},
        "reserve": 512 * 1024,
        "caches": plan_run.tensor_caches(caches, ["node1", "node2", "node3"]),
        "model_dir": MODEL_DIR,
    }


CAPS = {name: {"path": CACHE, "max_size": "20G"} for name in ("node2", "node3")}


def test_caches_on_other_filesystems_keep_the_plan():
    """The molecule shards lab's shape: /data on its own disk, the cache elsewhere: nothing changes."""
    elsewhere = {"path": CACHE, "same_filesystem": False, "cached": 0}
    reports = {"node1": report(6 * MB), "node2": report(8 * MB, elsewhere), "node3": report(6 * MB, elsewhere)}
    placement, planned = plan_run.place(SHARDS, reports, request(CAPS))
    plain = {name: report(rep["free"]) for name, rep in reports.items()}
    assert (placement, planned) == plan_run.place(SHARDS, plain, request({}))
    assert [shard["host"] for shard in placement] == ["node1", "node2", "node3"]


def test_a_cache_on_the_model_filesystem_refuses_before_any_download():
    shared = {"path": CACHE, "same_filesystem": True, "cached": 0}
    reports = {"node1": report(6 * MB), "node2": report(8 * MB, shared), "node3": report(6 * MB, shared)}
    with pytest.raises(PlanError) as caught:
        plan_run.place(SHARDS, reports, request(CAPS))
    message = str(caught.value)
    assert message.startswith("nothing was downloaded: ")
    assert f"tensor cache ({CACHE}, same filesystem as {MODEL_DIR})" in message


def test_the_cap_is_the_workers_and_the_cached_bytes_the_hosts():
    shared = {"path": CACHE, "same_filesystem": True, "cached": 1 * MB}
    reports = {"node1": report(6 * MB), "node2": report(20 * MB, shared), "node3": report(6 * MB)}
    small = {"node2": {"path": CACHE, "max_size": "4M"}}
    _placement, planned = plan_run.place(SHARDS, reports, request(small))
    assert planned["hosts"]["node2"]["tensor_cache"] == 4 * 1024 * 1024 - 1 * MB
    # A host whose report has a cache the task no longer names (not a candidate's entry): not counted.
    _placement, planned = plan_run.place(SHARDS, reports, request({}))
    assert "tensor_cache" not in planned["hosts"]["node2"]


def test_tensor_caches_option():
    caches = plan_run.tensor_caches(
        {"node1": {}, "node2": {"path": CACHE + "/", "max_size": "1G"}, "node9": {"path": "/c", "max_size": 5}},
        ["node1", "node2"],
        known=["node1", "node2", "node9"],
    )
    # node1's worker keeps no cache ({}), node9 is not a candidate: both ignored.
    assert caches == {"node2": {"path": CACHE, "cap": 1024**3}}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"ghost": {"path": CACHE, "max_size": "1G"}}, "not in the inventory"),
        ({"node1": {"path": "var/cache", "max_size": "1G"}}, "absolute path"),
        ({"node1": {"path": CACHE, "max_size": "lots"}}, "max_size"),
        ({"node1": {"path": CACHE}}, "path and max_size"),
        (["node1"], "must be a dict"),
    ],
)
def test_bad_tensor_caches(given, message):
    with pytest.raises(PlanError, match=message):
        plan_run.tensor_caches(given, ["node1"], known=["node1"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_gguf import generate  # noqa: PLC0415 - numpy and gguf only for these tests

    made = generate(tmp_path_factory.mktemp("tiny"), preset="tiny", shards=3, seed=1)
    return [{"name": f["name"], "size": f["size"], "sha256": None, "src_controller": f["path"]} for f in made["files"]]


def plan_only(shards, reports, caches=None):
    """fetch=false on the controller: the action's own planner, no host touched (its reports are given)."""
    planned = {**request(caches or {}), "mounts": {name: f"/mnt/llamarpc/{name}" for name in reports}}
    planned["candidates"] = list(reports)
    return plan_run.plan_only(shards, reports, planned, {}, timeout=5, validate_certs=True, link=True)


def test_plan_only_plans_like_a_fetching_run_and_reads_the_model(tiny):
    reports = {"node1": report(8 * MB), "node2": report(20 * MB), "node3": report(6 * MB)}
    out = plan_only(tiny, reports)
    placement, _planned = plan_run.place(tiny, reports, request({}))
    assert out["refusal"] is None and out["changed"] is False
    assert [(s["name"], s["host"]) for s in out["plan"]] == [(s["name"], s["host"]) for s in placement]
    assert out["model"]["n_layer"] == 8 and out["model"]["weight_bytes"] > 0
    assert [read["requests"] for read in out["header_reads"]] == [0, 0, 0]  # controller files: read locally
    assert out["fetched"] == [] and out["actions"] == []
    # The token list as shard 1's header has it (plan.yml counts the logits of speculative decoding with it).
    assert out["vocabulary"]["count"] == 1024 and out["vocabulary"]["model"] == "llama"
    assert len(out["vocabulary"]["sha256"]) == 64


def test_plan_only_gives_the_refusal_a_fetching_run_fails_with(tiny):
    reports = {"node1": report(1 * MB), "node2": report(2 * MB), "node3": report(1 * MB)}
    with pytest.raises(PlanError) as caught:
        plan_run.place(tiny, reports, request({}))
    out = plan_only(tiny, reports)
    assert out["refusal"] == str(caught.value)
    assert out["refusal"].startswith("nothing was downloaded: the model does not fit")
    assert "plan" not in out and out["model"]["n_layer"] == 8
    assert out["place"] == {}  # the role loops over it: empty, never undefined


def test_plan_only_does_not_hash_controller_files(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    assert source.resolve_files([str(path)], digest=False)[0]["sha256"] is None
    assert source.resolve_files([str(path)])[0]["sha256"] == hashlib.sha256(b"GGUF").hexdigest()
