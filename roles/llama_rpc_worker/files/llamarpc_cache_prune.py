# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Keep llama.cpp's RPC tensor cache under a size cap (upstream never evicts).

Usage: llamarpc_cache_prune.py DIRECTORY MAX_BYTES [--keep FILE] [--metrics FILE]

Removes the least recently used files (by the later of access and modification time) until the directory's
files total at most MAX_BYTES. A tensor removed while the worker runs is only a cache miss: the coordinator
then sends it again.

With --keep, FILE lists the seeded tensors of the plan in force (tensor_cache_seed's keep_file: the first
whitespace-separated field of each line is a cache file's name). Files not listed go first; listed ones only when
the cache is still over the cap without any other file, and the output then says so. A missing or unreadable FILE
means no file is kept.

With --metrics, FILE (a *.prom file in node exporter's textfile directory) gets the cache's bytes, files and cap after
the pruning, written whole by the collection's ``_textfile.py`` (copied beside this file with ``_atomic.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time


def cache_files(directory):
    """(last use, size, path) of every regular file directly in ``directory``."""
    entries = []
    try:
        scan = os.scandir(directory)
    except FileNotFoundError:
        return entries
    with scan:
        for entry in scan:
            if entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                entries.append((max(st.st_atime, st.st_mtime), st.st_size, entry.path))
    return entries


def read_keep(path):
    """The file names ``path`` lists (first field of each line), or (None, why) when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return {line.split()[0] for line in handle if line.split()}, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, getattr(exc, "strerror", None) or str(exc)


def prune_keeping(directory, max_bytes, keep=frozenset()):
    """Remove least recently used files until the total is <= max_bytes, those named in ``keep`` last.

    Returns (removed paths, bytes left, kept files removed, bytes over the cap once every other file was gone)."""
    entries = sorted(cache_files(directory), key=lambda e: (os.path.basename(e[2]) in keep, e))
    total = sum(size for _used, size, _path in entries)
    removed, kept_removed, over = [], [], 0
    for _used, size, path in entries:
        if total <= max_bytes:
            break
        if os.path.basename(path) in keep:
            if not kept_removed:
                over = total - max_bytes
            kept_removed.append(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        total -= size
        removed.append(path)
    return removed, total, kept_removed, over


def prune(directory, max_bytes):
    """Remove least recently used files until the total is <= max_bytes; returns (removed paths, bytes left)."""
    return prune_keeping(directory, max_bytes)[:2]


def parse(argv):
    """(DIRECTORY, MAX_BYTES text, keep FILE or None, metrics FILE or None), or None for a command line that does not
    fit the usage."""
    args, options = [], {"--keep": None, "--metrics": None}
    rest = iter(argv[1:])
    for arg in rest:
        name, equals, value = arg.partition("=")
        if name in options:
            options[name] = value if equals else next(rest, None)
            if options[name] is None:
                return None
        else:
            args.append(arg)
    if len(args) != 2:
        return None
    return args[0], args[1], options["--keep"], options["--metrics"]


def write_metrics(path, directory, max_bytes, now=None):
    """The cache's bytes, files and cap (after the pruning) into ``path``; a reason on stderr when that fails (the
    pruning stands either way)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    textfile = importlib.import_module("_textfile")
    entries = cache_files(directory)
    family = textfile.family
    problem = textfile.write_quietly(
        path,
        [
            family(
                "llamarpc_tensor_cache_bytes",
                "gauge",
                "Bytes in the RPC tensor cache.",
                [({}, sum(e[1] for e in entries))],
            ),
            family("llamarpc_tensor_cache_files", "gauge", "Files in the RPC tensor cache.", [({}, len(entries))]),
            family(
                "llamarpc_tensor_cache_max_bytes", "gauge", "The tensor cache's cap (the pruner's).", [({}, max_bytes)]
            ),
            family(
                "llamarpc_tensor_cache_pruned_timestamp_seconds",
                "gauge",
                "When the pruner last ran (Unix time).",
                [({}, time.time() if now is None else now)],
            ),
        ],
    )
    if problem:
        print(f"warning: {problem}", file=sys.stderr)


def main(argv):
    parsed = parse(argv)
    if parsed is None:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    directory, cap, keep_file, metrics_file = parsed
    if not cap.isdigit():
        print(f"MAX_BYTES must be a whole number of bytes, not {cap!r}", file=sys.stderr)
        return 2
    max_bytes = int(cap)
    keep = frozenset()
    if keep_file is not None:
        names, why = read_keep(keep_file)
        if names is None:
            print(f"keep-list {keep_file} not read ({why}): no seeded tensor is kept")
        else:
            keep = frozenset(names)
    removed, left, kept_removed, over = prune_keeping(directory, max_bytes, keep)
    print(f"tensor cache {directory}: removed {len(removed)} file(s), {left} bytes kept (cap {max_bytes})")
    if kept_removed:
        print(
            f"tensor cache {directory}: had to remove {len(kept_removed)} seeded tensor(s) of the plan in force "
            f"({keep_file}): the cache was {over} bytes over the cap without any other file; llama-server sends "
            "their bytes at the next load. Raise the cap or give the worker a smaller share of the model"
        )
    if metrics_file:
        write_metrics(metrics_file, directory, max_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
