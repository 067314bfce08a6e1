"""The seed's model on paper: the GGUF headers of Qwen2.5-32B-Instruct Q4_K_M, split in five, without tensor data.

Every tensor has the shape and the ggml type it has in that file, so the tensor table (offsets, byte sizes) is the
real one, and the collection's planner and performance model can be run against the seed's case at full scale; the
files hold nothing but their headers (a few KiB each), so nothing can load them.

Shapes and types: the collection's own table of that model, ``_model_profile.q4_k_m_tensors(QWEN25_32B)`` (the one
the benchmark's reference profile uses): 64 blocks, width 5120, FFN 27648, 40 heads, 8 KV heads (head size 128),
vocabulary 152064, untied output matrix, Q/K/V biases; the Q4_K_M rules of llama.cpp's ``src/llama-quant.cpp``
(``llama_tensor_get_type_impl``): output Q6_K, untied token_embd Q4_K, attn_v and ffn_down Q6_K in the
``use_more_bits`` layers (32 of 64), every other matrix Q4_K, norms and biases F32.

Split: ``llama-gguf-split --split-max-size 4G`` (4 * 10^9 bytes per shard) gives five files, as the seed's download.

``--draft`` writes a draft for it instead: Qwen2.5-0.5B-Instruct Q4_K_M (``_model_profile.QWEN25_05B``: 24 blocks,
width 896, FFN 4864, 14 heads, 2 KV heads, vocabulary 151936, output tied to the embedding), one file of 392 MB of
tensors; its width is no multiple of 256, so most matrices take llama.cpp's fallback types (Q5_0, Q8_0).

    python tools/seed_gguf.py --out DIR [--prefix qwen2.5-32b-instruct-q4_k_m] [--draft]

prints ``{"files": [{"name", "path", "header_bytes"}], "tensor_bytes", "tensors", "types"}`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _model_profile as mp  # noqa: E402

SHAPE = mp.QWEN25_32B
PREFIX = "qwen2.5-32b-instruct-q4_k_m"
DRAFT_SHAPE = mp.QWEN25_05B
DRAFT_PREFIX = "qwen2.5-0.5b-instruct-q4_k_m"
SPLIT_MAX_SIZE = 4 * 1000**3
#: general.file_type of a Q4_K_M file (llama_ftype LLAMA_FTYPE_MOSTLY_Q4_K_M).
FILE_TYPE_Q4_K_M = 15


def write(out_dir, prefix=PREFIX, split_max_size=SPLIT_MAX_SIZE, shape=None):
    """Write the headers of ``shape`` (default ``SHAPE``, the seed's model; or ``DRAFT_SHAPE``); returns what the
    command line prints."""
    shape = shape or SHAPE
    os.makedirs(out_dir, exist_ok=True)
    writer = GGUFWriter(os.path.join(out_dir, f"{prefix}.gguf"), shape["architecture"], split_max_size=split_max_size)
    writer.add_name(f"{shape['name']} (headers only, llamarpc.cluster tools/seed_gguf.py)")
    writer.add_file_type(FILE_TYPE_Q4_K_M)
    writer.add_block_count(shape["n_layer"])
    writer.add_context_length(32768)
    writer.add_embedding_length(shape["n_embd"])
    writer.add_feed_forward_length(shape["n_ff"])
    writer.add_head_count(shape["n_head"])
    writer.add_head_count_kv(shape["n_head_kv"])
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(shape["n_vocab"])
    types = {}
    every = mp.q4_k_m_tensors(shape)
    for tensor in every:
        ggml_type = Q(tensor["type"])
        types[ggml_type.name] = types.get(ggml_type.name, 0) + tensor["bytes"]
        shape = list(reversed(tensor["dims"]))
        writer.add_tensor_info(tensor["name"], shape, np.dtype(np.float32), tensor["bytes"], raw_dtype=ggml_type)
    total = sum(types.values())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    paths = writer.format_shard_names(writer.path)
    files = [{"name": path.name, "path": str(path), "header_bytes": os.path.getsize(path)} for path in paths]
    return {"files": files, "tensor_bytes": total, "tensors": len(every), "types": types}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--prefix")
    parser.add_argument("--draft", action="store_true", help="the draft, Qwen2.5-0.5B-Instruct Q4_K_M, instead")
    args = parser.parse_args(argv)
    shape, prefix = (DRAFT_SHAPE, DRAFT_PREFIX) if args.draft else (SHAPE, PREFIX)
    json.dump(write(args.out, args.prefix or prefix, shape=shape), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
