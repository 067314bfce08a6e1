# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each shard's last verification, for node exporter's textfile collector (written by gguf_shard_place).

A run hashes only some shards (``verify: quick`` hashes those whose size or mtime moved): a shard not hashed now keeps
the time and result of its last verification, read back from the file; a shard this host no longer holds is left out.
"""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _textfile

VERIFIED = "llamarpc_shard_verified_timestamp_seconds"
OK = "llamarpc_shard_verify_ok"
CORRUPT = "llamarpc_shard_corrupt_found_total"


def families(previous_text, held, verified, corrupt, now):
    """The families for the shards ``held`` (names): ``verified`` were hashed now and good, ``corrupt`` were found
    corrupt now (and repaired or fetched again); the others keep what ``previous_text`` (the file as it was) says."""
    before = _textfile.parse(previous_text)

    def last(name):
        return {labels["shard"]: value for labels, value in before.get(name, []) if "shard" in labels}

    stamps, results, counts = last(VERIFIED), last(OK), last(CORRUPT)
    for shard in verified:
        stamps[shard], results[shard] = now, 1
    for shard in corrupt:
        stamps[shard], results[shard] = now, 0
        counts[shard] = counts.get(shard, 0) + 1
    order = [shard for shard in held if shard in stamps]
    family = _textfile.family
    return [
        family(
            VERIFIED,
            "gauge",
            "When the shard was last hashed against its sha256 (Unix time).",
            [({"shard": s}, stamps[s]) for s in order],
        ),  # fmt: skip
        family(
            OK,
            "gauge",
            "1 when the shard's last verification found it whole, 0 when it found it corrupt "
            "(then repaired or fetched again).",
            [({"shard": s}, int(results.get(s, 1))) for s in order],
        ),  # fmt: skip
        family(
            CORRUPT,
            "counter",
            "Verifications that found the shard corrupt.",
            [({"shard": s}, int(counts.get(s, 0))) for s in held],
        ),  # fmt: skip
    ]


def write(path, held, verified, corrupt, now):
    """Rewrite ``path`` (a ``.prom`` file) with the shards' records; returns the text written."""
    return _textfile.write(path, families(_textfile.read(path), held, verified, corrupt, now))
