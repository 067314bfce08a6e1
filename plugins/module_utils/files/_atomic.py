# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole files put in place atomically and durably: after a power loss a reader finds the old file or the new one,
never an empty or torn one.

A rename alone is atomic but not durable: the rename may reach the disk before the file's data (the new name then
names an empty or short file), and the directory's change may not reach it at all (the old file comes back). So the
data is fsynced before the rename and the directory after it. Every file the collection writes whole goes through
here: ``write_atomic`` for bytes in hand, ``finalise`` for a file written by streaming into a temporary name (a shard,
a tensor cache file, an archive).

The standard library only: the coordinator's supervisor runs with this file copied beside it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


def fsync_dir(path):
    """Make the entries of directory ``path`` (a rename, a new or removed name) durable."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_file(path):
    """Make the data of the regular file ``path`` durable (written by another descriptor, a tool or a library)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def finalise(temporary, final, move=None):
    """Put ``temporary``, a file written in full in ``final``'s directory, in place as ``final``: its data fsynced, the
    rename (``move``: ``os.replace`` unless given), then the directory fsynced. Checks on the file's bytes (a hash, a
    size) belong before this call; a failure leaves ``temporary`` to the caller."""
    fsync_file(temporary)
    (move or os.replace)(temporary, final)
    fsync_dir(os.path.dirname(os.path.abspath(final)))


def write_atomic(path, data, mode=None, prepare=None, move=None, prefix=None):
    """Replace ``path`` with ``data`` (bytes; a str is written as UTF-8).

    A temporary file beside ``path`` (``prefix`` + random, by default ``.<name>.``; created 0600) is written, flushed
    and fsynced; given ``mode`` (``chmod``); handed to ``prepare(temporary)`` when given (a chown, a validation: an
    exception there leaves ``path`` as it was); moved onto ``path`` by ``move(temporary, path)`` (``os.replace``, or
    ``AnsibleModule.atomic_move`` to keep the old file's attributes and SELinux context); then the directory is
    fsynced. Whatever fails, including an exit from ``prepare`` (``fail_json``), removes the temporary file."""
    directory = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix=prefix or f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        if prepare is not None:
            prepare(temporary)
        (move or os.replace)(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_dir(directory)
