"""A smaller draft model for speculative decoding, cut from a GGUF model: its first N blocks, with the model's own
token embeddings, output head, norms and tokenizer, so that its vocabulary is the model's token for token.

    python tools/draft_gguf.py MODEL.gguf --blocks N --out DRAFT.gguf

prints ``{"path", "blocks", "of", "tensors", "bytes", "vocabulary": {"count", "sha256"}}`` as JSON. Every metadata
key is copied (the ``gguf`` package's GGUFReader and GGUFWriter, as its own gguf_new_metadata script copies a file)
but ``<arch>.block_count``, which becomes N, an ``<arch>.*`` array with one entry per block (cut to N) and
``general.name`` (``NAME, first N of M blocks``); tensors of blocks N and beyond are left out, every other tensor is
copied byte for byte in its own type. The draft computes the model's first N blocks and then its output head: what
it predicts is a shallow guess of the model's next token, which is all a draft has to be. A split model is refused
(merge it with llama-gguf-split --merge first). Needs the ``gguf`` package (numpy).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import gguf

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / ".collections")]

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf_header  # noqa: E402

BLOCK = re.compile(r"^blk\.(\d+)\.")


def _field_value(field):
    """A metadata field as GGUFWriter.add_key_value takes it: (value, type, sub_type)."""
    kind = field.types[0]
    sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
    return field.contents(), kind, sub_type


def cut(model, blocks, out):
    """Write the draft of ``model``'s first ``blocks`` blocks to ``out``; returns what the command line prints.
    Raises ValueError for a split model or a block count out of range."""
    reader = gguf.GGUFReader(model)
    if "split.count" in reader.fields and int(reader.fields["split.count"].contents()) > 1:
        raise ValueError(f"{model} is one shard of a split model: merge it first (llama-gguf-split --merge)")
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    count_key = f"{arch}.block_count"
    total = int(reader.fields[count_key].contents())
    if not 0 < blocks < total:
        raise ValueError(f"--blocks must be from 1 to {total - 1} (the model has {total} blocks), got {blocks}")
    writer = gguf.GGUFWriter(out, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        value, kind, sub_type = _field_value(field)
        if field.name == count_key:
            value = blocks
        elif field.name == gguf.Keys.General.NAME:
            value = f"{value}, first {blocks} of {total} blocks"
        elif field.name.startswith(f"{arch}.") and isinstance(value, list) and len(value) == total:
            value = value[:blocks]  # one entry per block
        writer.add_key_value(field.name, value, kind, sub_type=sub_type)
    kept = [tensor for tensor in reader.tensors if not _beyond(tensor.name, blocks)]
    for tensor in kept:
        writer.add_tensor_info(
            tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in kept:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    vocabulary = gguf_header.vocabulary(gguf_header.read_model(out)) or {}
    return {
        "path": os.path.abspath(out),
        "blocks": blocks,
        "of": total,
        "tensors": len(kept),
        "bytes": sum(int(tensor.n_bytes) for tensor in kept),
        "vocabulary": {key: vocabulary.get(key) for key in ("count", "sha256")},
    }


def _beyond(name, blocks):
    match = BLOCK.match(name)
    return match is not None and int(match.group(1)) >= blocks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the GGUF model (one file)")
    parser.add_argument("--blocks", type=int, required=True, help="blocks the draft keeps, the first ones")
    parser.add_argument("--out", required=True, help="the draft's GGUF file")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(cut(args.model, args.blocks, args.out)))
    except ValueError as exc:
        print(f"draft_gguf: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
