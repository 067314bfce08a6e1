# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""FNV-1a 64, the hash llama.cpp's RPC tensor cache names its files by (ggml-rpc.cpp ``fnv_hash``).

Standard library only and no Ansible imports: the module ``tensor_cache_seed`` uses it, and the
``llama_rpc_worker`` role installs this file beside the cache verifier (``llamarpc_cache_verify.py``), which imports
it on the host without the collection.

Two ways to hash: in Python (5-6 MB/s of CPU, for small data and as a fallback), or with the C++ helper
``llamarpc-fnv1a`` the worker role builds (about 780 MB/s): ``PROGRAM FILE...`` prints ``<hash>  FILE`` per file, and
``PROGRAM -r OFFSET LENGTH FILE`` hashes that byte range of the file (a tensor inside a GGUF shard); an unreadable
file or range prints ``-  FILE``.
"""

from __future__ import annotations

import re
import subprocess

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK = (1 << 64) - 1
# A cache file's name: the hash as 16 lower-case hex digits (ggml-rpc.cpp: "%016" PRIx64).
NAME = re.compile(r"[0-9a-f]{16}")
CHUNK = 1 << 20
BATCH = 64  # paths per run of the hasher


class HashError(Exception):
    """A range could not be hashed (unreadable, shorter than asked, or the helper failed)."""


def fnv1a(data, value=FNV_OFFSET):
    """FNV-1a 64 of ``data`` continued from ``value`` (ggml-rpc.cpp fnv_hash)."""
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & MASK
    return value


def fnv1a_file(path, offset=0, length=None):
    """FNV-1a 64 of a file's bytes (or of ``length`` bytes from ``offset``), in Python."""
    value = FNV_OFFSET
    left = length
    with open(path, "rb") as handle:
        handle.seek(offset)
        while left is None or left > 0:
            chunk = handle.read(CHUNK if left is None else min(CHUNK, left))
            if not chunk:
                break
            value = fnv1a(chunk, value)
            if left is not None:
                left -= len(chunk)
    if left:
        raise HashError(f"{path}: {length} bytes from {offset} asked, the file ends {left} bytes earlier")
    return value


def hash_with(program, paths):
    """{path: hash as 16 hex digits or None (unreadable)} from ``program``'s "<hash>  <path>" lines."""
    found = {}
    for start in range(0, len(paths), BATCH):
        batch = paths[start : start + BATCH]
        # rc 1 only says that a file could not be read; that file's line is "-  path".
        # The verifier runs this on the host without Ansible: no run_command there.
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            [program, *batch], capture_output=True, text=True, check=False
        )
        for line in proc.stdout.splitlines():
            digest, _sep, path = line.partition("  ")
            found[path] = digest if NAME.fullmatch(digest) else None
        if proc.returncode not in (0, 1) or any(path not in found for path in batch):
            raise RuntimeError(f"{program} failed with {proc.returncode}: {proc.stderr.strip()}")
    return found


def hash_ranges(ranges, program=None):
    """Hashes (16 hex digits) of ``(path, offset, length)`` byte ranges, in order: with ``program`` (the C++ helper's
    ``-r``), else in Python. Raises HashError for a range that cannot be read whole."""
    if not program:
        return [f"{fnv1a_file(path, offset, length):016x}" for path, offset, length in ranges]
    digests = []
    for start in range(0, len(ranges), BATCH):
        batch = ranges[start : start + BATCH]
        argv = [program]
        for path, offset, length in batch:
            argv += ["-r", str(offset), str(length), path]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)  # pylint: disable=ansible-bad-function
        lines = proc.stdout.splitlines()
        if proc.returncode not in (0, 1) or len(lines) != len(batch):
            raise HashError(f"{program} failed with {proc.returncode}: {proc.stderr.strip()}")
        for (path, offset, length), line in zip(batch, lines, strict=True):
            digest = line.partition("  ")[0]
            if not NAME.fullmatch(digest):
                raise HashError(f"{path}: {length} bytes from {offset} cannot be read: {proc.stderr.strip()}")
            digests.append(digest)
    return digests
