# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""Model proportions: the seed's Qwen2.5-32B Q4_K_M from its shapes, a tied real-model layout, the synthetic presets."""

from __future__ import annotations

import pytest
import tiny_gguf

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf
from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _model_profile as mp

MIB = 1024 * 1024


def _table(preset):
    """A tiny_gguf preset's tensors as read_model gives them (ggml dims order), without writing a file."""
    return [
        {"name": t.name, "dims": list(reversed(t.shape)), "type": 0 if t.dtype == "float32" else 1, "bytes": t.nbytes}
        for t in tiny_gguf.PRESETS[preset].tensors
    ]


def test_the_32b_reference_has_the_seeds_size_and_llama_cpps_q4_k_m_mix():
    tensors = mp.q4_k_m_tensors(mp.QWEN25_32B)
    by_name = {t["name"]: t for t in tensors}
    assert len(tensors) == 771  # 64 x (9 + 3 biases) + token_embd, output_norm, output
    total = sum(t["bytes"] for t in tensors)
    assert total == 19_845_357_568  # the seed's "19.8 GB in five files"
    assert by_name["token_embd.weight"]["type"] == mp.Q4_K and by_name["output.weight"]["type"] == mp.Q6_K
    more = [i for i in range(64) if by_name[f"blk.{i}.attn_v.weight"]["type"] == mp.Q6_K]
    assert len(more) == 32 and more[:9] == [0, 1, 2, 3, 4, 5, 6, 7, 10] and more[-8:] == list(range(56, 64))
    assert [i for i in range(64) if by_name[f"blk.{i}.ffn_down.weight"]["type"] == mp.Q6_K] == more


def test_the_32b_reference_proportions():
    ref = mp.reference_profile()
    assert ref["embedding_bytes"] == 437_944_320 and ref["embedding_share"] == pytest.approx(0.0221, abs=1e-4)
    assert ref["tied_output"] is False
    # attn_k, attn_v, two norms and three biases per layer, and output_norm: the tensors the cache never keeps.
    assert ref["small_tensors"] == 64 * 7 + 1
    assert ref["small_bytes"] == 425_218_048
    # The untied embedding stays on the coordinator: the workers hold (and read per token) the rest.
    assert ref["offloaded_bytes"] == ref["weight_bytes"] - ref["embedding_bytes"] == ref["read_per_token_bytes"]
    assert ref["warm_load_share"] == pytest.approx(0.0219, abs=1e-4)
    assert (ref["logits_bytes"], ref["activation_bytes"], ref["n_layer"]) == (152064 * 4, 5120 * 4, 64)
    assert "19.8 GB" in ref["source"]


def test_a_tied_embedding_is_offloaded_as_the_output_matrix_and_cached():
    # Gemma 3 270M's layout: a 170 MiB Q8_0 embedding tied to the output, every other tensor small.
    embd = {"name": "token_embd.weight", "dims": [640, 262144], "type": 8}
    tensors = [{**embd, "bytes": gguf.tensor_bytes(8, embd["dims"])}]
    tensors += [{"name": f"blk.{i}.ffn_up.weight", "dims": [640, 2048], "type": 6, "bytes": 901_120} for i in range(18)]
    tensors.append({"name": "output_norm.weight", "dims": [640], "type": 0, "bytes": 2560})
    got = mp.profile(tensors, "gemma-like")
    assert got["tied_output"] is True
    assert got["embedding_bytes"] == 178_257_920
    assert got["read_per_token_bytes"] == got["offloaded_bytes"] == got["weight_bytes"]
    assert got["small_tensors"] == 19 and got["tensor_count"] == 20
    assert got["warm_load_bytes"] == 18 * 901_120 + 2560  # everything but the cached embedding copy
    assert (got["n_layer"], got["n_embd"], got["n_vocab"], got["logits_bytes"]) == (18, 640, 262144, 1 * MIB)
    lines = "\n".join(mp.comparison_lines(got, mp.reference_profile()))
    assert "| output matrix tied to the embedding | yes | no |" in lines
    assert "| tensors at or under the 10 MiB cache threshold | 19 of 20 | 449 of 771 |" in lines
    assert "a copy of it is offloaded" in lines


def test_the_cache_preset_is_as_cache_friendly_as_the_32b_model():
    # tiny_gguf's claim for `cache`: what a warm load sends again is about the 32B model's share.
    cache = mp.profile(_table("cache"), "cache")
    assert cache["tied_output"] is False
    assert cache["warm_load_share"] == pytest.approx(mp.reference_profile()["warm_load_share"], abs=0.005)
    assert "a copy of it is offloaded" not in "\n".join(mp.comparison_lines(cache, mp.reference_profile()))
    # `tiny` caches nothing: every tensor is under the threshold.
    tiny = mp.profile(_table("tiny"), "tiny")
    assert tiny["small_tensors"] == tiny["tensor_count"] and tiny["warm_load_share"] == 1.0


def test_profile_of_a_written_file_and_errors(tmp_path):
    made = tiny_gguf.generate(tmp_path, preset="tiny", shards=2)
    got = mp.profile(gguf.read_model(made["files"][0]["path"])["tensors"], "tiny")
    assert got["tensor_count"] == tiny_gguf.PRESETS["tiny"].tensor_count
    assert (got["n_layer"], got["n_embd"], got["n_vocab"]) == (8, 256, 1024)
    assert got["weight_bytes"] == tiny_gguf.PRESETS["tiny"].tensor_bytes
    with pytest.raises(ValueError, match="no token_embd"):
        mp.profile([t for t in _table("tiny") if t["name"] != "token_embd.weight"], "headless")
    with pytest.raises(ValueError, match="multiples of 32"):
        mp.q4_k_m_tensors({**mp.QWEN25_32B, "n_embd": 650})


def test_rows_that_are_no_whole_number_of_256_blocks_take_llama_cpps_fallback_types():
    tensors = {t["name"]: t for t in mp.q4_k_m_tensors(mp.QWEN25_05B)}
    assert tensors["token_embd.weight"]["type"] == mp.Q8_0  # tied: the output's Q6_K, fallen back
    assert tensors["blk.0.attn_q.weight"]["type"] == tensors["blk.5.ffn_gate.weight"]["type"] == mp.Q5_0
    assert tensors["blk.0.attn_v.weight"]["type"] == mp.Q8_0 and tensors["blk.3.attn_v.weight"]["type"] == mp.Q5_0
    assert tensors["blk.0.ffn_down.weight"]["type"] == mp.Q6_K  # 4864 = 19 x 256
    # The seed's model is all multiples of 256: nothing falls back.
    assert {t["type"] for t in mp.q4_k_m_tensors(mp.QWEN25_32B)} == {mp.F32, mp.Q4_K, mp.Q6_K}
