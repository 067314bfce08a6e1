# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A worker's last tensor cache seeding, for node exporter's textfile collector (written by tensor_cache_seed).

Each seeding replaces the whole file: what it wrote into the cache, by source (``local``: this host's shard, ``peer``:
read over SFTP from the host that holds the shard, ``url``: fetched by Range from the model's source), the plan's
tensors by state (``present``: already cached, ``written``, ``unavailable``: not seeded, llama-server sends them at the
load) and when it ended. Every source and state has its sample, 0 included, so that a query by label never finds a
hole where a seeding wrote nothing.
"""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _textfile

BYTES = "llamarpc_tensor_cache_seeded_bytes"
FILES = "llamarpc_tensor_cache_seeded_files"
TENSORS = "llamarpc_tensor_cache_seed_tensors"
FINISHED = "llamarpc_tensor_cache_seed_timestamp_seconds"
SOURCES = ("local", "peer", "url")
STATES = ("present", "written", "unavailable")


def families(rows, now):
    """The families for a seeding's tensor rows (each with ``state``, ``source``, ``hash``, ``size``): a cache file is
    counted once however many tensors share its bytes (two tensors of identical bytes, one file)."""
    files = {source: {} for source in SOURCES}
    for row in rows:
        if row.get("state") == "written" and row.get("source") in files and row.get("hash"):
            files[row["source"]][row["hash"]] = row["size"]
    states = {state: sum(row.get("state") == state for row in rows) for state in STATES}
    family = _textfile.family
    return [
        family(
            BYTES,
            "gauge",
            "Bytes the worker's last tensor cache seeding wrote into the cache, by source "
            "(local shard, peer's SFTP export, model URL).",
            [({"source": source}, sum(files[source].values())) for source in SOURCES],
        ),
        family(
            FILES,
            "gauge",
            "Cache files the worker's last tensor cache seeding wrote, by source.",
            [({"source": source}, len(files[source])) for source in SOURCES],
        ),
        family(
            TENSORS,
            "gauge",
            "The plan's tensors over 10 MiB for this worker at its last seeding, by state "
            "(present: already cached, written, unavailable: sent by llama-server at the load).",
            [({"state": state}, states[state]) for state in STATES],
        ),
        family(FINISHED, "gauge", "When the worker's last tensor cache seeding ended (Unix time).", [({}, now)]),
    ]


def write(path, rows, now):
    """Replace ``path`` (a ``.prom`` file) with the seeding's record; returns the text written."""
    return _textfile.write(path, families(rows, now))
