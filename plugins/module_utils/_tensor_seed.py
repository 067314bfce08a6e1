# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Seeding a worker's RPC tensor cache from local bytes, before llama-server loads a plan (issue 22 item 1).

What a worker will be offered (``seed_lists``): llama-server offers every weight tensor over 10 MiB by its FNV-1a hash
(``SET_TENSOR_HASH``) to the device its layer is on. Layers go to devices by the planner's own mapping
(``_cluster_plan.assign_layers``, llama.cpp's ``load_tensors`` with ``-ngl all``) and tensors to layers by
``_cluster_plan.tensor_slot`` (the token embedding stays on the coordinator, but a tied output sends its bytes to the
output layer's device). Device ``i`` is the ``i``-th endpoint of ``--rpc``.

The seeder (``seed``): for each tensor, its hash is computed from the source bytes; a cache file of that name with the
right size and hash is left alone; otherwise the bytes are copied into a temporary name in the cache directory,
fsynced, hashed again (a source that changed under the copy is refused) and renamed to ``<16 hex digits>``, and the
directory is fsynced. A temporary file a killed seeder left behind is removed on the next run (the worker's verifier
would remove it too: its name is not a hash).
"""

from __future__ import annotations

import os

from ._cluster_plan import PlanError, assign_layers, is_tied, summarize, tensor_slot
from ._fnv1a import HashError, hash_ranges
from ._gguf_header import merge_headers, read_header, split_paths
from ._model_profile import CACHE_THRESHOLD_BYTES

TEMP_PREFIX = ".seed-"
COPY_CHUNK = 8 << 20


class SeedError(Exception):
    """Seeding cannot go on; the message says what to do."""


def model_tensors(first_path):
    """Every tensor of a (possibly split) GGUF: name, the shard holding it, its absolute offset there and its size;
    and the number of repeating layers. ``first_path`` is the model (shard 1 of a split)."""
    paths = split_paths(first_path)
    headers = [read_header(path) for path in paths]
    tensors = [
        {
            "name": tensor["name"],
            "file": path,
            "offset": header["data_offset"] + tensor["offset"],
            "size": tensor["bytes"],
        }
        for path, header in zip(paths, headers, strict=True)
        for tensor in header["tensors"]
    ]
    return tensors, summarize(merge_headers(paths, headers))["n_layer"]


def _as_list(value, kind):
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",") if item.strip()]
    return [kind(item) for item in value]


def seed_lists(tensors, n_layer, rpc, tensor_split, threshold=CACHE_THRESHOLD_BYTES):
    """{endpoint: [tensor dicts]}: the tensors over ``threshold`` each endpoint of ``rpc`` is offered, in file order.

    ``rpc`` and ``tensor_split`` as a plan gives them (comma-separated strings or lists, one proportion per endpoint).
    """
    endpoints = _as_list(rpc, str)
    split = _as_list(tensor_split, float)
    if not endpoints:
        raise PlanError("the plan has no RPC endpoint: a local plan has no worker cache to seed")
    if len(split) != len(endpoints):
        raise PlanError(f"{len(endpoints)} RPC endpoint(s) but {len(split)} tensor split proportion(s)")
    if len(set(endpoints)) != len(endpoints):
        raise PlanError(f"an RPC endpoint is listed twice: {','.join(endpoints)}")
    devices = assign_layers(n_layer, split)
    tied = is_tied(tensors)
    lists = {endpoint: [] for endpoint in endpoints}
    for tensor in tensors:
        if tensor["size"] <= threshold:
            continue
        slot = tensor_slot(tensor["name"], n_layer, tied)
        if slot is not None:
            lists[endpoints[devices[slot]]].append(dict(tensor))
    return lists


def _fsync_dir(path):
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _copy_range(source, offset, size, target):
    """``size`` bytes of ``source`` from ``offset`` into the open descriptor ``target`` (in the kernel when it can)."""
    with open(source, "rb") as handle:
        done = 0
        while done < size:
            want = min(COPY_CHUNK, size - done)
            try:
                copied = os.copy_file_range(handle.fileno(), target, want, offset + done)
            except OSError:
                copied = None
            if not copied:  # not supported across these file systems (or 0 at an early end): plain reads
                handle.seek(offset + done)
                data = handle.read(want)
                if not data:
                    raise SeedError(f"{source}: ends before byte {offset + size} (the tensor's end)")
                copied = os.write(target, data)
            done += copied


def stale_temporaries(cache_dir):
    """Temporary files a killed seeder left in ``cache_dir``."""
    try:
        return sorted(os.path.join(cache_dir, name) for name in os.listdir(cache_dir) if name.startswith(TEMP_PREFIX))
    except FileNotFoundError:
        return []


def plan_seed(entries, cache_dir, hasher=None):
    """Each entry with its ``hash`` and ``state``: ``present`` (a cache file of that name, size and hash is there) or
    ``missing`` (to write). Reads the sources and existing cache files, writes nothing."""
    try:
        hashes = hash_ranges([(e["file"], e["offset"], e["size"]) for e in entries], hasher)
    except (HashError, OSError) as exc:
        raise SeedError(f"cannot read a tensor's bytes: {exc}") from exc
    planned, existing = [], []
    for entry, digest in zip(entries, hashes, strict=True):
        row = dict(entry, hash=digest, state="missing")
        path = os.path.join(cache_dir, digest)
        if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) == entry["size"]:
            existing.append((row, path))
        planned.append(row)
    if existing:
        try:
            found = hash_ranges([(path, 0, row["size"]) for row, path in existing], hasher)
        except (HashError, OSError):
            found = [None] * len(existing)
        for (row, path), digest in zip(existing, found, strict=True):
            if digest == os.path.basename(path):
                row["state"] = "present"
    return planned


def write_one(row, cache_dir, hasher=None):
    """Write one tensor's cache file atomically: temporary name, fsync, hash check, rename, fsync of the directory."""
    final = os.path.join(cache_dir, row["hash"])
    temporary = os.path.join(cache_dir, f"{TEMP_PREFIX}{row['hash']}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            _copy_range(row["file"], row["offset"], row["size"], descriptor)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        written = hash_ranges([(temporary, 0, row["size"])], hasher)[0]
        if written != row["hash"]:
            raise SeedError(
                f"{row['file']}: the bytes of {row['name']} hash to {written} after the copy, {row['hash']} before: "
                "the shard changed while it was read; run again once it is in place"
            )
        os.chmod(temporary, 0o644)
        os.rename(temporary, final)
    except OSError as exc:
        raise SeedError(f"cannot write {final}: {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    _fsync_dir(cache_dir)


def check_room(rows, cache_dir):
    """Refuse before writing when the cache's file system cannot take the missing tensors."""
    need = sum(row["size"] for row in rows if row["state"] == "missing")
    if not need:
        return
    stat = os.statvfs(cache_dir)
    free = stat.f_bavail * stat.f_frsize
    if need > free:
        raise SeedError(
            f"{cache_dir}: the plan's tensors need {need} bytes more and {free} are free; free space there or "
            "lower the cache cap's share of the disk"
        )


def seed(entries, cache_dir, hasher=None, check_mode=False):
    """Seed ``cache_dir`` with ``entries`` (``seed_lists``' dicts). Returns the rows (``state`` ``present``,
    ``written`` or, in check mode, ``missing``) and the stale temporaries removed (or to remove)."""
    if not os.path.isdir(cache_dir):
        raise SeedError(f"{cache_dir} is not a directory: the worker role creates the cache directory first")
    stale = stale_temporaries(cache_dir)
    rows = plan_seed(entries, cache_dir, hasher)
    if check_mode:
        return rows, stale
    for path in stale:
        os.unlink(path)
    check_room(rows, cache_dir)
    done = set()
    for row in rows:
        if row["state"] != "missing":
            continue
        if row["hash"] not in done:  # the same bytes twice (a tied copy) make one file
            write_one(row, cache_dir, hasher)
            done.add(row["hash"])
        row["state"] = "written"
    return rows, stale


def locate(entries, source_dirs=None):
    """(entries found on this host, entries not found). With ``source_dirs`` each tensor's shard is looked up by its
    file name in those directories, in order (this host's copy of the shard), instead of at the path the list names;
    a copy too short to hold the tensor does not count."""
    found, missing = [], []
    for entry in entries:
        name = os.path.basename(entry["file"])
        candidates = [os.path.join(d, name) for d in source_dirs] if source_dirs else [entry["file"]]
        path = next(
            (c for c in candidates if os.path.isfile(c) and os.path.getsize(c) >= entry["offset"] + entry["size"]),
            None,
        )
        if path is None:
            missing.append(dict(entry, hash=None, state="unavailable"))
        else:
            found.append(dict(entry, file=path))
    return found, missing


def given_tensors(tensors):
    """The ``tensors`` option checked: dicts with name, file, offset and size."""
    checked = []
    for index, tensor in enumerate(tensors):
        try:
            checked.append(
                {
                    "name": str(tensor["name"]),
                    "file": str(tensor["file"]),
                    "offset": int(tensor["offset"]),
                    "size": int(tensor["size"]),
                }
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SeedError(f"tensors[{index}] needs name, file, offset and size (integers): {exc!r}") from exc
    return checked


ARGUMENT_SPEC = {
    "model": {"type": "path"},
    "tensors": {"type": "list", "elements": "dict"},
    "rpc": {"type": "list", "elements": "str"},
    "tensor_split": {"type": "list", "elements": "float"},
    "endpoint": {"type": "str"},
    "cache_dir": {"type": "path"},
    "source_dirs": {"type": "list", "elements": "path"},
    "hasher": {"type": "path"},
}
MODULE_RULES = {
    "required_one_of": [["model", "tensors"]],
    "mutually_exclusive": [["model", "tensors"]],
    "required_by": {"model": ["rpc", "tensor_split"]},
}


def _entries(params):
    """This endpoint's tensors (None: not in the plan), or {endpoint: tensors} when there is no cache to seed."""
    if params["tensors"] is not None:
        if not params["cache_dir"]:
            raise SeedError("tensors are given: cache_dir is needed to seed them")
        return given_tensors(params["tensors"])
    tensors, n_layer = model_tensors(params["model"])
    lists = seed_lists(tensors, n_layer, params["rpc"], params["tensor_split"])
    if not params["cache_dir"]:
        return lists
    if not params["endpoint"]:
        raise SeedError("endpoint is needed with model and cache_dir: which endpoint's tensors to seed")
    return lists.get(params["endpoint"])


def run_module(module):
    """The module ``tensor_cache_seed``: its result dict (fails through ``module.fail_json``)."""
    params = module.params
    hasher = params["hasher"]
    if hasher and not os.access(hasher, os.X_OK):
        module.warn(f"{hasher} is not there: hashing in Python, over 100 times slower")
        hasher = None
    result = {"changed": False, "tensors": [], "written": 0, "present": 0, "unavailable": 0, "bytes_written": 0}
    result["removed_temporaries"] = []
    try:
        entries = _entries(params)
        if isinstance(entries, dict):
            counts = ", ".join(f"{e} {len(rows)}" for e, rows in entries.items())
            return dict(result, lists=entries, msg=f"tensors over 10 MiB per endpoint: {counts}")
        if entries is None:
            return dict(result, msg=f"{params['endpoint']} is not in the plan ({','.join(params['rpc'])})")
        found, missing = locate(entries, params["source_dirs"])
        rows, stale = seed(found, params["cache_dir"], hasher, module.check_mode)
    except (PlanError, SeedError, OSError, ValueError) as exc:
        module.fail_json(msg=f"tensor cache seeding failed: {exc}")
    to_write = [row for row in rows if row["state"] != "present"]
    result.update(
        changed=bool(to_write or stale),
        tensors=rows + missing,
        written=len({row["hash"] for row in to_write}),
        present=len(rows) - len(to_write),
        unavailable=len(missing),
        bytes_written=sum({row["hash"]: row["size"] for row in to_write}.values()),
        removed_temporaries=stale,
        msg=(
            f"{len(entries)} tensor(s) over 10 MiB to seed: {len(rows) - len(to_write)} already cached, "
            f"{len(to_write)} {'to write' if module.check_mode else 'written'}, {len(missing)} without a local shard "
            "(llama-server sends those)"
        ),
    )
    if module._diff:
        present = sorted(row["hash"] for row in rows if row["state"] == "present")
        wanted = sorted({row["hash"] for row in rows})
        result["diff"] = {
            "before": "".join(f"{name}\n" for name in sorted(set(present) | {os.path.basename(s) for s in stale})),
            "after": "".join(f"{name}\n" for name in wanted),
            "before_header": f"{params['cache_dir']} (the plan's tensors)",
            "after_header": f"{params['cache_dir']} (the plan's tensors)",
        }
    return result
