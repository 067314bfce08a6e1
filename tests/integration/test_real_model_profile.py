"""The real model's proportions as the benchmark reports them, read from Gemma 3 270M Q4_K_M's own GGUF header."""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf
from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _model_profile as mp


def test_gemma_is_mostly_embedding_and_almost_nothing_of_it_is_cached(real_model):
    got = mp.profile(gguf.read_model(real_model)["tensors"], "gemma-3-270m-q4_k_m")
    assert (got["tensor_count"], got["n_layer"], got["n_embd"], got["n_vocab"]) == (236, 18, 640, 262144)
    assert got["embedding_bytes"] == 178_257_920 and got["embedding_share"] == pytest.approx(0.723, abs=1e-3)
    assert got["tied_output"] is True  # no output.weight: llama.cpp offloads a copy of the embedding
    # The token embedding is its only tensor over the 10 MiB cache threshold.
    assert got["small_tensors"] == 235 and got["warm_load_share"] == pytest.approx(0.277, abs=1e-3)
    assert got["logits_bytes"] == 1 << 20
    ref = mp.reference_profile()
    assert got["embedding_share"] > 30 * ref["embedding_share"] and got["warm_load_share"] > 10 * ref["warm_load_share"]
