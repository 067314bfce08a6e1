"""A model change planned (_shard_plan_run.staging through place): the room of the models not kept counts, the
model served now stays until the switch, a staging that does not fit is refused before any change unless an in-place
replacement is asked for, and the footprints per host."""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_plan_run as plan_run
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_record as rec
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_plan import PlanError

MB = 1_000_000


def shards(prefix, sizes):
    count = len(sizes)
    return [
        {"name": f"{prefix}-{n:05d}-of-{count:05d}.gguf", "size": size * MB, "sha256": f"{prefix}{n}"}
        for n, size in enumerate(sizes, 1)
    ]


def report(free, held=(), served=()):
    """A gguf_shard_facts report holding the models ``held`` ({id: shards}) placed, the coordinator's ``served``."""
    files, models, placed = {}, {}, {}
    for model, model_shards in dict(held).items():
        models[model] = {"files": [s["name"] for s in model_shards], "links": {}}
        for s in model_shards:
            files[s["name"]] = {"state": "file", "size": s["size"]}
            placed[s["name"]] = s["size"]
    return {"free": free * MB, "files": files, "exists": True, "models": models, "placed": placed,
            "served": [{"model": m, "source": {}} for m in served]}  # fmt: skip


def request(replace="staged", keep_previous=1):
    return {"coordinator": "node1", "candidates": ["node1", "node2"], "reserve": 0, "caches": {},
            "model_dir": "/data/models", "mounts": {}, "replace": replace, "keep_previous": keep_previous}  # fmt: skip


A, B, C = shards("a", [60, 40]), shards("b", [50, 50]), shards("c", [70, 30])
IDA, IDB, IDC = rec.model_id(A), rec.model_id(B), rec.model_id(C)


def reports(names, free1, free2, served):
    """node1 holds the models of ``names`` (a, b) split: the first shard on node1, the second on node2."""
    held1 = {model: s[:1] for model, s in names.items()}
    held2 = {model: s[1:] for model, s in names.items()}
    raw = {"node1": report(free1, held1, served), "node2": report(free2, held2)}
    every = [s["name"] for model_shards in names.values() for s in model_shards]
    return {name: plan_run.host_view(value, every + [s["name"] for s in C]) for name, value in raw.items()}


def test_the_room_of_a_model_not_kept_counts_and_the_served_one_stays():
    # b serves, a before it; staging c with keep_previous 1 prunes a first (60 + 40 MB): c fits in that room.
    views = reports({IDA: A, IDB: B}, 10, 10, [IDB, IDA])
    placement, planned = plan_run.place(C, views, request())
    staging = planned["staging"]
    assert staging["fits"] and not staging["stop_first"] and staging["keep_models"] == [IDC, IDB]
    expected = {"serving": 50, "previous": 0, "reclaim": 60, "reclaim_in_place": 110, "free": 10, "new": 70}
    assert staging["footprints"]["node1"] == {key: value * MB for key, value in expected.items()}
    assert sum(s["size"] for s in placement) == 100 * MB


def test_staging_that_does_not_fit_is_refused_and_says_what_is_missing_where():
    views = reports({IDB: B}, 20, 20, [IDB])  # only b, which serves: nothing to prune before the switch
    with pytest.raises(PlanError) as caught:
        plan_run.place(C, views, request())
    message = str(caught.value)
    assert message.startswith("nothing was downloaded: staging the new model beside the one served now does not fit")
    assert "missing" in message and "node1" in message and "llama_model_replace: in_place" in message
    assert "Nothing was changed" in message


def test_in_place_frees_the_served_model_and_stops_first():
    views = reports({IDB: B}, 20, 20, [IDB])
    _placement, planned = plan_run.place(C, views, request(replace="in_place"))
    staging = planned["staging"]
    assert staging["stop_first"] and staging["keep_models"] == [IDC] and not staging["fits"]
    assert "stays down" in staging["downtime"] and "not kept for a rollback" in staging["downtime"]


def test_in_place_is_not_used_when_staging_fits():
    views = reports({IDB: B}, 200, 200, [IDB])
    _placement, planned = plan_run.place(C, views, request(replace="in_place"))
    assert planned["staging"]["fits"] and not planned["staging"]["stop_first"]
    assert planned["staging"]["keep_models"] == [IDC, IDB]


def test_a_model_that_does_not_fit_even_in_place_gets_the_usual_message():
    views = reports({IDB: B}, 0, 0, [IDB])
    with pytest.raises(PlanError, match="the model does not fit") as caught:
        plan_run.place(shards("c", [700, 300]), views, request(replace="in_place"))
    assert "in_place" not in str(caught.value)


def test_a_rollback_target_is_pinned_and_needs_no_room():
    # c serves, b before it, both on the hosts: rolling back to b needs no byte of new room.
    views = reports({IDB: B, IDC: C}, 0, 0, [IDC, IDB])
    placement, planned = plan_run.place(B, views, request())
    assert planned["staging"]["fits"] and planned["staging"]["keep_models"] == [IDB, IDC]
    assert [s["host"] for s in placement] == ["node1", "node2"]
    assert planned["hosts"]["node1"]["assigned"] == 0


def test_bad_replace_or_keep_previous_is_refused():
    args = {"model_dir": "/m", "files": ["/x.gguf"], "coordinator": "node1", "mount_root": "/mnt", "reserve": "0"}
    with pytest.raises(PlanError, match="replace is one of"):
        plan_run.check_request({**args, "replace": "later"}, ["node1"], {"node1"})
    with pytest.raises(PlanError, match="keep_previous must not be negative"):
        plan_run.check_request({**args, "keep_previous": -1}, ["node1"], {"node1"})
