"""tools/seed_gguf.py: the seed's Qwen2.5-32B Q4_K_M on paper, and the planner against it at full scale.

The planner runs through the functions the llama_cluster_plan module (and so plan.yml and site.yml) calls on it:
``round_memory`` on the gathered workers, ``summarize`` of the GGUF headers, ``plan`` with the role's defaults
(headroom 512M, worker overhead 128M, strategy fewest, node1 the coordinator and a worker too, like the seed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
import seed_gguf
from seed_paper import vms

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf_header
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as planner

GIB = 1 << 30
#: Bytes of tensor data of Qwen2.5-32B-Instruct Q4_K_M (the sum of the 771 tensors' sizes; see the tool's docstring).
SEED_TENSOR_BYTES = 19_845_357_568
#: The seed's context: llama-server's default (-c 0) is the model's trained context, 32768 for Qwen2.5.
SEED_CTX = 32768
#: The role's defaults (llama_coordinator_headroom, llama_coordinator_worker_overhead).
HEADROOM, OVERHEAD = 512 << 20, 128 << 20


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    out = seed_gguf.write(tmp_path_factory.mktemp("seed"))
    return {"out": out, "summary": planner.summarize(gguf_header.read_model(out["files"][0]["path"]))}


def plan(seed, workers, ctx_size=SEED_CTX, **options):
    options.setdefault("fit_first", True)
    options = {"headroom": HEADROOM, "overhead": OVERHEAD, "coordinator": "node1", **options}
    return planner.plan(seed["summary"], planner.round_memory(workers), ctx_size, **options)


def test_headers_only_with_the_seeds_shapes_types_and_size(seed):
    out = seed["out"]
    assert [entry["name"] for entry in out["files"]] == [
        f"qwen2.5-32b-instruct-q4_k_m-{index:05d}-of-00005.gguf" for index in range(1, 6)
    ]
    assert all(entry["header_bytes"] < 64 << 10 for entry in out["files"])  # no tensor data
    assert out["tensors"] == 771
    assert out["tensor_bytes"] == SEED_TENSOR_BYTES  # 19.85 GB, 18.48 GiB
    tensors = {}
    for entry in out["files"]:
        for tensor in gguf_header.read_header(entry["path"])["tensors"]:
            kind = gguf.GGMLQuantizationType(tensor["type"]).name
            tensors[tensor["name"]] = (tensor["dims"], kind, tensor["bytes"])
    assert sum(size for _shape, _kind, size in tensors.values()) == SEED_TENSOR_BYTES
    assert tensors["token_embd.weight"][:2] == ([5120, 152064], "Q4_K")
    assert tensors["output.weight"][:2] == ([5120, 152064], "Q6_K")
    assert tensors["blk.0.ffn_down.weight"][:2] == ([27648, 5120], "Q6_K")
    assert tensors["blk.8.ffn_down.weight"][:2] == ([27648, 5120], "Q4_K")
    assert tensors["blk.10.attn_v.weight"][:2] == ([5120, 1024], "Q6_K")
    assert tensors["blk.63.ffn_up.weight"][:2] == ([5120, 27648], "Q4_K")
    q6 = sorted(name for name, (_shape, kind, _size) in tensors.items() if kind == "Q6_K")
    assert len(q6) == 32 + 32 + 1  # attn_v and ffn_down of the use_more_bits layers, and the output matrix
    summary = seed["summary"]
    assert (summary["n_layer"], summary["n_embd"], summary["n_head"], summary["n_head_kv"]) == (64, 5120, 40, 8)
    assert summary["weight_bytes"] == SEED_TENSOR_BYTES


def test_use_more_bits_is_llama_quants():
    layers = [il for il in range(64) if seed_gguf.mp.use_more_bits(il, 64)]
    assert layers[:9] == [0, 1, 2, 3, 4, 5, 6, 7, 10] and layers[-9:] == [55, 56, 57, 58, 59, 60, 61, 62, 63]
    assert len(layers) == 32


def test_six_8gb_nodes_fit_as_the_seed_did(seed):
    result = plan(seed, vms(6, 8))
    assert not result["local"]
    assert 1 < len(result["workers"]) <= 6
    assert all(row["headroom"] >= 0 for row in result["workers"])
    assert sorted(layer for row in result["workers"] for layer in row["layers"]) == list(range(64))
    # Every node, as the seed ran it (strategy all), fits too.
    assert len(plan(seed, vms(6, 8), strategy="all")["workers"]) == 6


def test_five_6gb_nodes_are_refused_saying_what_is_missing(seed):
    with pytest.raises(planner.PlanError) as refused:
        plan(seed, vms(5, 6))
    message = str(refused.value)
    assert message.startswith("the model does not fit: it needs 4.6 GiB more")
    assert "for ctx_size 32768 x parallel 1" in message
    assert "5 reachable worker(s) offer 22.1 GiB" in message and "node1 can hold 4.0 GiB" in message
    assert "lower the context size" in message


def test_five_6gb_nodes_hold_it_at_a_4096_context(seed):
    """The refusal above is the KV cache of the full context (8 GiB at 32768 tokens): at the role's default
    ctx_size 4096 (1 GiB) the five nodes hold the model."""
    result = plan(seed, vms(5, 6), ctx_size=4096)
    assert len(result["workers"]) == 5 and all(row["headroom"] >= 0 for row in result["workers"])


def test_fit_first_serves_on_the_coordinator_alone_when_it_fits(seed):
    # A 32 GB coordinator holds all 18.5 GiB and the KV cache: no RPC hop at all, whatever the workers offer.
    pool = vms(6, 8)
    pool[0] = vms(1, 32)[0]
    result = plan(seed, pool)
    assert result["local"] and result["workers"] == [] and result["rpc"] == ""
    assert result["need_bytes"] == SEED_TENSOR_BYTES + 64 * result["kv_bytes_per_layer"] + OVERHEAD
    # A 24 GB one does not at 32768 tokens (18.5 GiB + 8 GiB): workers, the fewest that fit.
    pool[0] = vms(1, 24)[0]
    assert not plan(seed, pool)["local"]


def test_the_command_line_prints_the_files(tmp_path):
    done = subprocess.run(
        [sys.executable, str(Path(seed_gguf.__file__)), "--out", str(tmp_path)], capture_output=True, check=True
    )
    out = json.loads(done.stdout)
    assert len(out["files"]) == 5 and out["tensor_bytes"] == SEED_TENSOR_BYTES


def test_the_draft_is_qwen25_05b_with_llama_cpps_fallback_types(tmp_path):
    """--draft: Qwen2.5-0.5B-Instruct Q4_K_M, one header-only file; its 896-wide rows are no whole number of 256-element
    blocks, so Q4_K becomes Q5_0 and Q6_K (and the tied embedding, quantised as the output) Q8_0, as llama-quant.cpp's
    tensor_type_fallback does; ffn_down's 4864-wide rows keep their k-quants."""
    done = subprocess.run(
        [sys.executable, str(Path(seed_gguf.__file__)), "--out", str(tmp_path), "--draft"],
        capture_output=True,
        check=True,
    )
    out = json.loads(done.stdout)
    assert [entry["name"] for entry in out["files"]] == ["qwen2.5-0.5b-instruct-q4_k_m.gguf"]
    assert out["files"][0]["header_bytes"] < 64 << 10 and out["tensors"] == 24 * 12 + 2
    assert out["tensor_bytes"] == 391_859_712
    tensors = {t["name"]: t for t in gguf_header.read_header(out["files"][0]["path"])["tensors"]}
    kinds = {name: gguf.GGMLQuantizationType(t["type"]).name for name, t in tensors.items()}
    embedding = "token_embd.weight"
    assert "output.weight" not in tensors and (kinds[embedding], tensors[embedding]["dims"]) == ("Q8_0", [896, 151936])
    assert (kinds["blk.0.attn_q.weight"], kinds["blk.0.ffn_up.weight"], kinds["blk.0.attn_v.weight"]) == (
        "Q5_0",
        "Q5_0",
        "Q8_0",  # use_more_bits' Q6_K, fallen back
    )
    assert (kinds["blk.0.ffn_down.weight"], kinds["blk.3.ffn_down.weight"]) == ("Q6_K", "Q4_K")
    summary = planner.summarize(gguf_header.read_model(out["files"][0]["path"]))
    assert (summary["n_layer"], summary["n_embd"]) == (24, 896)
