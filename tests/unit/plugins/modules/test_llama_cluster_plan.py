"""The llama_cluster_plan module on a real (tiny) split GGUF model, and node_memory_facts on fake /proc and cgroups."""

from __future__ import annotations

import gguf
import pytest
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _node_memory
from ansible_collections.llamarpc.cluster.plugins.modules import llama_cluster_plan, node_memory_facts

GIB = 1 << 30


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("model"), preset="tiny", shards=3, seed=5)


def workers(*gib):
    return [
        {
            "name": f"n{i}",
            "endpoint": f"10.0.0.{i}:50052",
            "mem_available": int(g * GIB),
            "mem_total": 8 * GIB,
            "state": "ready",
        }
        for i, g in enumerate(gib, start=1)
    ]


def test_plans_from_the_gguf_headers(run_module, model):
    result = run_module(
        llama_cluster_plan,
        {"model_path": model["files"][0]["path"], "workers": workers(4, 4), "ctx_size": 512, "strategy": "all"},
        check_mode=True,
    )
    assert not result.failed, result.result
    out = result.result
    assert out["changed"] is False
    assert out["model"]["n_layer"] == model["block_count"]
    assert out["model"]["n_head_kv"] == model["head_count_kv"]
    assert (
        sum(out["model"]["layer_bytes"]) + out["model"]["output_bytes"] + out["model"]["embedding_bytes"]
        <= model["total_bytes"]
    )
    assert out["plan"]["devices"] == "RPC0,RPC1"
    assert sum(int(x) for x in out["plan"]["tensor_split"].split(",")) == model["block_count"] + 1
    assert all("mem_total" not in w for w in out["workers"])


def test_cannot_fit_fails_with_the_missing_amount(run_module, model):
    result = run_module(
        llama_cluster_plan,
        {"model_path": model["files"][0]["path"], "workers": workers(0.6), "ctx_size": 512, "headroom": "512M"},
    )
    assert result.failed
    assert "no usable RPC worker" in result.result["msg"] or "does not fit" in result.result["msg"]


def test_bad_input_is_named(run_module, model):
    bad = run_module(llama_cluster_plan, {"model_path": model["files"][0]["path"], "workers": [{"name": "x"}]})
    assert bad.failed and "lacks endpoint, mem_available" in bad.result["msg"]
    size = run_module(
        llama_cluster_plan,
        {"model_path": model["files"][0]["path"], "workers": workers(4), "headroom": "lots"},
    )
    assert size.failed and "headroom must be a size" in size.result["msg"]
    ctx = run_module(
        llama_cluster_plan, {"model_path": model["files"][0]["path"], "workers": workers(4), "ctx_size": 0}
    )
    assert ctx.failed and "positive" in ctx.result["msg"]
    missing = run_module(llama_cluster_plan, {"model_path": "/nonexistent/m.gguf", "workers": workers(4)})
    assert missing.failed and "/nonexistent/m.gguf" in missing.result["msg"]
    unbounded = run_module(
        llama_cluster_plan, {"model_path": model["files"][0]["path"], "workers": workers(4), "cache_ram": -1}
    )
    assert unbounded.failed and "cache_ram must be 0 or more MiB, got -1" in unbounded.result["msg"]


def test_memory_facts_read_meminfo_and_cgroup_limits(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       8000000 kB\nMemFree:   100 kB\nMemAvailable:   6000000 kB\n")
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text(str(4 * GIB))
    (v1 / "memory" / "memory.usage_in_bytes").write_text(str(1 * GIB))
    facts = _node_memory.memory_facts(str(meminfo), str(v1))
    assert facts["mem_available"] == 6000000 * 1024
    assert facts["available"] == 3 * GIB  # the cgroup's remaining memory is smaller
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("max\n")
    unlimited = _node_memory.memory_facts(str(meminfo), str(v2))
    assert unlimited["cgroup_limit"] is None and unlimited["available"] == 6000000 * 1024
    # A v1 "no limit" (about 2^63) counts as none.
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712")
    assert _node_memory.memory_facts(str(meminfo), str(v1))["cgroup_limit"] is None


def test_memory_facts_module_runs_here(run_module):
    result = run_module(node_memory_facts, {}, check_mode=True)
    facts = result.result["ansible_facts"]["llamarpc_memory"]
    assert not result.failed and facts["total"] > 0 and 0 < facts["available"] <= facts["total"]


def test_the_plan_explains_its_worker_count_in_round_trips(run_module, model):
    args = {"model_path": model["files"][0]["path"], "ctx_size": 512}
    few = workers(4, 4, 4)
    for worker, rtt in zip(few, (1.0, 2.0, 3.0), strict=True):
        worker["rtt_ms"] = rtt
    out = run_module(llama_cluster_plan, {**args, "workers": few, "strategy": "fewest"}).result
    assert out["explanation"] == (
        "1 of 3 usable worker(s) (fewest): the layer split crosses the network 1 time per generated token "
        # 1 x (1 ms + RPC_CALL_SECONDS 0.64 ms); all: 1 + 2 + 3 ms + 3 x 0.64 ms (one round trip per worker, counted)
        "(3 with all of them); at the measured round trips that is 1.6 ms of network time per token (7.9 ms with all)"
    )
    assert "rtt" not in str(out["plan"])  # round trips vary from run to run; the plan must not
    out = run_module(llama_cluster_plan, {**args, "workers": workers(4, 4), "strategy": "all"}).result
    assert out["explanation"] == (
        "2 of 2 usable worker(s) (all): the layer split crosses the network 2 times per generated token"
    )


def test_a_model_read_elsewhere_plans_exactly_like_its_files(run_module, model):
    # plan.yml gives the summary read from the shards' headers by Range; site.yml gives the file: same plan.
    by_file = run_module(
        llama_cluster_plan, {"model_path": model["files"][0]["path"], "workers": workers(1, 3, 2), "ctx_size": 512}
    ).result
    by_summary = run_module(
        llama_cluster_plan, {"model": by_file["model"], "workers": workers(1, 3, 2), "ctx_size": 512}
    ).result
    assert by_summary["plan"] == by_file["plan"]


def test_model_and_model_path_exclude_each_other_and_a_summary_must_be_whole(run_module, model):
    both = run_module(llama_cluster_plan, {"model_path": "/x.gguf", "model": {"n_layer": 1}, "workers": workers(1)})
    assert both.failed and "mutually exclusive" in both.result["msg"]
    neither = run_module(llama_cluster_plan, {"workers": workers(1)})
    assert neither.failed and "one of the following is required" in neither.result["msg"]
    partial = run_module(llama_cluster_plan, {"model": {"n_layer": 8}, "workers": workers(1)})
    assert partial.failed and "model lacks embedding_bytes" in partial.result["msg"]


# Fit first, on by default (issue #22 item 5): a model that fits on the coordinator is served there with no worker.


def test_fit_first_by_default_serves_a_model_that_fits_on_the_coordinator_alone(run_module, model):
    args = {"model_path": model["files"][0]["path"], "workers": workers(4, 4, 4), "ctx_size": 512, "coordinator": "n1"}
    local = run_module(llama_cluster_plan, args).result
    plan = local["plan"]
    assert plan["local"] is True and plan["workers"] == [], plan
    assert (plan["rpc"], plan["devices"], plan["tensor_split"]) == ("", "none", "")
    assert plan["args"] == "--device none --n-gpu-layers 0" and "--rpc" not in plan["args"]
    assert local["explanation"].startswith("local: the whole model fits on n1 with its headroom")
    assert plan["table"][1].split()[:2] == ["n1", "local"]
    # Off: the fewest workers that fit, as before, and what llama-server is given names them.
    spread = run_module(llama_cluster_plan, {**args, "fit_first": False}).result["plan"]
    assert spread["local"] is False and spread["rpc"] == "10.0.0.2:50052"  # n1 keeps room for llama-server
    slots = model["block_count"] + 1  # one worker holds every layer and the output layer
    assert spread["args"] == f"--rpc 10.0.0.2:50052 --device RPC0 --tensor-split {slots} --n-gpu-layers all"
    # Strategy all asks for every worker.
    every = run_module(llama_cluster_plan, {**args, "strategy": "all"}).result["plan"]
    assert every["local"] is False and every["devices"] == "RPC0,RPC1,RPC2"


def test_fit_first_reads_the_coordinators_own_memory_when_no_worker_shares_its_host(run_module, model):
    args = {"model_path": model["files"][0]["path"], "workers": workers(4, 4), "ctx_size": 512, "coordinator": "c"}
    # Unknown memory: workers.
    assert run_module(llama_cluster_plan, args).result["plan"]["local"] is False
    figures = {"available": int(2.9 * GIB), "total": 8 * GIB}  # rounded down to 2.5 GiB (1/16 of the total)
    out = run_module(llama_cluster_plan, {**args, "coordinator_memory": figures}).result
    assert out["plan"]["local"] is True
    assert out["plan"]["table"][1].split()[:2] == ["c", "local"]
    # Too little there once rounded (the default headroom is 512 MiB): workers.
    tight = {"available": GIB // 2 + (40 << 20), "total": 8 * GIB}  # 552 MiB, rounded down to 512 MiB
    assert run_module(llama_cluster_plan, {**args, "coordinator_memory": tight}).result["plan"]["local"] is False


# Speculative decoding (issue #36): the draft read from its GGUF header, counted where it runs, in the arguments.


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("draft"), preset="tiny", shards=1, seed=6)


def test_a_draft_is_read_from_its_header_and_counted_on_its_worker(run_module, model, draft):
    path = draft["files"][0]["path"]
    args = {"model_path": model["files"][0]["path"], "workers": workers(4, 4), "ctx_size": 512, "strategy": "all"}
    speculative = {"types": ["draft-simple"], "draft_path": path, "draft_device": "n2", "draft_max": 6}
    out = run_module(llama_cluster_plan, {**args, "speculative": speculative}, check_mode=True).result
    plain = run_module(llama_cluster_plan, args, check_mode=True).result
    spec = out["plan"]["speculative"]
    assert spec["draft_weight_bytes"] <= draft["total_bytes"] and spec["draft_device"] == "RPC1"
    assert out["plan"]["args"] == (
        f"{plain['plan']['args']} --spec-type draft-simple --spec-draft-model {path} --spec-draft-device RPC1 "
        "--spec-draft-ngl all --spec-draft-n-max 6"
    )
    assert out["plan"]["workers"][1]["capacity"] == plain["plan"]["workers"][1]["capacity"] - spec["draft_bytes"]
    # draft_max/draft_min only matter to the draft model: n-gram speculation alone passes none of them.
    ngram = run_module(llama_cluster_plan, {**args, "speculative": {"types": ["ngram-mod"], "draft_max": 6}}).result
    assert ngram["plan"]["args"] == plain["plan"]["args"] + " --spec-type ngram-mod"


def test_a_missing_draft_fails_a_real_run_and_plans_nothing_in_check_mode(run_module, model):
    args = {
        "model_path": model["files"][0]["path"],
        "workers": workers(4),
        "ctx_size": 512,
        "speculative": {"types": ["draft-simple"], "draft_path": "/nonexistent/draft.gguf"},
    }
    failed = run_module(llama_cluster_plan, args)
    assert (
        failed.failed and failed.result["msg"] == "the draft model /nonexistent/draft.gguf does not exist on this host"
    )
    checked = run_module(llama_cluster_plan, args, check_mode=True)
    assert not checked.failed and "plan" not in checked.result
    assert "the draft model /nonexistent/draft.gguf is not on this host yet" in checked.result["msg"]
    bad = run_module(llama_cluster_plan, {**args, "speculative": {"types": ["draft-simple"]}})
    assert bad.failed and "draft-simple needs a draft model" in bad.result["msg"]


def test_the_record_holds_the_speculation_only_when_it_is_on(run_module, model, draft):
    deployment = {"service": "s", "url": "http://x:8080", "model_path": "/m.gguf", "replan_after": 60}
    args = {
        "model_path": model["files"][0]["path"],
        "workers": workers(4, 4),
        "ctx_size": 512,
        "deployment": deployment,
    }
    plain = run_module(llama_cluster_plan, args).result["record"]
    assert "speculative" not in plain["options"] and "speculative" not in plain["plan"]
    speculative = {"types": ["draft-simple"], "draft_path": draft["files"][0]["path"]}
    record = run_module(llama_cluster_plan, {**args, "speculative": speculative}).result["record"]
    saved = record["options"]["speculative"]
    assert saved["draft"]["n_layer"] == draft["block_count"] and saved["draft_device"] == "cpu"
    assert saved["types"] == ["draft-simple"] and saved["draft_path"] == draft["files"][0]["path"]


def test_a_draft_of_another_vocabulary_is_refused_before_any_change(run_module, model, tmp_path):
    """On the coordinator, the draft's and the model's headers read there: the token lists must agree as llama.cpp
    requires (tests/unit/plugins/module_utils/model/test_gguf_vocabulary.py has each rule)."""
    other = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(str(other), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "c", "d", "e", "f", "g"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    args = {
        "model_path": model["files"][0]["path"],
        "workers": workers(4),
        "ctx_size": 512,
        "speculative": {"types": ["draft-simple"], "draft_path": str(other)},
    }
    refused = run_module(llama_cluster_plan, args)
    assert refused.failed and refused.result["msg"] == (
        f"the draft model {other} cannot draft for the model: the tokenizers differ: the model's is 'llama', the "
        "draft's 'gpt2'"
    )
