# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cache entries' lock (lab image, lab apt repository, llama.cpp build): one holder at a time, and a waiter."""

from __future__ import annotations

import fcntl
import os
import threading

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils._cache_lock import exclusive


def _waiting_on(path):
    """Whether some process or thread waits for a lock on ``path`` (a line of /proc/locks with "->")."""
    inode = os.stat(path).st_ino
    with open("/proc/locks", encoding="ascii") as handle:
        return any("->" in line and line.split()[-3].endswith(f":{inode}") for line in handle)


def test_the_lock_is_exclusive_and_makes_its_directory(tmp_path):
    cache = tmp_path / "new" / "cache"
    with exclusive(str(cache), ".k.lock"):
        assert cache.is_dir()
        with open(cache / ".k.lock", encoding="ascii") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(cache / ".k.lock", encoding="ascii") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the block


def test_a_second_holder_waits_for_the_first(tmp_path):
    """The second enters only after the first left: it sees what the first built (waits via /proc/locks, no clock)."""
    seen = []
    with exclusive(str(tmp_path), ".k.lock"):
        worker = threading.Thread(target=lambda: seen.append(_enter(tmp_path)))
        worker.start()
        while not _waiting_on(tmp_path / ".k.lock"):
            assert worker.is_alive()
            os.sched_yield()
        (tmp_path / "built").write_text("yes")
    worker.join()
    assert seen == ["yes"]


def _enter(tmp_path):
    with exclusive(str(tmp_path), ".k.lock"):
        return (tmp_path / "built").read_text()
