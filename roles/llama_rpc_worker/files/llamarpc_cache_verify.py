# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Remove every file of llama.cpp's RPC tensor cache that could serve wrong weights (run before the worker starts).

Usage: llamarpc_cache_verify.py [--hasher PROGRAM] [--record FILE] DIRECTORY [-- PRUNE_ARGS...] [--exec COMMAND...]

llama.cpp (ggml-rpc.cpp, protocol 7) names each cache file by the 64-bit FNV-1a hash of the tensor bytes it holds
and never checks a file against its name when it serves it; it writes new files in place, so a worker killed
mid-write or a full disk leaves a truncated file under the right name. Here every entry must be a regular file
named by 16 lower-case hex digits, larger than the 10 MiB below which llama.cpp caches nothing, whose FNV-1a is its
name. Any other entry is removed (a directory is only reported) and each removal is logged: a removed tensor is
only a cache miss, the coordinator sends it again.

PROGRAM (llamarpc-fnv1a, built on the host) prints "<hash>  <path>" for each path it is given; without it, or if it
is missing, the hashes are computed here in Python (over 100 times slower). Exit status 1 when a bad entry
cannot be removed: the worker must not start then.

FILE (in /run, which a boot empties) records each good file as it was when it was found good: its device, inode,
size, and modification and change times (no user sets a change time). A later run hashes only the files that are not
in it or changed since, and writes it anew: a restart of the worker, or the check a llama.cpp cutover runs before its
window, reads the whole cache once per boot and then only what llama.cpp or the seeding added. A missing or unreadable
record means every file is hashed.

After ``--``, the pruner (llamarpc_cache_prune.py, beside this file) runs in this process with PRUNE_ARGS once
every bad entry is gone: the worker's start pays for one sandboxed Python start, not two.

With ``--exec``, once the check (and the pruner) succeeded, this process tells systemd it is ready (``READY=1`` to
``$NOTIFY_SOCKET``, when set: the worker's unit is ``Type=notify``) and becomes COMMAND, the RPC server: the worker's
start then pays for one sandbox, not two (systemd builds the sandbox anew for each process it starts, about 0.1 s on
a small host), and its restart in a llama.cpp cutover's window is that much shorter. Nothing is run after a failure.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import socket
import sys

# The collection's FNV-1a (plugins/module_utils/tensor_cache/_fnv1a.py): installed beside this file by the role; in the
# collection's own tree (tests), three directories up and down again.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "..", "plugins", "module_utils", "tensor_cache")]
from _fnv1a import NAME, fnv1a, fnv1a_file, hash_with  # noqa: E402  pylint: disable=wrong-import-position

__all__ = ["fnv1a", "fnv1a_file", "hash_with", "hash_in_python", "problems", "verify", "read_record", "main"]

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


def unchanged_key(status):
    """What must stay the same for a file found good to be good still, without hashing it again."""
    return [status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns]


def read_record(path):
    """The record ``path`` holds ({name: unchanged_key}), or {} when there is none or it does not read as one."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    return {name: key for name, key in record.items() if isinstance(key, list)}


def write_record(path, good):
    """Write ``good`` as the record ``path``, whole (a new file renamed over it); an error is returned, not raised:
    without the record the next run hashes everything again, nothing more."""
    temporary = f"{path}.{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(good, handle, sort_keys=True)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return exc.strerror or str(exc)
    return None


def problems(directory, hasher=None, record=None):
    """(path, reason) of every entry that must go, {name: unchanged_key} of the good tensors, and how many of those were
    not hashed: unchanged since ``record`` ({name: unchanged_key}, an earlier run's) found them good."""
    record = record or {}
    bad, candidates, good, kept = [], [], {}, 0
    try:
        scan = os.scandir(directory)
    except FileNotFoundError:
        return bad, {}, 0
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
            elif record.get(entry.name) == unchanged_key(entry.stat(follow_symlinks=False)):
                good[entry.name] = record[entry.name]
                kept += 1
            else:
                candidates.append(entry.path)
    # Each file's key is taken before it is hashed: a change while it is read shows at the next run.
    keys = {}
    for path in candidates:
        with contextlib.suppress(OSError):
            keys[path] = unchanged_key(os.stat(path, follow_symlinks=False))
    hashes = hash_with(hasher, candidates) if hasher else hash_in_python(candidates)
    for path in candidates:
        digest = hashes[path]
        if digest is None or path not in keys:
            bad.append((path, "unreadable"))
        elif digest != os.path.basename(path):
            bad.append((path, f"its bytes hash to {digest}: truncated or corrupted"))
        else:
            good[os.path.basename(path)] = keys[path]
    return bad, good, kept


def verify(directory, hasher=None, log=print, record=None):
    """Remove the bad entries of ``directory``, each removal logged, and write the good ones as the record ``record``
    (a path, read first: see the module's doc); returns the counts (good, removed, failed, unchanged), ``unchanged``
    being the good files the record spared from hashing."""
    bad, good, unchanged = problems(directory, hasher, read_record(record) if record else None)
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
    if record:
        error = write_record(record, good)
        if error:
            log(f"tensor cache record {record}: not written ({error}); the next start hashes every file")
    return len(good), removed, failed, unchanged


def notify_ready(environ=None):
    """``READY=1`` to systemd's notification socket (``$NOTIFY_SOCKET`` of ``environ``, this process's environment by
    default; ``@`` names an abstract socket); nothing when it is not set (run by hand). Returns whether it was sent."""
    target = (os.environ if environ is None else environ).get("NOTIFY_SOCKET", "")
    if not target:
        return False
    if target.startswith("@"):
        target = "\0" + target[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(target)
        sock.sendall(b"READY=1")
    return True


def main(argv, execv=os.execv):
    args = argv[1:]
    command = None
    if "--exec" in args:
        command = args[args.index("--exec") + 1 :]
        args = args[: args.index("--exec")]
        if not command:
            print("--exec needs a command", file=sys.stderr)
            return 2
    prune_args = None
    if "--" in args:
        prune_args = args[args.index("--") + 1 :]
        args = args[: args.index("--")]
    options = {}
    while len(args) > 1 and args[0] in ("--hasher", "--record") and args[0] not in options:
        options[args[0]] = args[1]
        args = args[2:]
    if len(args) != 1 or args[0].startswith("--"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    hasher = options.get("--hasher")
    if hasher and not os.access(hasher, os.X_OK):
        print(f"tensor cache: {hasher} is not there, hashing in Python (slow)")
        hasher = None
    good, removed, failed, unchanged = verify(args[0], hasher, record=options.get("--record"))
    print(
        f"tensor cache {args[0]}: {good} file(s) verified, {removed} removed, {failed} not removable"
        f" ({unchanged} of them unchanged since found good this boot, not hashed again)",
        flush=True,
    )
    if failed:
        return 1
    if prune_args is not None:
        prune = importlib.import_module("llamarpc_cache_prune")
        rc = prune.main(["llamarpc_cache_prune.py", *prune_args])
        if rc:
            return rc
    if command:
        notify_ready()
        os.environ.pop("NOTIFY_SOCKET", None)  # the RPC server has nothing more to tell systemd
        sys.stdout.flush()
        sys.stderr.flush()
        execv(command[0], command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
