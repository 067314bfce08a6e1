# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A model's proportions as a cluster sees them, from its tensor table: the benchmark's model, and reference models
built from their published shapes (the seed's Qwen2.5-32B Q4_K_M).

What the proportions decide (llama-server with ``-ngl all`` over RPC workers, the pinned llama.cpp):

* The token embedding stays on the coordinator's CPU; each token reads one row of it. A model whose output matrix
  is tied to the embedding (no ``output.weight``) gets a copy of it on the output layer's device, read whole per
  token. So the bytes every token reads are all the weights but an untied embedding (``read_per_token_bytes``), and
  they are what is offloaded to the workers (``offloaded_bytes``).
* The RPC tensor cache keeps only tensors over 10 MiB (``ggml-rpc.cpp``: ``HASH_THRESHOLD``, weights only): the
  offloaded tensors at or under it cross the coordinator's link again on every load, cache warm or not
  (``warm_load_bytes``).
* Each generated token sends the hidden state (``activation_bytes``, f32) to each worker and brings the logits
  (``logits_bytes``, f32 per vocabulary entry) back from the output layer's worker; the output matrix (``head_bytes``,
  the embedding when tied) computes them, once per verified position in a speculative pass.

Standard library only; tensors as ``_gguf_header.read_model`` gives them (``name``, ``dims`` in ggml order, ``type``,
``bytes``).
"""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.model._gguf_header import tensor_bytes

#: llama.cpp's RPC tensor cache threshold (``HASH_THRESHOLD`` in ggml-rpc.cpp): only larger tensors are cached.
CACHE_THRESHOLD_BYTES = 10 * 1024 * 1024
#: Bytes per logit and per hidden-state channel on the wire (f32).
F32_BYTES = 4

# ggml type ids (ggml.h) the Q4_K_M rules below use.
F32, Q5_0, Q8_0, Q4_K, Q6_K = 0, 6, 8, 12, 14
QK_K = 256
#: llama-quant.cpp's ``tensor_type_fallback``: a matrix whose rows (``ne0``) are not a whole number of 256-element
#: blocks takes a 32-element block type instead of its k-quant.
FALLBACK = {Q4_K: Q5_0, Q6_K: Q8_0}

#: Qwen2.5-32B (the seed's model; Qwen/Qwen2.5-32B-Instruct config.json): hidden 5120, 64 layers, FFN 27648,
#: 40 query heads and 8 key/value heads of 128, vocabulary 152064, output not tied, biases on q, k and v.
QWEN25_32B = {
    "name": "Qwen2.5-32B-Instruct Q4_K_M",
    "architecture": "qwen2",
    "n_layer": 64,
    "n_embd": 5120,
    "n_ff": 27648,
    "n_head": 40,
    "n_head_kv": 8,
    "head_dim": 128,
    "n_vocab": 152064,
    "tied": False,
    "qkv_bias": True,
}

#: Qwen2.5-0.5B (a draft for the seed's model; Qwen/Qwen2.5-0.5B-Instruct config.json): hidden 896, 24 layers, FFN
#: 4864, 14 query heads and 2 key/value heads of 64, vocabulary 151936 (the 32B's 152064 less 128 padding entries: the
#: same token list, within llama.cpp's 128 for a draft), output tied to the embedding, biases on q, k and v. Its width
#: is no multiple of 256: most of its matrices take llama.cpp's fallback types (``FALLBACK``).
QWEN25_05B = {
    "name": "Qwen2.5-0.5B-Instruct Q4_K_M",
    "architecture": "qwen2",
    "n_layer": 24,
    "n_embd": 896,
    "n_ff": 4864,
    "n_head": 14,
    "n_head_kv": 2,
    "head_dim": 64,
    "n_vocab": 151936,
    "tied": True,
    "qkv_bias": True,
}

SOURCE_QWEN25_32B = (
    "computed from its shapes (hidden 5120, 64 layers, FFN 27648, 40 query and 8 key/value heads of 128, vocabulary "
    "152064, output not tied, q/k/v biases) with the Q4_K_M type rules of the pinned llama.cpp (src/llama-quant.cpp: "
    "Q4_K, output Q6_K, attn_v and ffn_down Q6_K in half the layers); its total agrees with the seed's 19.8 GB"
)


def use_more_bits(layer, n_layer):
    """llama-quant.cpp's ``use_more_bits``: the first and last eighth of the layers and every third in between."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def q4_k_m_tensors(shape):
    """The tensor table llama.cpp's Q4_K_M gives a dense llama-like model of ``shape`` (keys as in ``QWEN25_32B``).

    Rules of the pinned llama.cpp (``llama_tensor_get_type_impl``): every matrix Q4_K, the output matrix (and a tied
    embedding) Q6_K, ``attn_v`` and ``ffn_down`` Q6_K in the ``use_more_bits`` layers, vectors (norms, biases) F32;
    then ``tensor_type_fallback``: a matrix whose rows are no whole number of 256-element blocks takes Q5_0 for Q4_K
    and Q8_0 for Q6_K (``FALLBACK``; the output rule gives a tied embedding that is so Q8_0 directly, the same).
    Widths must be multiples of 32.
    """
    n_embd, n_ff, n_vocab = shape["n_embd"], shape["n_ff"], shape["n_vocab"]
    q_width = shape["n_head"] * shape["head_dim"]
    kv_width = shape["n_head_kv"] * shape["head_dim"]
    if any(width % 32 for width in (n_embd, n_ff, q_width)):
        raise ValueError("q4_k_m_tensors needs widths that are multiples of 32")
    n_layer = shape["n_layer"]
    table = [("token_embd.weight", [n_embd, n_vocab], Q6_K if shape["tied"] else Q4_K)]
    for layer in range(n_layer):
        more = Q6_K if use_more_bits(layer, n_layer) else Q4_K
        blk = f"blk.{layer}."
        table += [
            (blk + "attn_norm.weight", [n_embd], F32),
            (blk + "attn_q.weight", [n_embd, q_width], Q4_K),
            (blk + "attn_k.weight", [n_embd, kv_width], Q4_K),
            (blk + "attn_v.weight", [n_embd, kv_width], more),
            (blk + "attn_output.weight", [q_width, n_embd], Q4_K),
            (blk + "ffn_norm.weight", [n_embd], F32),
            (blk + "ffn_gate.weight", [n_embd, n_ff], Q4_K),
            (blk + "ffn_up.weight", [n_embd, n_ff], Q4_K),
            (blk + "ffn_down.weight", [n_ff, n_embd], more),
        ]
        if shape.get("qkv_bias"):
            table += [(blk + f"attn_{x}.bias", [w], F32) for x, w in (("q", q_width), ("k", kv_width), ("v", kv_width))]
    table.append(("output_norm.weight", [n_embd], F32))
    if not shape["tied"]:
        table.append(("output.weight", [n_embd, n_vocab], Q6_K))
    table = [(n, d, FALLBACK[t] if t in FALLBACK and d[0] % QK_K else t) for n, d, t in table]
    return [{"name": n, "dims": d, "type": t, "bytes": tensor_bytes(t, d)} for n, d, t in table]


def profile(tensors, name="", threshold=CACHE_THRESHOLD_BYTES):
    """The proportions of a model from its tensor table (see the module's description for what each one means)."""
    by_name = {t["name"]: t for t in tensors}
    embd = by_name.get("token_embd.weight")
    if embd is None:
        raise ValueError(f"{name or 'the model'} has no token_embd.weight")
    n_embd, n_vocab = (list(embd["dims"]) + [1])[:2]
    tied = "output.weight" not in by_name
    weights = sum(t["bytes"] for t in tensors)
    offloaded = [t for t in tensors if t is not embd] + ([embd] if tied else [])
    offloaded_bytes = sum(t["bytes"] for t in offloaded)
    small = [t for t in tensors if t["bytes"] <= threshold]
    warm = sum(t["bytes"] for t in offloaded if t["bytes"] <= threshold)
    layers = {t["name"].split(".")[1] for t in tensors if t["name"].startswith("blk.")}
    return {
        "name": name,
        "n_layer": len(layers),
        "n_embd": n_embd,
        "n_vocab": n_vocab,
        "tensor_count": len(tensors),
        "weight_bytes": weights,
        "embedding_bytes": embd["bytes"],
        "embedding_share": embd["bytes"] / weights,
        "head_bytes": embd["bytes"] if tied else by_name["output.weight"]["bytes"],
        "tied_output": tied,
        "threshold_bytes": threshold,
        "small_tensors": len(small),
        "small_bytes": sum(t["bytes"] for t in small),
        "small_share": sum(t["bytes"] for t in small) / weights,
        "offloaded_bytes": offloaded_bytes,
        "read_per_token_bytes": offloaded_bytes,
        "warm_load_bytes": warm,
        "warm_load_share": warm / offloaded_bytes if offloaded_bytes else 0.0,
        "activation_bytes": n_embd * F32_BYTES,
        "logits_bytes": n_vocab * F32_BYTES,
    }


def reference_profile():
    """The seed's Qwen2.5-32B Q4_K_M, from its shapes (``SOURCE_QWEN25_32B`` says how)."""
    return {**profile(q4_k_m_tensors(QWEN25_32B), QWEN25_32B["name"]), "source": SOURCE_QWEN25_32B}


def _mb(value):
    return f"{value / 1e6:,.1f} MB"


def _pct(value):
    return f"{100 * value:.1f}%"


def _both(model, reference, cell):
    return cell(model), cell(reference)


def comparison_lines(model, reference):
    """The two profiles side by side as a Markdown section, with what the differences mean for the benchmark."""
    pair = (model, reference)
    rows = [
        ("weights", *_both(*pair, lambda p: _mb(p["weight_bytes"]))),
        ("layers", *_both(*pair, lambda p: p["n_layer"])),
        (
            "token embedding (share of the weights)",
            *_both(*pair, lambda p: f"{_mb(p['embedding_bytes'])} ({_pct(p['embedding_share'])})"),
        ),
        ("output matrix tied to the embedding", *_both(*pair, lambda p: "yes" if p["tied_output"] else "no")),
        (
            "tensors at or under the 10 MiB cache threshold",
            *_both(*pair, lambda p: f"{p['small_tensors']} of {p['tensor_count']}"),
        ),
        (
            "their bytes (share of the weights)",
            *_both(*pair, lambda p: f"{_mb(p['small_bytes'])} ({_pct(p['small_share'])})"),
        ),
        ("weights on the workers (read per token)", *_both(*pair, lambda p: _mb(p["offloaded_bytes"]))),
        (
            "sent again on a warm load (share of the workers' weights)",
            *_both(*pair, lambda p: f"{_mb(p['warm_load_bytes'])} ({_pct(p['warm_load_share'])})"),
        ),
        ("logits per generated token (f32)", *_both(*pair, lambda p: f"{p['logits_bytes'] / 1024:,.0f} KiB")),
        (
            "logits per token / weights read per token",
            *_both(*pair, lambda p: f"{p['logits_bytes'] / p['read_per_token_bytes']:.3%}"),
        ),
    ]
    ours, theirs = (p["logits_bytes"] / p["read_per_token_bytes"] for p in pair)
    tied = "; tied to the output matrix, a copy of it is offloaded to the output layer's worker, read whole per token"
    lines = [
        "",
        f"## The model's proportions against {reference['name']}",
        "",
        f"| | {model['name']} (this run) | {reference['name']} |",
        "|---|---|---|",
    ]
    lines += [f"| {label} | {a} | {b} |" for label, a, b in rows]
    return lines + [
        "",
        f"{reference['name']}: {reference.get('source', '')}.",
        "",
        f"- A warm reload sends {_pct(model['warm_load_share'])} of the workers' weights again (the 32B model: "
        f"{_pct(reference['warm_load_share'])}): the tensors at or under the threshold, which no worker caches.",
        f"- The token embedding is {_pct(model['embedding_share'])} of the weights (the 32B model: "
        f"{_pct(reference['embedding_share'])}){tied if model['tied_output'] else ''}.",
        f"- Each generated token brings {model['logits_bytes'] / 1024:,.0f} KiB of logits back from the output layer's "
        f"worker (the 32B model: {reference['logits_bytes'] / 1024:,.0f} KiB): per byte of weights read, "
        f"{ours / theirs:,.0f} times as much traffic on the coordinator's link.",
    ]
