"""The seed's model on paper: the GGUF headers of Qwen2.5-32B-Instruct Q4_K_M, split in five, without tensor data.

Every tensor has the shape and the ggml type it has in that file, so the tensor table (offsets, byte sizes) is the
real one, and the collection's planner and performance model can be run against the seed's case at full scale; the
files hold nothing but their headers (a few KiB each), so nothing can load them.

Shapes: Qwen2.5-32B (``qwen2``): 64 blocks, width 5120, FFN 27648, 40 heads, 8 KV heads (head size 128), vocabulary
152064, untied output matrix, Q/K/V biases.

Types: the Q4_K_M rules of llama.cpp's ``src/llama-quant.cpp`` (``llama_tensor_get_type_impl``; the copy vendored by
llama-cpp-python 0.3.36, the collection's pinned tree):

* ``output.weight``: Q6_K (the output tensor, any K-quant type but Q8_0);
* ``token_embd.weight``: Q4_K (untied embeddings take the file type);
* ``attn_v.weight`` and ``ffn_down.weight``: Q6_K in the layers where ``use_more_bits(i, 64)`` holds (``i < 8``,
  ``i >= 56``, or ``(i - 8) % 3 == 2``: 32 of the 64 layers), Q4_K elsewhere;
* every other matrix Q4_K; norms and biases F32 (1-D tensors are never quantised).

Split: ``llama-gguf-split --split-max-size 4G`` (4 * 10^9 bytes per shard) gives five files, as the seed's download.

    python tools/seed_gguf.py --out DIR [--prefix qwen2.5-32b-instruct-q4_k_m]

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
from gguf.constants import GGML_QUANT_SIZES

ARCH = "qwen2"
PREFIX = "qwen2.5-32b-instruct-q4_k_m"
N_LAYER = 64
N_EMBD = 5120
N_FF = 27648
N_HEAD = 40
N_HEAD_KV = 8
N_VOCAB = 152064
HEAD = N_EMBD // N_HEAD
SPLIT_MAX_SIZE = 4 * 1000**3
#: general.file_type of a Q4_K_M file (llama_ftype LLAMA_FTYPE_MOSTLY_Q4_K_M).
FILE_TYPE_Q4_K_M = 15


def use_more_bits(i_layer, n_layer):
    """llama-quant.cpp's ``use_more_bits``: the layers whose attn_v and ffn_down Q4_K_M keeps at Q6_K."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def tensors(n_layer=N_LAYER):
    """(name, shape as ggml's ne = [columns, rows], ggml type) in the converter's file order."""
    kv = N_HEAD_KV * HEAD
    out = [("token_embd.weight", [N_EMBD, N_VOCAB], Q.Q4_K)]
    for il in range(n_layer):
        more = Q.Q6_K if use_more_bits(il, n_layer) else Q.Q4_K
        out += [
            (f"blk.{il}.attn_norm.weight", [N_EMBD], Q.F32),
            (f"blk.{il}.attn_q.weight", [N_EMBD, N_EMBD], Q.Q4_K),
            (f"blk.{il}.attn_q.bias", [N_EMBD], Q.F32),
            (f"blk.{il}.attn_k.weight", [N_EMBD, kv], Q.Q4_K),
            (f"blk.{il}.attn_k.bias", [kv], Q.F32),
            (f"blk.{il}.attn_v.weight", [N_EMBD, kv], more),
            (f"blk.{il}.attn_v.bias", [kv], Q.F32),
            (f"blk.{il}.attn_output.weight", [N_EMBD, N_EMBD], Q.Q4_K),
            (f"blk.{il}.ffn_norm.weight", [N_EMBD], Q.F32),
            (f"blk.{il}.ffn_gate.weight", [N_EMBD, N_FF], Q.Q4_K),
            (f"blk.{il}.ffn_up.weight", [N_EMBD, N_FF], Q.Q4_K),
            (f"blk.{il}.ffn_down.weight", [N_FF, N_EMBD], more),
        ]
    return [*out, ("output_norm.weight", [N_EMBD], Q.F32), ("output.weight", [N_EMBD, N_VOCAB], Q.Q6_K)]


def nbytes(dims, ggml_type):
    """Bytes of a tensor of ggml shape ``dims`` and type ``ggml_type`` (gguf's block sizes)."""
    block, size = GGML_QUANT_SIZES[ggml_type]
    elements = int(np.prod(dims))
    if dims[0] % block:
        raise ValueError(f"a row of {dims[0]} elements is not a whole number of {ggml_type.name} blocks")
    return elements // block * size


def write(out_dir, prefix=PREFIX, split_max_size=SPLIT_MAX_SIZE):
    """Write the headers; returns what the command line prints."""
    os.makedirs(out_dir, exist_ok=True)
    writer = GGUFWriter(os.path.join(out_dir, f"{prefix}.gguf"), ARCH, split_max_size=split_max_size)
    writer.add_name("Qwen2.5 32B Instruct (headers only, llamarpc.cluster tools/seed_gguf.py)")
    writer.add_file_type(FILE_TYPE_Q4_K_M)
    writer.add_block_count(N_LAYER)
    writer.add_context_length(32768)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(N_VOCAB)
    types = {}
    total = 0
    every = tensors()
    for name, dims, ggml_type in every:
        size = nbytes(dims, ggml_type)
        total += size
        types[ggml_type.name] = types.get(ggml_type.name, 0) + size
        writer.add_tensor_info(name, list(reversed(dims)), np.dtype(np.float32), size, raw_dtype=ggml_type)
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
    parser.add_argument("--prefix", default=PREFIX)
    args = parser.parse_args(argv)
    json.dump(write(args.out, args.prefix), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
