"""The planner: KV cache arithmetic, llama.cpp's layer assignment, fewest workers, clear refusals."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as planner

GIB = 1 << 30
MIB = 1 << 20


def model(n_layer=16, layer=100 * MIB, output=50 * MIB, embedding=50 * MIB, n_head_kv=8, head=128):
    return {
        "architecture": "llama",
        "n_layer": n_layer,
        "n_embd": 4096,
        "n_head": 32,
        "n_head_kv": n_head_kv,
        "head_k": head,
        "head_v": head,
        "layer_bytes": [layer] * n_layer,
        "output_bytes": output,
        "embedding_bytes": embedding,
        "weight_bytes": layer * n_layer + output + embedding,
    }


def workers(*gib, state="ready"):
    return [
        {"name": f"node{i + 1}", "endpoint": f"10.0.0.{i + 11}:50052", "mem_available": int(g * GIB), "state": state}
        for i, g in enumerate(gib)
    ]


def test_kv_cache_of_a_known_model():
    # Qwen2.5-32B: 64 layers, 8 KV heads of 128: 4096 cells of f16 = 4096 * 8 * 256 * 2 bytes per layer = 16 MiB.
    summary = model(n_layer=64)
    assert planner.kv_bytes_per_layer(summary, 4096, 1) == 16 * MIB
    # Two slots of 4096 double it; q8_0 keys and values take 34/32 bytes per element.
    assert planner.kv_bytes_per_layer(summary, 4096, 2) == 32 * MIB
    assert planner.kv_bytes_per_layer(summary, 4096, 1, "q8_0", "q8_0") == int(4096 * 8 * 256 * 34 / 32)
    # Cells are padded to 256.
    assert planner.kv_bytes_per_layer(summary, 100, 1) == planner.kv_bytes_per_layer(summary, 256, 1)


@pytest.mark.parametrize("ctx, parallel", [(0, 1), (-5, 1), (512, 0)])
def test_bad_context_is_refused(ctx, parallel):
    with pytest.raises(planner.PlanError, match="positive|at least 1"):
        planner.kv_bytes_per_layer(model(), ctx, parallel)


def test_slot_counts_as_split_give_exact_layer_counts():
    counts = planner.slot_counts([2.0, 3.0, 1.0], 17)
    assert sum(counts) == 17 and counts == [6, 8, 3]
    devices = planner.assign_layers(16, counts)
    assert [devices.count(index) for index in range(3)] == counts


def test_layer_assignment_matches_llama_cpp():
    # 16 layers + output = 17 slots; an even split of 2: cumulative 0.5, 1.0 -> il/17 < 0.5 for il <= 8.
    devices = planner.assign_layers(16, [1, 1])
    assert devices == [0] * 9 + [1] * 8
    # One device takes everything, including the output slot.
    assert planner.assign_layers(4, [1]) == [0] * 5
    # A zero share gets nothing.
    assert 1 not in planner.assign_layers(8, [1, 0, 1])


@settings(max_examples=200, deadline=None)
@given(
    n_layer=st.integers(1, 96),
    split=st.lists(st.floats(0.01, 10, allow_nan=False), min_size=1, max_size=8),
)
def test_layer_assignment_properties(n_layer, split):
    devices = planner.assign_layers(n_layer, split)
    assert len(devices) == n_layer + 1
    assert devices == sorted(devices)  # contiguous ranges, in device order
    assert all(0 <= d < len(split) for d in devices)


def test_fewest_workers_that_fit():
    # 16 x 100 MiB + 50 MiB output + KV: about 1.7 GiB. One 4 GiB worker holds it all.
    result = planner.plan(model(), workers(2, 4, 2), ctx_size=512)
    assert [row["name"] for row in result["workers"]] == ["node2"]
    assert result["rpc"] == "10.0.0.12:50052"
    assert result["devices"] == "RPC0"
    assert result["tensor_split"] == "17"  # all 16 layers and the output slot


def test_needs_two_workers_and_splits_by_memory():
    result = planner.plan(model(layer=200 * MIB), workers(2.5, 3, 1.5), ctx_size=512)
    names = [row["name"] for row in result["workers"]]
    assert names == ["node1", "node2"]  # the two largest, in inventory order
    assert result["devices"] == "RPC0,RPC1"
    counts = [int(x) for x in result["tensor_split"].split(",")]
    assert counts[1] >= counts[0] and sum(counts) == 17  # whole layer slots, the larger worker takes more
    assert all(row["headroom"] >= 0 for row in result["workers"])
    # Every layer and the output are placed exactly once.
    placed = sorted(il for row in result["workers"] for il in row["layers"])
    assert placed == list(range(16))
    assert sum(row["output_layer"] for row in result["workers"]) == 1
    assert result["table"][0].split()[0] == "node"
    assert len(result["table"]) == 3


def test_all_strategy_uses_every_reachable_worker():
    result = planner.plan(model(), workers(4, 4, 4, 4), ctx_size=512, strategy="all")
    assert len(result["workers"]) == 4


def test_unreachable_workers_are_excluded_with_reason():
    pool = workers(4, 4)
    pool[0]["state"] = "refused"
    result = planner.plan(model(), pool, ctx_size=512)
    assert [row["name"] for row in result["workers"]] == ["node2"]
    assert result["excluded"] == [{"name": "node1", "reason": "not reachable (refused)"}]


def test_too_big_says_how_much_is_missing():
    with pytest.raises(planner.PlanError) as caught:
        planner.plan(model(layer=1 * GIB), workers(2, 2, 2), ctx_size=512)
    message = str(caught.value)
    assert "does not fit" in message
    assert "more" in message and "GiB" in message
    assert "add a node" in message.lower() or "Add a node" in message


def test_missing_amount_is_right():
    # Need: 16 GiB of layers (no output, no KV); offer: 3 x 5 GiB (no headroom, no overhead).
    summary = model(layer=1 * GIB, output=0, embedding=0, n_head_kv=0)
    with pytest.raises(planner.PlanError, match=r"needs 1\.0 GiB more"):
        planner.plan(summary, workers(5, 5, 5), ctx_size=256, headroom=0, overhead=0)
    # 6 GiB each holds it: 17 slots as 6 + 6 + 5 whole layers.
    fits = planner.plan(summary, workers(6, 6, 6), ctx_size=256, headroom=0, overhead=0)
    assert fits["tensor_split"] == "6,6,5"


def test_coordinator_host_keeps_room_for_llama_server():
    summary = model(embedding=1 * GIB)
    alone = planner.plan(summary, workers(3), ctx_size=512, headroom=0, overhead=0)
    shared = planner.plan(
        summary, workers(3), ctx_size=512, headroom=0, overhead=0, coordinator="node1", fit_first=False
    )
    assert alone["workers"][0]["capacity"] - shared["workers"][0]["capacity"] == 1 * GIB


@pytest.mark.parametrize(
    "pool, message",
    [([], "no RPC workers"), (workers(4, 4)[:1] * 2, "listed twice"), (workers(0.1), "no usable RPC worker")],
)
def test_bad_worker_lists(pool, message):
    with pytest.raises(planner.PlanError, match=message):
        planner.plan(model(), pool, ctx_size=512)


def test_unknown_strategy_and_cache_type():
    with pytest.raises(planner.PlanError, match="unknown strategy"):
        planner.plan(model(), workers(4), ctx_size=512, strategy="most")
    with pytest.raises(planner.PlanError, match="unknown KV cache type"):
        planner.plan(model(), workers(4), ctx_size=512, cache_type_k="q3")


@settings(max_examples=150, deadline=None)
@example(mems=[2.0, 3.0, 3.0, 3.8125], layer_mib=458, n_layer=17, strategy="fewest")
@given(
    mems=st.lists(st.floats(0.5, 16), min_size=1, max_size=7),
    layer_mib=st.integers(1, 600),
    n_layer=st.integers(1, 64),
    strategy=st.sampled_from(planner.STRATEGIES),
)
def test_plans_never_overcommit_and_fewest_is_minimal(mems, layer_mib, n_layer, strategy):
    summary = model(n_layer=n_layer, layer=layer_mib * MIB)
    pool = workers(*mems)
    try:
        result = planner.plan(summary, pool, ctx_size=512, strategy=strategy)
    except planner.PlanError as exc:
        assert "does not fit" in str(exc) or "no usable" in str(exc)
        return
    rows = result["workers"]
    assert all(row["headroom"] >= 0 for row in rows)
    assert sorted(il for row in rows for il in row["layers"]) == list(range(n_layer))
    if strategy == "fewest" and len(rows) > 1:
        # The largest len(rows) - 1 workers together cannot hold it, in the inventory's order: llama.cpp gives the
        # layers (and the output layer, last) to the devices in that order, so whether whole layers fit depends on it.
        chosen = {w["name"] for w in sorted(pool, key=lambda w: -w["mem_available"])[: len(rows) - 1]}
        largest = [w for w in pool if w["name"] in chosen]
        with pytest.raises(planner.PlanError):
            planner.plan(summary, largest, ctx_size=512, strategy="all")
    # Deterministic.
    assert planner.plan(summary, pool, ctx_size=512, strategy=strategy) == result


def test_summarize_reads_layers_and_tied_output():
    meta = {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "llama.embedding_length": 64,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
    }
    tensors = [
        {"name": "token_embd.weight", "bytes": 1000},
        {"name": "blk.0.attn_q.weight", "bytes": 10},
        {"name": "blk.1.attn_q.weight", "bytes": 20},
        {"name": "output_norm.weight", "bytes": 5},
    ]
    summary = planner.summarize({"metadata": meta, "tensors": tensors})
    assert summary["layer_bytes"] == [10, 20]
    assert summary["output_bytes"] == 1005  # tied embeddings are duplicated onto the output device
    assert summary["head_k"] == 16
    with pytest.raises(planner.PlanError, match="beyond block_count"):
        planner.summarize({"metadata": meta, "tensors": [{"name": "blk.7.x", "bytes": 1}]})
    with pytest.raises(planner.PlanError, match="no llama.block_count"):
        planner.summarize({"metadata": {"general.architecture": "llama"}, "tensors": []})


def test_human_bytes():
    assert planner.human_bytes(512) == "512 B"
    assert planner.human_bytes(3 * GIB + GIB // 10) == "3.1 GiB"
    assert planner.human_bytes(-2 * MIB) == "-2.0 MiB"


def test_memory_is_rounded_to_a_sixteenth_of_the_host():
    noisy = [
        {"name": "a", "endpoint": "x:1", "mem_available": 7 * GIB + 3 * MIB, "mem_total": 8 * GIB},
        {"name": "b", "endpoint": "x:2", "mem_available": 7 * GIB + 400 * MIB, "mem_total": 8 * GIB},
        {"name": "c", "endpoint": "x:3", "mem_available": 5 * GIB + 1},
    ]
    rounded = planner.round_memory(noisy)
    assert [w["mem_available"] for w in rounded] == [7 * GIB, 7 * GIB, 5 * GIB + 1]
    assert all("mem_total" not in w for w in rounded)


# The plan in force is kept while it still fits (a rerun must not re-plan, and restart llama-server, on memory noise).
# Seen in the cluster scenario on a loaded machine: the six lab hosts share one machine's memory, which moved by
# 1.5 GiB between converge and the idempotence run, and the tiny model's 8 layers moved between workers.
def _seen(*gib):
    return planner.plan(model(n_layer=8, layer=MIB), workers(*gib), 512, strategy="all")


def test_memory_noise_alone_would_move_layers():
    first, second = _seen(21.3, 21.4, 20.0, 20.0, 20.0, 20.0), _seen(19.8, 20.0, 20.0, 20.0, 20.0, 20.0)
    assert first["tensor_split"] != second["tensor_split"]  # why keep exists


def test_the_plan_in_force_is_kept_when_it_still_fits():
    first = _seen(21.3, 21.4, 20.0, 20.0, 20.0, 20.0)
    again = planner.plan(
        model(n_layer=8, layer=MIB), workers(19.8, 20.0, 20.0, 20.0, 20.0, 20.0), 512, strategy="all", keep=first
    )
    assert again["kept"] and not first["kept"]
    assert (again["rpc"], again["tensor_split"]) == (first["rpc"], first["tensor_split"])
    assert [row["capacity"] for row in again["workers"]][0] < [row["capacity"] for row in first["workers"]][0]


def test_a_worker_that_left_or_came_back_replans():
    first = _seen(20, 20, 20, 20, 20, 20)
    left = workers(20, 20, 20, 20, 20, 20)
    left[5]["state"] = "refused"
    without = planner.plan(model(n_layer=8, layer=MIB), left, 512, strategy="all", keep=first)
    assert not without["kept"] and "10.0.0.16:50052" not in without["rpc"]
    back = planner.plan(model(n_layer=8, layer=MIB), workers(20, 20, 20, 20, 20, 20), 512, strategy="all", keep=without)
    assert not back["kept"] and back["rpc"] == first["rpc"]


def test_a_kept_split_that_no_longer_fits_replans():
    summary = model(n_layer=16, layer=100 * MIB)
    first = planner.plan(summary, workers(4, 1.2), 512, strategy="all")
    assert first["tensor_split"] == "14,3"
    # node1 lost most of its memory: 14 layer slots no longer fit there, so the split follows the memory.
    again = planner.plan(summary, workers(1.2, 4), 512, strategy="all", keep=first)
    assert not again["kept"] and again["tensor_split"] != first["tensor_split"]


def test_fewest_keeps_its_workers_while_as_few_would_do():
    summary = model(n_layer=16, layer=100 * MIB)
    first = planner.plan(summary, workers(3, 3, 3), 512, strategy="fewest")
    assert first["rpc"].count(",") == 0  # one worker is enough
    again = planner.plan(summary, workers(2.9, 3.1, 3), 512, strategy="fewest", keep=first)
    assert again["kept"] and again["rpc"] == first["rpc"]  # not the now slightly roomier node2


@pytest.mark.parametrize(
    "keep",
    [None, {}, {"rpc": "", "tensor_split": ""}, {"rpc": "10.0.0.11:50052", "tensor_split": "x"}, {"rpc": "a,b"}],
)
def test_nothing_usable_to_keep_plans_anew(keep):
    fresh = _seen(20, 20, 20, 20, 20, 20)
    assert (
        planner.plan(model(n_layer=8, layer=MIB), workers(20, 20, 20, 20, 20, 20), 512, strategy="all", keep=keep)
        == fresh
    )


def test_another_model_plans_anew():
    first = _seen(20, 20, 20, 20, 20, 20)
    other = planner.plan(model(n_layer=10, layer=MIB), workers(20, 20, 20, 20, 20, 20), 512, strategy="all", keep=first)
    assert not other["kept"] and sum(map(int, other["tensor_split"].split(","))) == 11


# Fit first: a model that fits on the coordinator is served there, with no RPC hop (issue #22 item 5).


def _local_need(summary, ctx_size=512, overhead=128 * MIB):
    return planner.local_need(summary, planner.kv_bytes_per_layer(summary, ctx_size, 1), overhead)


def test_a_model_that_fits_on_the_coordinator_is_served_there_alone():
    summary = model()  # 1.66 GiB of weights
    result = planner.plan(summary, workers(4, 8, 8), ctx_size=512, fit_first=True, coordinator="node1")
    assert result["local"] is True
    assert (result["workers"], result["rpc"], result["tensor_split"], result["devices"]) == ([], "", "", "none")
    assert result["need_bytes"] == summary["weight_bytes"] + 16 * result["kv_bytes_per_layer"] + 128 * MIB
    assert result["table"][1].split()[:3] == ["node1", "local", "0-15+out"]


def test_fit_first_is_exact_at_the_headroom():
    summary = model()
    need = _local_need(summary)
    at = workers(1, 4, 4)
    at[0]["mem_available"] = need + 512 * MIB  # exactly fits with the default headroom
    assert planner.plan(summary, at, ctx_size=512, fit_first=True, coordinator="node1")["local"]
    at[0]["mem_available"] -= 1  # one byte short: workers, the fewest that fit (one of the 4 GiB ones)
    result = planner.plan(summary, at, ctx_size=512, fit_first=True, coordinator="node1")
    assert not result["local"] and [row["name"] for row in result["workers"]] == ["node2"]


def test_the_prompt_cache_is_reserved_on_the_coordinators_host():
    """llama-server's --cache-ram lives in the coordinator host's memory: a local plan needs it beside the model, and
    a worker on that host gives it up (issue #22: llama.cpp's own 8 GiB default on an 8 GB coordinator)."""
    summary = model()
    need = _local_need(summary)
    at = workers(1, 4, 4)
    at[0]["mem_available"] = need + 512 * MIB + 64 * MIB
    assert planner.plan(summary, at, ctx_size=512, fit_first=True, coordinator="node1", cache_ram=64 * MIB)["local"]
    result = planner.plan(summary, at, ctx_size=512, fit_first=True, coordinator="node1", cache_ram=64 * MIB + 1)
    assert not result["local"]
    # As a worker, the coordinator's host gives up the prompt cache on top of the embeddings and compute buffer.
    spread = workers(4, 4, 4)
    plain = planner.worker_capacity(spread[0], 512 * MIB, "node1", summary["embedding_bytes"] + 128 * MIB)
    with_cache = planner.plan(summary, spread, ctx_size=512, strategy="all", coordinator="node1", cache_ram=GIB)
    without = planner.plan(summary, spread, ctx_size=512, strategy="all", coordinator="node1")
    capacity = {row["name"]: row["capacity"] for row in with_cache["workers"]}
    assert capacity["node1"] == plain - GIB
    assert capacity["node2"] == {row["name"]: row["capacity"] for row in without["workers"]}["node2"]


def test_fit_first_needs_the_coordinators_memory_and_strategy_fewest():
    summary = model()
    # The coordinator is no worker and no figure is given: its memory is unknown, so workers as before.
    assert not planner.plan(summary, workers(4, 4), ctx_size=512, fit_first=True, coordinator="elsewhere")["local"]
    given = planner.plan(
        summary, workers(4, 4), ctx_size=512, fit_first=True, coordinator="elsewhere", coordinator_available=4 * GIB
    )
    assert given["local"] and given["table"][1].startswith("elsewhere")
    # No worker at all is fine when the coordinator holds the model.
    assert planner.plan(summary, [], ctx_size=512, fit_first=True, coordinator="c", coordinator_available=4 * GIB)[
        "local"
    ]
    with pytest.raises(planner.PlanError, match="no RPC workers"):
        planner.plan(summary, [], ctx_size=512, fit_first=True, coordinator="c", coordinator_available=1 * GIB)
    # Strategy all asks for every worker; fit_first=False asks for workers as before.
    assert not planner.plan(summary, workers(4, 4), ctx_size=512, fit_first=True, coordinator="node1", strategy="all")[
        "local"
    ]
    assert not planner.plan(summary, workers(4, 4), ctx_size=512, coordinator="node1", fit_first=False)["local"]


def test_the_coordinators_memory_counts_whatever_its_worker_state():
    pool = workers(4, 4)
    pool[0]["state"] = "refused"  # its ggml-rpc-server is down: the host's memory is still there
    assert planner.plan(model(), pool, ctx_size=512, fit_first=True, coordinator="node1")["local"]
    pool[0]["mem_available"] = 0  # unreachable over SSH (candidates gives 0): unknown, workers
    assert not planner.plan(model(), pool, ctx_size=512, fit_first=True, coordinator="node1")["local"]


def test_a_local_plan_in_force_is_kept_and_a_distributed_one_gives_way():
    summary = model()
    local = planner.plan(summary, workers(4, 4), ctx_size=512, fit_first=True, coordinator="node1")
    again = planner.plan(summary, workers(3.5, 4), ctx_size=512, fit_first=True, coordinator="node1", keep=local)
    assert again["local"] and again["kept"]
    distributed = planner.plan(summary, workers(4, 4), ctx_size=512, coordinator="node1", fit_first=False)
    after = planner.plan(summary, workers(4, 4), ctx_size=512, fit_first=True, coordinator="node1", keep=distributed)
    assert after["local"] and not after["kept"]


def test_what_llama_server_is_given_for_a_local_and_a_distributed_plan():
    local = planner.plan(model(), workers(4, 4), ctx_size=512, fit_first=True, coordinator="node1")
    assert local["args"] == " ".join(planner.LOCAL_ARGS) == "--device none --n-gpu-layers 0"
    assert planner.describe(local).startswith("local: llama-server computes the whole model on the coordinator's CPU")
    spread = planner.plan(model(), workers(4, 4), ctx_size=512, strategy="all")
    assert spread["args"].split() == [
        "--rpc",
        "10.0.0.11:50052,10.0.0.12:50052",
        "--device",
        "RPC0,RPC1",
        "--tensor-split",
        spread["tensor_split"],
        "--n-gpu-layers",
        "all",
    ]
    assert planner.describe(spread) == f"--rpc 10.0.0.11:50052,10.0.0.12:50052 --tensor-split {spread['tensor_split']}"


# Speculative decoding (issue #36): its arguments, and a draft model's bytes on the host that runs it.


def draft_model(n_layer=4, layer=10 * MIB, output=0, embedding=20 * MIB):
    """A small draft; tied output (output 0) as Gemma's, so its embeddings also count on the output layer's device."""
    summary = model(n_layer=n_layer, layer=layer, output=output or embedding, embedding=embedding, n_head_kv=1, head=64)
    return summary


def spec(types=("draft-simple",), device="cpu", settings=None, draft=True):
    return {
        "types": list(types),
        "draft": draft_model() if draft else None,
        "draft_path": "/data/models/draft/draft.gguf" if draft else "",
        "draft_device": device,
        "settings": settings or {},
    }


def test_ngram_speculation_costs_no_memory_and_adds_its_arguments():
    ngram = {"types": ["ngram-mod"], "settings": {"ngram-mod-n-max": 32, "ngram-mod-n-min": 8}}
    plain = planner.plan(model(), workers(4, 4), ctx_size=512, strategy="all")
    fast = planner.plan(model(), workers(4, 4), ctx_size=512, strategy="all", speculative=ngram)
    assert fast["args"] == plain["args"] + " --spec-type ngram-mod --spec-ngram-mod-n-max 32 --spec-ngram-mod-n-min 8"
    assert [row["headroom"] for row in fast["workers"]] == [row["headroom"] for row in plain["workers"]]
    assert fast["speculative"]["flags"] == ["--spec-ngram-mod-n-max", "--spec-ngram-mod-n-min", "--spec-type"]
    assert not fast["speculative"]["draft"] and fast["table"] == plain["table"]
    # Off: no key, no argument (a plan without speculation is what it was).
    assert "speculative" not in plain and "--spec" not in plain["args"]
    assert planner.plan(model(), workers(4, 4), ctx_size=512, strategy="all", speculative={"types": []}) == plain


def test_a_draft_on_the_coordinators_cpu_counts_there():
    summary, request = model(), spec(settings={"draft-n-max": 8})
    need = planner.draft_need(planner.check_speculative(request), 512, 1, 128 * MIB)
    kv = planner.kv_bytes_per_layer(request["draft"], 512, 1) * 4
    assert need == {
        "weights": request["draft"]["weight_bytes"],
        "kv": kv,
        "device": 0,
        "coordinator": request["draft"]["weight_bytes"] + kv + 128 * MIB,
    }
    at = workers(1, 4, 4)
    at[0]["mem_available"] = _local_need(summary) + need["coordinator"] + 512 * MIB  # exactly fits with the draft
    local = planner.plan(summary, at, ctx_size=512, fit_first=True, coordinator="node1", speculative=request)
    assert local["local"] and local["need_bytes"] == _local_need(summary) + need["coordinator"]
    assert local["args"].split()[4:] == [
        "--spec-type",
        "draft-simple",
        "--spec-draft-model",
        "/data/models/draft/draft.gguf",
        "--spec-draft-device",
        "none",
        "--spec-draft-n-max",
        "8",
    ]
    assert local["speculative"]["draft_host"] == "node1" and local["table"][-1].startswith("draft model on node1 (CPU)")
    at[0]["mem_available"] -= 1  # one byte short: the draft pushes the model onto the workers
    spread = planner.plan(summary, at, ctx_size=512, fit_first=True, coordinator="node1", speculative=request)
    assert (
        not spread["local"]
        and spread["coordinator_bytes"] == summary["embedding_bytes"] + 128 * MIB + need["coordinator"]
    )
    assert "--spec-draft-device none" in spread["args"]


def test_a_draft_the_coordinator_cannot_hold_is_refused_when_no_worker_shares_its_host():
    summary, request = model(), spec()
    need = planner.draft_need(planner.check_speculative(request), 512, 1, 128 * MIB)
    coordinator_bytes = summary["embedding_bytes"] + 128 * MIB + need["coordinator"]
    headroom = 512 * MIB
    fits = coordinator_bytes + headroom  # exactly: the coordinator's own bytes with the draft, and the headroom
    kwargs = {"ctx_size": 512, "strategy": "all", "coordinator": "ctl", "headroom": headroom}
    planned = planner.plan(summary, workers(4, 4), coordinator_available=fits, speculative=request, **kwargs)
    assert planned["coordinator_bytes"] == coordinator_bytes
    with pytest.raises(planner.PlanError, match="the coordinator cannot hold the draft model"):
        planner.plan(summary, workers(4, 4), coordinator_available=fits - 1, speculative=request, **kwargs)
    # Without speculation the coordinator's memory is not checked in a distributed plan, as before.
    assert planner.plan(summary, workers(4, 4), coordinator_available=1, **kwargs)["coordinator_bytes"]
    # Unknown memory (no figure, no worker on its host): nothing to check against.
    assert planner.plan(summary, workers(4, 4), speculative=request, **kwargs)["speculative"]["draft"]


def test_a_draft_on_a_worker_counts_there_and_puts_that_worker_in_the_plan():
    summary, request = model(), spec(device="node2")
    need = planner.draft_need(planner.check_speculative(request), 512, 1, 128 * MIB)
    draft = request["draft"]
    assert need["device"] == sum(draft["layer_bytes"]) + draft["output_bytes"] + need["kv"] + 128 * MIB
    assert need["coordinator"] == draft["embedding_bytes"]  # its input layer stays on the coordinator's CPU
    # node1 (8 GiB) alone would hold the model, and the coordinator could too: the draft's worker joins anyway.
    result = planner.plan(
        summary, workers(8, 4), ctx_size=512, fit_first=True, coordinator="node1", speculative=request
    )
    assert not result["local"] and [row["name"] for row in result["workers"]] == ["node2"]
    assert "--spec-draft-device RPC0 --spec-draft-ngl all" in result["args"]
    plain = planner.plan(summary, workers(8, 4), ctx_size=512, strategy="all")
    both = planner.plan(summary, workers(8, 4), ctx_size=512, strategy="all", speculative=request)
    capacity = {row["name"]: row["capacity"] for row in both["workers"]}
    assert capacity["node2"] == {row["name"]: row["capacity"] for row in plain["workers"]}["node2"] - need["device"]
    assert capacity["node1"] == plain["workers"][0]["capacity"]
    assert both["speculative"]["draft_device"] == "RPC1" and both["workers"][1]["draft_bytes"] == need["device"]
    assert both["table"][-1].startswith("draft model on node2 (RPC1)")


def test_the_draft_kv_cache_has_the_targets_cells_and_its_own_types():
    request = planner.check_speculative(spec(settings={"draft-type-k": "q8_0"}))
    f16 = planner.draft_need(planner.check_speculative(spec()), 4096, 2, 0)["kv"]
    assert f16 == 4096 * 2 * 1 * (64 * 2 + 64 * 2) * 4  # cells x KV heads x (K + V bytes) x draft layers
    assert planner.draft_need(request, 4096, 2, 0)["kv"] == int(4096 * 2 * (64 * 34 / 32 + 64 * 2)) * 4


def test_the_draft_worker_must_be_usable():
    with pytest.raises(planner.PlanError, match="draft model's device 'node9' is no worker"):
        planner.plan(model(), workers(4, 4), ctx_size=512, speculative=spec(device="node9"))
    down = workers(4, 4)
    down[1]["state"] = "refused"
    with pytest.raises(planner.PlanError, match=r"draft model's worker node2 is not usable \(not reachable"):
        planner.plan(model(), down, ctx_size=512, speculative=spec(device="node2"))


def test_a_kept_plan_without_the_draft_worker_gives_way():
    summary = model()
    first = planner.plan(summary, workers(8, 8), ctx_size=512)  # node1 alone
    assert first["rpc"] == "10.0.0.11:50052"
    again = planner.plan(summary, workers(8, 8), ctx_size=512, keep=first, speculative=spec(device="node2"))
    assert not again["kept"] and again["rpc"] == "10.0.0.12:50052"


@pytest.mark.parametrize(
    "request_, message",
    [
        ({"types": ["draft-eagle3"]}, "unknown speculative type 'draft-eagle3'"),
        ({"types": ["draft-simple"]}, "draft-simple needs a draft model"),
        ({"types": ["ngram-mod"], "draft": draft_model(), "draft_path": "/d.gguf"}, "do not use it"),
        ({"types": [], "draft": draft_model(), "draft_path": "/d.gguf"}, "no speculative type"),
        ({"types": ["ngram-mod"], "settings": {"n-max": 3}}, "unknown speculative setting 'n-max'"),
        ({"types": ["ngram-mod"], "settings": {"ngram-mod-n-max": "many"}}, "takes a int"),
        ({"types": ["ngram-mod"], "settings": {"ngram-mod-n-max": True}}, "takes a int"),
        ({"types": ["ngram-mod"], "settings": {"ngram-mod-n-max": -1}}, "must be from 0 to 1024"),
        # llama.cpp's own minimum (48) over a smaller maximum: every draft shorter than the minimum is thrown away.
        (
            {"types": ["ngram-mod"], "settings": {"ngram-mod-n-max": 32}},
            r"ngram-mod-n-min \(48\) is more than ngram-mod-n-max \(32\)",
        ),
        ({"types": ["ngram-mod"], "settings": {"ngram-mod-n-match": 2000}}, r"must be from 1 to 1024 \(llama-server"),
        ({"types": ["ngram-simple"], "settings": {"ngram-simple-min-hits": 0}}, "must be 1 or more"),
        ({"types": ["ngram-mod"], "settings": {"draft-p-min": 1.5}}, "must be from 0.0 to 1.0"),
        ({"types": ["ngram-mod"], "settings": {"draft-type-k": "q3"}}, "unknown KV cache type"),
        ({"types": ["ngram-mod"], "settings": {"ngram-mod-n-min": 80}}, r"ngram-mod-n-min \(80\) is more than"),
        (
            {
                "types": ["draft-simple"],
                "settings": {"draft-n-min": 4, "draft-n-max": 2},
                "draft": draft_model(),
                "draft_path": "/d.gguf",
            },
            r"draft-n-min \(4\) is more than draft-n-max \(2\)",
        ),
        ({"types": ["draft-simple"], "draft": draft_model(), "draft_path": "/my models/d.gguf"}, "white space"),
        ({"types": ["draft-simple"], "draft": draft_model(), "draft_path": "d.gguf"}, "absolute"),
    ],
)
def test_a_bad_speculation_request_is_refused_with_what_to_change(request_, message):
    with pytest.raises(planner.PlanError, match=message):
        planner.check_speculative(request_)


def test_speculation_in_normal_form():
    assert planner.check_speculative(None) is None and planner.check_speculative({"types": []}) is None
    normal = planner.check_speculative(
        {
            "types": ["ngram-mod", "ngram-mod", "draft-simple"],
            "draft": draft_model(),
            "draft_path": "/d.gguf",
            "settings": {"draft-p-min": "0.75", "draft-n-max": "5"},
        }
    )
    assert normal["types"] == ["ngram-mod", "draft-simple"] and normal["draft_device"] == "cpu"
    assert normal["settings"] == {"draft-n-max": 5, "draft-p-min": 0.75}
    assert planner.speculative_args(normal, "none")[-4:] == ["--spec-draft-n-max", "5", "--spec-draft-p-min", "0.75"]
