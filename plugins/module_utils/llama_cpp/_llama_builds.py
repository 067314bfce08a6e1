# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's record of the llama.cpp builds it installed on a node, and what it may remove there.

``<install_dir>/builds.json`` (``RECORD``), written only by ``llama_cpp_install`` (atomically and durably,
``files/_atomic``), lists the builds that were made current, the current one first, each with what a rollback
needs: its key, the RPC server's file name, its RPC protocol, its helpers' names and the source it came from as the
role knows it (``llama_cpp_install``'s ``source``).

Which builds stay (``split``): the current one and ``keep_previous`` before it. A build beyond them leaves the record,
and its directory is removed only when it is the collection's own (``owned``): a real directory (not a link) named
by a recorded key whose marker is a regular file holding that key. Of such a directory only what an install puts
there goes (``bin``, the staging leftovers, the marker last); a directory that still holds anything else stays. A
directory the record does not name, or one without the marker, is never touched.

A rollback (``rolled_back``) makes the build before the current one current again, and the one it replaces the one
before it: a second rollback goes forward again. It needs that build's directory to be whole (``owned``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic

RECORD = "builds.json"
MARKER = "complete"  # the install's marker (_llama_install.MARKER), written last
BIN = "bin"
STAGING = ".bin-"  # prefix of an unpack's staging directories (_llama_install.STAGING)
FIELDS = ("key", "rpc_server", "rpc_protocol", "helpers", "source")


class RecordError(Exception):
    """The record or a build's directory cannot be read or written (message meant for the user)."""


def valid_key(key):
    """Whether ``key`` names a directory directly under the install directory (and not the record)."""
    return isinstance(key, str) and key not in ("", ".", "..", RECORD) and os.sep not in key and "\0" not in key


def entry(key, rpc_server="", rpc_protocol="", helpers=(), source=None):
    """One build as the record keeps it."""
    return {
        "key": key,
        "rpc_server": rpc_server or "",
        "rpc_protocol": rpc_protocol or "",
        "helpers": list(helpers or []),
        "source": dict(source or {}),
    }


def read(install_dir):
    """The record: ``{"builds": [entry, current first]}`` (no builds when there is no record or it is unreadable;
    an entry whose key is not a plain directory name is left out)."""
    path = os.path.join(install_dir, RECORD)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {"builds": []}
    except (OSError, ValueError) as exc:
        raise RecordError(f"cannot read {path}: {exc}") from exc
    builds = data.get("builds") if isinstance(data, dict) else None
    found, seen = [], set()
    for item in builds if isinstance(builds, list) else []:
        if isinstance(item, dict) and valid_key(item.get("key")) and item["key"] not in seen:
            seen.add(item["key"])
            found.append(
                entry(
                    item["key"],
                    item.get("rpc_server"),
                    item.get("rpc_protocol"),
                    item.get("helpers"),
                    item.get("source") if isinstance(item.get("source"), dict) else None,
                )
            )
    return {"builds": found}


def write(install_dir, record):
    """The record, atomically and durably (a temporary beside it, fsync, rename, fsync of the directory)."""
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    _atomic.write_atomic(os.path.join(install_dir, RECORD), text, mode=0o644)


def keys(record):
    return [item["key"] for item in record["builds"]]


def made_current(record, new):
    """``record`` with the build ``new`` (an ``entry``) current, the others after it in their order."""
    return {**record, "builds": [new, *[item for item in record["builds"] if item["key"] != new["key"]]]}


def split(record, keep_previous):
    """``(kept, dropped)``: the record's first ``1 + keep_previous`` builds, and the ones after them."""
    count = 1 + max(0, int(keep_previous))
    return record["builds"][:count], record["builds"][count:]


def owned(install_dir, key):
    """Whether ``<install_dir>/<key>`` is a build the collection installed: a directory (not a link) whose marker is a
    regular file holding the key."""
    key_dir = os.path.join(install_dir, key)
    marker = os.path.join(key_dir, MARKER)
    try:
        if not stat.S_ISDIR(os.lstat(key_dir).st_mode) or not stat.S_ISREG(os.lstat(marker).st_mode):
            return False
        with open(marker, encoding="utf-8") as handle:
            return handle.read() == f"{key}\n"
    except (OSError, ValueError):
        return False


def _remove_build(install_dir, key):
    """Remove what an install put in ``<install_dir>/<key>``: ``bin``, staging leftovers, then the marker (last, so
    that a removal cut short is still the collection's and is finished by the next run), then the directory when
    nothing else is in it. Returns whether the directory is gone."""
    key_dir = os.path.join(install_dir, key)
    for name in os.listdir(key_dir):
        path = os.path.join(key_dir, name)
        if (name == BIN or name.startswith(STAGING)) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif name == BIN:
            os.unlink(path)
    os.unlink(os.path.join(key_dir, MARKER))
    try:
        os.rmdir(key_dir)
    except OSError:  # something the collection did not put there: it stays, with the directory
        _atomic.fsync_dir(key_dir)
        return False
    return True


def prune(install_dir, record, keep_previous, check=False):
    """Remove the builds beyond the current one and ``keep_previous`` before it that ``owned`` allows.
    ``(record after, removed keys, kept keys)``: the record keeps only the builds that stay; ``kept`` names the
    dropped builds whose directory is there but not the collection's (no marker, a link, other files inside)."""
    kept_builds, dropped = split(record, keep_previous)
    removed, kept = [], []
    for item in dropped:
        key = item["key"]
        if owned(install_dir, key):
            removed.append(key)
            if not check:
                try:
                    if not _remove_build(install_dir, key):
                        kept.append(key)
                except OSError as exc:
                    raise RecordError(f"cannot remove the build {os.path.join(install_dir, key)}: {exc}") from exc
        elif os.path.lexists(os.path.join(install_dir, key)):
            kept.append(key)
    if removed and not check:
        _atomic.fsync_dir(install_dir)
    return {**record, "builds": kept_builds}, removed, kept


def rollback_target(install_dir, record):
    """The build before the current one, or a ``RecordError`` saying why there is none to roll back to."""
    builds = record["builds"]
    if len(builds) < 2:
        recorded = ", ".join(keys(record)) or "none"
        raise RecordError(
            f"{os.path.join(install_dir, RECORD)} records no build before the current one (recorded: {recorded}):"
            " nothing to roll back to (llama_cpp_keep_previous 0 keeps none; builds installed before the record"
            " existed are not in it)"
        )
    previous = builds[1]
    if not owned(install_dir, previous["key"]):
        raise RecordError(
            f"the previous build {os.path.join(install_dir, previous['key'])} is recorded but no longer whole there"
            f" (no marker {MARKER} holding its key): nothing to roll back to"
        )
    return previous


def rolled_back(record):
    """``record`` with the build before the current one current again and the current one before it."""
    builds = record["builds"]
    return {**record, "builds": [builds[1], builds[0], *builds[2:]]}
