# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read the header of a GGUF file (metadata and tensor table), standard library only.

This file runs on managed hosts, which do not have the ``gguf`` package (nor numpy): it reads only what the
planner needs and never the tensor data.  The unit tests check it against the ``gguf`` package (``GGUFReader``
and ``GGML_QUANT_SIZES``) on real files, so the two cannot drift apart silently.

Layout (``ggml/include/gguf.h``, versions 2 and 3, little-endian)::

    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | kv[n_kv] | tensor_info[n_tensors] | pad | data
    kv          = string key | u32 type | value
    tensor_info = string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset

The tokenizer's token list (``tokenizer.ggml.tokens``) is hashed while it is read (``vocabulary``), so that a draft
model for speculative decoding can be compared with its target without keeping either list: ``vocabulary_problem``
applies llama.cpp's own rule (``common/speculative.cpp``, ``common_speculative_are_compatible``).
"""

from __future__ import annotations

import hashlib
import os
import re
import struct

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types.
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING = 8
_ARRAY = 9

# ggml type id -> (elements per block, bytes per block) (ggml/src/ggml.c type_traits; gguf.GGML_QUANT_SIZES).
GGML_BLOCKS = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    18: (256, 98),  # IQ3_XXS
    19: (256, 50),  # IQ1_S
    20: (32, 18),  # IQ4_NL
    21: (256, 110),  # IQ3_S
    22: (256, 82),  # IQ2_S
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    29: (256, 56),  # IQ1_M
    30: (1, 2),  # BF16
    34: (256, 54),  # TQ1_0
    35: (256, 66),  # TQ2_0
    39: (32, 17),  # MXFP4
}

#: The tokenizer's token list.
TOKENS_KEY = "tokenizer.ggml.tokens"
#: llama.cpp's rule for a draft's vocabulary (``common/speculative.cpp``): the same tokenizer type, the same BOS and EOS
#: handling, token counts at most SPEC_VOCAB_MAX_SIZE_DIFFERENCE apart (a family's larger models often pad the list to
#: a rounder size) and the same token texts from SPEC_VOCAB_CHECK_START_TOKEN_ID up to the shorter list's end.
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
#: Hex digits kept of each prefix digest (64 bits: 129 of them per model).
PREFIX_DIGITS = 16

# PREFIX-00001-of-00005.gguf
SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class GGUFError(Exception):
    """The file is not a GGUF file this reader understands."""


class _Cursor:
    """Sequential little-endian reads from a binary file, with the path in every error."""

    def __init__(self, handle, path):
        self.handle = handle
        self.path = path
        self.position = 0

    def take(self, size):
        data = self.handle.read(size)
        if len(data) != size:
            raise GGUFError(f"{self.path}: truncated GGUF header (wanted {size} bytes at {self.position})")
        self.position += size
        return data

    def unpack(self, layout):
        return struct.unpack(layout, self.take(struct.calcsize(layout)))[0]

    def string(self):
        size = self.unpack("<Q")
        if size > 1 << 24:
            raise GGUFError(f"{self.path}: implausible string length {size} in the GGUF header")
        return self.take(size).decode("utf-8", errors="replace")

    def value(self, vtype):
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type = self.unpack("<I")
            count = self.unpack("<Q")
            if item_type in _SCALARS:
                layout = _SCALARS[item_type]
                width = struct.calcsize(layout)
                raw = self.take(width * count)
                return list(struct.unpack("<" + layout[1:] * count, raw)) if count else []
            return [self.value(item_type) for index in range(count)]
        raise GGUFError(f"{self.path}: unknown GGUF value type {vtype}")


def _token_list(cursor, keep):
    """The token list read from its array's item type on (each string hashed as stored, its u64 length and bytes), and
    its ``vocabulary`` fingerprint: ``count``, ``sha256`` of every token, and ``prefix_start`` with ``prefix_digests``,
    the digests of tokens[SPEC_VOCAB_CHECK_START_TOKEN_ID:m] for each m from ``prefix_start`` to ``count`` (the prefixes
    llama.cpp may compare with a list up to SPEC_VOCAB_MAX_SIZE_DIFFERENCE shorter). The value is the list when
    ``keep`` (or a short one), else its length."""
    item_type = cursor.unpack("<I")
    count = cursor.unpack("<Q")
    if item_type != _STRING:
        raise GGUFError(f"{cursor.path}: {TOKENS_KEY} is not an array of strings")
    start = max(SPEC_VOCAB_CHECK_START_TOKEN_ID, count - SPEC_VOCAB_MAX_SIZE_DIFFERENCE)
    whole, tail, digests, tokens = hashlib.sha256(), hashlib.sha256(), [], []
    for index in range(count + 1):
        if index >= start:
            digests.append(tail.copy().hexdigest()[:PREFIX_DIGITS])
        if index == count:
            break
        size = cursor.unpack("<Q")
        if size > 1 << 24:
            raise GGUFError(f"{cursor.path}: implausible string length {size} in the GGUF header")
        raw = struct.pack("<Q", size) + cursor.take(size)
        whole.update(raw)
        if index >= SPEC_VOCAB_CHECK_START_TOKEN_ID:
            tail.update(raw)
        if keep or count <= 64:
            tokens.append(raw[8:].decode("utf-8", errors="replace"))
    fingerprint = {"count": count, "sha256": whole.hexdigest(), "prefix_start": start, "prefix_digests": digests}
    return (tokens if keep or count <= 64 else count), fingerprint


def vocabulary(model):
    """What decides whether a draft model may speculate for a target (``vocabulary_problem``): the token list's
    fingerprint (``read_model``/``merge_headers``' ``vocabulary``) with the tokenizer's type and its BOS/EOS ids and
    flags from the metadata; None for a model without a token list."""
    found = model.get("vocabulary")
    if not found:
        return None
    metadata = model.get("metadata") or {}
    keys = {"model": "model", "bos": "bos_token_id", "eos": "eos_token_id", "add_bos": "add_bos_token"}
    keys["add_eos"] = "add_eos_token"
    return {**found, **{name: metadata.get(f"tokenizer.ggml.{key}") for name, key in keys.items()}}


def vocabulary_problem(target, draft):
    """Why ``draft``'s vocabulary cannot draft for ``target``'s (both ``vocabulary``), as llama.cpp's check would find
    at load time; empty when it can. A BOS/EOS value missing from either file is not compared."""
    if not target or not draft:
        return "a model has no token list (tokenizer.ggml.tokens) in its GGUF header"
    if target["model"] != draft["model"]:
        return f"the tokenizers differ: the model's is {target['model']!r}, the draft's {draft['model']!r}"
    for flag, token in (("add_bos", "bos"), ("add_eos", "eos")):
        for name in (flag, token):
            if name == token and target[flag] is False:
                continue  # a token the tokenizer does not add is not compared
            if target[name] is not None and draft[name] is not None and target[name] != draft[name]:
                return f"the tokenizers' {name} differ: the model's is {target[name]!r}, the draft's {draft[name]!r}"
    if abs(target["count"] - draft["count"]) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return (
            f"the model has {target['count']} tokens and the draft {draft['count']}: more than "
            f"{SPEC_VOCAB_MAX_SIZE_DIFFERENCE} apart"
        )
    shared = min(target["count"], draft["count"])
    if shared <= SPEC_VOCAB_CHECK_START_TOKEN_ID:
        return ""
    ours, theirs = (found["prefix_digests"][shared - found["prefix_start"]] for found in (target, draft))
    if ours != theirs:
        return (
            f"the token lists differ: tokens {SPEC_VOCAB_CHECK_START_TOKEN_ID} to {shared - 1}, which llama.cpp "
            "compares, are not the same (by their sha256)"
        )
    return ""


def tensor_bytes(ggml_type, dims):
    """Bytes of a tensor's data, from its type and shape."""
    if ggml_type not in GGML_BLOCKS:
        raise GGUFError(f"unknown ggml tensor type {ggml_type}")
    block, size = GGML_BLOCKS[ggml_type]
    elements = 1
    for dim in dims:
        elements *= dim
    if elements % block:
        raise GGUFError(f"tensor of {elements} elements is not a whole number of type {ggml_type} blocks ({block})")
    return elements // block * size


def read_header(path, keep_arrays=False):
    """Metadata and tensor table of one GGUF file.

    Returns ``{"version", "metadata": {key: value}, "tensors": [{"name", "dims", "type", "offset", "bytes"}],
    "header_bytes", "data_offset", "vocabulary"}``. Large arrays (the tokenizer's vocabulary) are replaced by their
    length unless ``keep_arrays``; ``vocabulary`` is the token list's fingerprint (``_token_list``), None without one.
    """
    with open(path, "rb") as handle:
        return parse_header(handle, path, keep_arrays)


def parse_header(handle, label, keep_arrays=False):
    """``read_header`` of any binary stream read from its start (a file, or a reader of HTTP Range requests); only
    the header is read, in order, and nothing after it. ``label`` names the file in errors.

    ``header_bytes`` is where the tensor table ends; ``data_offset`` where the tensor data starts (aligned to
    ``general.alignment``, 32 by default).
    """
    cursor = _Cursor(handle, label)
    if cursor.take(4) != MAGIC:
        raise GGUFError(f"{label}: not a GGUF file (bad magic)")
    version = cursor.unpack("<I")
    if version not in (2, 3):
        raise GGUFError(f"{label}: GGUF version {version} is not supported (2 and 3 are)")
    n_tensors = cursor.unpack("<Q")
    n_kv = cursor.unpack("<Q")
    metadata, fingerprint = {}, None
    for _index in range(n_kv):
        key = cursor.string()
        vtype = cursor.unpack("<I")
        if key == TOKENS_KEY and vtype == _ARRAY:
            value, fingerprint = _token_list(cursor, keep_arrays)
        else:
            value = cursor.value(vtype)
        if isinstance(value, list) and not keep_arrays and len(value) > 64:
            value = len(value)
        metadata[key] = value
    tensors = []
    for _index in range(n_tensors):
        name = cursor.string()
        n_dims = cursor.unpack("<I")
        dims = [cursor.unpack("<Q") for dim in range(n_dims)]
        ggml_type = cursor.unpack("<I")
        offset = cursor.unpack("<Q")
        tensors.append(
            {
                "name": name,
                "dims": dims,
                "type": ggml_type,
                "offset": offset,
                "bytes": tensor_bytes(ggml_type, dims),
            }
        )
    end = cursor.position
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        raise GGUFError(f"{label}: general.alignment must be a positive integer, got {alignment!r}")
    return {
        "version": version,
        "metadata": metadata,
        "tensors": tensors,
        "header_bytes": end,
        "data_offset": -(-end // alignment) * alignment,
        "vocabulary": fingerprint,
    }


def split_paths(first_path):
    """Every shard path of a model given shard 1 (or the only file), as llama.cpp derives them."""
    directory, name = os.path.split(first_path)
    match = SPLIT_NAME.match(name)
    if not match:
        return [first_path]
    count = int(match.group("count"))
    if int(match.group("no")) != 1:
        raise GGUFError(f"{first_path}: the model path must be shard 1 of the split (…-00001-of-{count:05d}.gguf)")
    return [
        os.path.join(directory, f"{match.group('prefix')}-{number:05d}-of-{count:05d}.gguf")
        for number in range(1, count + 1)
    ]


def read_model(first_path):
    """Metadata of shard 1 and the tensor table of every shard of a (possibly split) model (and shard 1's token list
    fingerprint, ``vocabulary``, when it has one)."""
    paths = split_paths(first_path)
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        raise GGUFError(f"missing shard(s) of {first_path}: {', '.join(missing)}")
    return merge_headers(paths, [read_header(path) for path in paths])


def merge_headers(paths, headers):
    """The model as ``read_model`` returns it, from the headers of its shards in order (shard 1 first)."""
    tensors = [tensor for header in headers for tensor in header["tensors"]]
    model = {"paths": list(paths), "metadata": headers[0]["metadata"], "tensors": tensors}
    if headers[0].get("vocabulary"):
        model["vocabulary"] = headers[0]["vocabulary"]
    return model
