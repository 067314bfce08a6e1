# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Keep llama.cpp's RPC tensor cache under a size cap (upstream never evicts).

Usage: llamarpc_cache_prune.py DIRECTORY MAX_BYTES

Removes the least recently used files (by the later of access and modification time) until the directory's
files total at most MAX_BYTES. A tensor removed while the worker runs is only a cache miss: the coordinator
then sends it again.
"""

from __future__ import annotations

import contextlib
import os
import sys


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


def prune(directory, max_bytes):
    """Remove least recently used files until the total is <= max_bytes; returns (removed paths, bytes left)."""
    entries = sorted(cache_files(directory))
    total = sum(size for _used, size, _path in entries)
    removed = []
    for _used, size, path in entries:
        if total <= max_bytes:
            break
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        total -= size
        removed.append(path)
    return removed, total


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    if not argv[2].isdigit():
        print(f"MAX_BYTES must be a whole number of bytes, not {argv[2]!r}", file=sys.stderr)
        return 2
    max_bytes = int(argv[2])
    removed, left = prune(argv[1], max_bytes)
    print(f"tensor cache {argv[1]}: removed {len(removed)} file(s), {left} bytes kept (cap {max_bytes})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
