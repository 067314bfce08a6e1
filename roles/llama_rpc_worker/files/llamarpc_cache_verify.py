# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Remove every file of llama.cpp's RPC tensor cache that could serve wrong weights (run before the worker starts).

Usage: llamarpc_cache_verify.py [--hasher PROGRAM] DIRECTORY

llama.cpp (ggml-rpc.cpp, protocol 7) names each cache file by the 64-bit FNV-1a hash of the tensor bytes it holds
and never checks a file against its name when it serves it; it writes new files in place, so a worker killed
mid-write or a full disk leaves a truncated file under the right name. Here every entry must be a regular file
named by 16 lower-case hex digits, larger than the 10 MiB below which llama.cpp caches nothing, whose FNV-1a is its
name. Any other entry is removed (a directory is only reported) and each removal is logged: a removed tensor is
only a cache miss, the coordinator sends it again.

PROGRAM (llamarpc-fnv1a, built on the host) prints "<hash>  <path>" for each path it is given; without it, or if it
is missing, the hashes are computed here in Python (over 100 times slower). Exit status 1 when a bad entry
cannot be removed: the worker must not start then.
"""

from __future__ import annotations

import os
import sys

# The collection's FNV-1a (plugins/module_utils/tensor_cache/_fnv1a.py): installed beside this file by the role; in the
# collection's own tree (tests), three directories up and down again.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "..", "plugins", "module_utils", "tensor_cache")]
from _fnv1a import NAME, fnv1a, fnv1a_file, hash_with  # noqa: E402  pylint: disable=wrong-import-position

__all__ = ["fnv1a", "fnv1a_file", "hash_with", "hash_in_python", "problems", "verify", "main"]

# ggml-rpc.cpp HASH_THRESHOLD: only tensors larger than this are cached.
HASH_THRESHOLD = 10 * 1024 * 1024


def hash_in_python(paths):
    found = {}
    for path in paths:
        try:
            found[path] = f"{fnv1a_file(path):016x}"
        except OSError:
            found[path] = None
    return found


def problems(directory, hasher=None):
    """(path, reason) of every entry that must go, and the number of entries that are good tensors."""
    bad, candidates = [], []
    try:
        scan = os.scandir(directory)
    except FileNotFoundError:
        return bad, 0
    with scan:
        for entry in sorted(scan, key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                bad.append((entry.path, "a directory (left alone)"))
            elif not entry.is_file(follow_symlinks=False):
                bad.append((entry.path, "not a regular file"))
            elif not NAME.fullmatch(entry.name):
                bad.append((entry.path, "name is not a 16-digit lower-case hex hash"))
            elif entry.stat(follow_symlinks=False).st_size <= HASH_THRESHOLD:
                size = entry.stat(follow_symlinks=False).st_size
                bad.append((entry.path, f"{size} bytes, not over the 10 MiB llama.cpp caches from: truncated"))
            else:
                candidates.append(entry.path)
    hashes = hash_with(hasher, candidates) if hasher else hash_in_python(candidates)
    good = 0
    for path in candidates:
        digest = hashes[path]
        if digest is None:
            bad.append((path, "unreadable"))
        elif digest != os.path.basename(path):
            bad.append((path, f"its bytes hash to {digest}: truncated or corrupted"))
        else:
            good += 1
    return bad, good


def verify(directory, hasher=None, log=print):
    """Remove the bad entries of ``directory``; returns (good, removed, failed) counts, each removal logged."""
    bad, good = problems(directory, hasher)
    removed = failed = 0
    for path, reason in bad:
        if reason.startswith("a directory"):
            log(f"tensor cache {path}: {reason}")
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log(f"tensor cache {path}: {reason}; cannot remove it: {exc.strerror}")
            failed += 1
            continue
        log(f"tensor cache {path}: removed, {reason}")
        removed += 1
    return good, removed, failed


def main(argv):
    args = argv[1:]
    hasher = None
    if len(args) == 3 and args[0] == "--hasher":
        hasher = args[1]
        args = args[2:]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    if hasher and not os.access(hasher, os.X_OK):
        print(f"tensor cache: {hasher} is not there, hashing in Python (slow)")
        hasher = None
    good, removed, failed = verify(args[0], hasher)
    print(f"tensor cache {args[0]}: {good} file(s) verified, {removed} removed, {failed} not removable")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
