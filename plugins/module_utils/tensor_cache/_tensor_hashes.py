# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tensor hashes file that llama-server takes with ``--rpc-tensor-hashes`` (the llama_cpp role's patch
``rpc-tensor-hashes.patch``), so that a seeded load does not read the weights its workers already hold.

One line per tensor, ``HASH SIZE NAME``: the FNV-1a 64 of the tensor's bytes in 16 hex digits (the name of the
worker's cache file), its size in bytes and its GGUF name. Lines starting with ``#`` are comments to llama-server;
``# shard NAME SHA256`` lines name the shard files (and their sha256) the hashes were computed from, so that a file
made from other bytes is never passed (``stale``): llama-server trusts a hash it is given, and a worker whose cache
holds a file of that name would load those bytes.
"""

from __future__ import annotations

import re

FLAG = "--rpc-tensor-hashes"
HEADER = "# llama.cpp tensor hashes (llama-server --rpc-tensor-hashes): FNV-1a 64, size, tensor name"
_HASH = re.compile(r"^[0-9a-f]{16}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class HashesError(ValueError):
    """A tensor hashes file that does not parse, or entries that contradict each other."""


def text(tensors, shards):
    """The file's text: ``tensors`` ({name: (size, hash)}) sorted by name, after a ``# shard`` line per item of
    ``shards`` ({file name: sha256}). Raises HashesError for a malformed hash, size, name or sha256."""
    lines = [HEADER]
    for name in sorted(shards):
        if not _SHA256.match(str(shards[name])) or not name or any(c.isspace() for c in name):
            raise HashesError(f"shard {name!r}: needs a file name without spaces and a sha256 (64 hex digits)")
        lines.append(f"# shard {name} {shards[name]}")
    for name in sorted(tensors):
        size, digest = tensors[name]
        if not _HASH.match(str(digest)) or not isinstance(size, int) or size < 0:
            raise HashesError(f"tensor {name!r}: needs a size and a 16 hex digit FNV-1a, not {size!r}, {digest!r}")
        if not name or any(c.isspace() for c in name):
            raise HashesError(f"tensor name {name!r}: llama-server reads names without spaces")
        lines.append(f"{digest} {size} {name}")
    return "".join(f"{line}\n" for line in lines)


def parse(content):
    """``{"tensors": {name: (size, hash)}, "shards": {file name: sha256}}`` of a file's text, read as llama-server
    reads it (a tensor twice, or a line it would refuse, raises HashesError)."""
    tensors, shards = {}, {}
    for number, line in enumerate((content or "").splitlines(), start=1):
        fields = line.split()
        if line.startswith("#"):
            if len(fields) == 4 and fields[1] == "shard" and _SHA256.match(fields[3]):
                shards[fields[2]] = fields[3]
            continue
        if not line:
            continue
        if len(fields) != 3 or not _HASH.match(fields[0].lower()) or not fields[1].isdigit():
            raise HashesError(f"line {number}: expected HASH SIZE NAME, got {line!r}")
        if fields[2] in tensors:
            raise HashesError(f"line {number}: tensor {fields[2]} is listed twice")
        tensors[fields[2]] = (int(fields[1]), fields[0].lower())
    return {"tensors": tensors, "shards": shards}
