"""A split GGUF model of any size that takes no disk: a real header, then a hole where the tensor data would be.

For tests of what happens before a download: the plan before deploy reads the headers by HTTP Range and must refuse a
model that cannot fit - without reading a byte of tensor data, which here is all zeros from the file's hole. Nothing
can load such a model (its weights are zeros); it is never meant to be downloaded.

    python tools/sparse_gguf.py --out DIR [--prefix llamarpc-huge] [--layers 64] [--width 65536] [--shards 2]

prints ``{"files": [{"name", "path", "size", "data_offset"}], "tensor_bytes"}`` as JSON. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys

ALIGNMENT = 32
F16 = 1
_U32, _U64, _STRING = 4, 10, 8


def _string(text):
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _kv(key, vtype, value):
    payload = _string(value) if vtype == _STRING else struct.pack("<I" if vtype == _U32 else "<Q", value)
    return _string(key) + struct.pack("<I", vtype) + payload


def tensors(layers, width, vocab=32000):
    """(name, dims) in file order: token_embd, two width x width matrices per block, output."""
    out = [("token_embd.weight", [width, vocab])]
    for block in range(layers):
        out += [(f"blk.{block}.attn_q.weight", [width, width]), (f"blk.{block}.ffn_up.weight", [width, width])]
    return [*out, ("output.weight", [width, vocab])]


def write(out_dir, prefix="llamarpc-huge", layers=64, width=65536, shards=2):
    """Write ``shards`` sparse files of a llama of ``layers`` blocks; returns what the command line prints."""
    every = tensors(layers, width)
    per = -(-len(every) // shards)
    groups = [every[i : i + per] for i in range(0, len(every), per)]
    os.makedirs(out_dir, exist_ok=True)
    files = []
    for index, group in enumerate(groups):
        kvs = [
            ("split.no", _U32, index),
            ("split.count", _U32, len(groups)),
            ("split.tensors.count", _U32, len(every)),
        ]
        if index == 0:
            kvs = [
                ("general.architecture", _STRING, "llama"),
                ("general.name", _STRING, prefix),
                ("llama.block_count", _U32, layers),
                ("llama.embedding_length", _U32, width),
                ("llama.feed_forward_length", _U32, width),
                ("llama.attention.head_count", _U32, 64),
                ("llama.attention.head_count_kv", _U32, 8),
                ("llama.context_length", _U32, 4096),
                *kvs,
            ]
        infos, offset = b"", 0
        for name, dims in group:
            infos += _string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            infos += struct.pack("<IQ", F16, offset)
            size = dims[0] * dims[1] * 2
            offset += -(-size // ALIGNMENT) * ALIGNMENT
        head = b"GGUF" + struct.pack("<IQQ", 3, len(group), len(kvs)) + b"".join(_kv(*kv) for kv in kvs) + infos
        data_offset = -(-len(head) // ALIGNMENT) * ALIGNMENT
        name = f"{prefix}-{index + 1:05d}-of-{len(groups):05d}.gguf"
        path = os.path.join(out_dir, name)
        with open(path, "wb") as handle:
            handle.write(head + b"\0" * (data_offset - len(head)))
            handle.truncate(data_offset + offset)
        files.append({"name": name, "path": path, "size": data_offset + offset, "data_offset": data_offset})
    return {"files": files, "tensor_bytes": sum(dims[0] * dims[1] * 2 for _name, dims in every)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--prefix", default="llamarpc-huge")
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--width", type=int, default=65536)
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args(argv)
    json.dump(write(args.out, args.prefix, args.layers, args.width, args.shards), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
