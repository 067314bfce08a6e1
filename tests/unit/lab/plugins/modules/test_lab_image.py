# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""lab_image: labs created at the same time build their image once. A build of the same key in progress holds the
image's lock; a second run waits for it, then uses the image it finds instead of building again."""

from __future__ import annotations

import fcntl
import json
import os
import platform
import threading

from ansible_collections.llamarpc.lab.plugins.module_utils._lab import image_key
from ansible_collections.llamarpc.lab.plugins.modules import lab_image as mod


def _args(tmp_path):
    return {"cache_dir": str(tmp_path), "packages": ["sudo"]}


def _top(tmp_path):
    key = image_key("bookworm", "minbase", ["sudo"], platform.machine(), "lab")
    return key, tmp_path / f"bookworm-{key}"


def _complete(top):
    """The image as a finished build leaves it: its root filesystem, then its marker."""
    (top / "rootfs").mkdir(parents=True)
    (top / mod.MARKER).write_text(json.dumps({"suite": "bookworm"}))


def _waiting_on(path):
    """Whether some process waits for a lock on ``path`` (a line of /proc/locks with "->")."""
    inode = os.stat(path).st_ino
    with open("/proc/locks", encoding="ascii") as handle:
        return any("->" in line and line.split()[-3].endswith(f":{inode}") for line in handle)


def _run_behind_lock(run_module, tmp_path, monkeypatch, complete_while_waiting):
    """Hold the image's lock as a build in progress does, start the module beside it, and release the lock once the
    module waits for it (having completed the image first when ``complete_while_waiting``)."""
    key, top = _top(tmp_path)
    builds = []
    monkeypatch.setattr(mod, "build", lambda module, p, top, key: builds.append(top) or 12.5)
    lock_path = tmp_path / f".bookworm-{key}.lock"
    out = {}
    with open(lock_path, "w", encoding="ascii") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        worker = threading.Thread(target=lambda: out.update(exit=run_module(mod, _args(tmp_path))))
        worker.start()
        while not _waiting_on(lock_path):  # no time bound: the module has nowhere else to go
            assert worker.is_alive(), out
            os.sched_yield()
        if complete_while_waiting:
            _complete(top)
    worker.join()
    return out["exit"], builds


def test_a_run_that_waited_for_a_build_of_its_key_uses_that_image(run_module, tmp_path, monkeypatch):
    result, builds = _run_behind_lock(run_module, tmp_path, monkeypatch, complete_while_waiting=True)
    assert not result.failed and result.result["changed"] is False
    assert builds == []  # built once, by the run that held the lock
    assert result.result["build_seconds"] == 0.0


def test_a_run_that_waited_for_a_build_that_failed_builds_itself(run_module, tmp_path, monkeypatch):
    result, builds = _run_behind_lock(run_module, tmp_path, monkeypatch, complete_while_waiting=False)
    assert not result.failed and result.result["changed"] is True
    assert builds == [str(_top(tmp_path)[1])]
    assert result.result["build_seconds"] == 12.5


def test_a_cached_image_is_used_without_the_lock(run_module, tmp_path, monkeypatch):
    _key, top = _top(tmp_path)
    _complete(top)

    def build_again(*_args):
        raise AssertionError("built again")

    monkeypatch.setattr(mod, "build", build_again)
    result = run_module(mod, _args(tmp_path))
    assert result.result["changed"] is False
    assert not list(tmp_path.glob(".*.lock"))
