# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Python function run in a forked child, its answer awaited for a bounded time.

For work that may block forever in the kernel (a file system call on a hung FUSE mount): the function runs in a
child forked from the module's own process, so it is plain module_utils code (no program held in a string, no
second interpreter, nothing to import from the module's zip) with the module's privileges. The parent waits for
the child's JSON answer on a pipe until ``timeout``; then it sends SIGKILL, gives the child a moment to be reaped
and otherwise leaves it behind (it exits once the mount is torn down), like ``_bounded.run_bounded``.

The child never returns into the caller's code (``os._exit``) and holds none of the module's file descriptors:
its stdin, stdout and stderr are ``/dev/null`` and everything else but its end of the pipe is closed, so a child
left behind cannot keep Ansible waiting for the end of the module's output.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

#: Seconds to wait for a finished or killed child to be reaped before leaving it behind.
REAP_SECONDS = 1.0


def _child_main(function, args, write_fd):
    """In the child: detach from the module's descriptors, run ``function``, send its answer; never returns."""
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, os.sysconf("SC_OPEN_MAX"))
        try:
            answer = {"value": function(*args)}
        except Exception as err:  # pylint: disable=broad-exception-caught  # the parent reports it
            answer = {"error": f"{type(err).__name__}: {err}"}
        data = json.dumps(answer).encode("utf-8")
        while data:
            data = data[os.write(write_fd, data) :]
    finally:
        os._exit(0)


def reap(pid, seconds=None):
    """Wait up to ``seconds`` (default REAP_SECONDS) for ``pid`` to be reaped; True when it was."""
    deadline = time.monotonic() + (REAP_SECONDS if seconds is None else seconds)
    while True:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _read_until(read_fd, deadline):
    """Bytes from ``read_fd`` up to its end, or None when ``deadline`` (monotonic) came first."""
    chunks = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _w, _x = select.select([read_fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def run_in_child(function, args, timeout):
    """``function(*args)`` computed in a forked child, or None when it gave no answer within ``timeout`` seconds.

    ``function`` must return something JSON can carry. When it raises, or the child dies without answering,
    the result is ``{"ok": False, "error": ...}``.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_fd)
        _child_main(function, args, write_fd)
    os.close(write_fd)
    try:
        data = _read_until(read_fd, time.monotonic() + timeout)
    finally:
        os.close(read_fd)
    if data is None:
        os.kill(pid, signal.SIGKILL)
        reap(pid)  # an uninterruptible child stays behind: never block on it
        return None
    reap(pid)
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        return {"ok": False, "error": "the child process died without an answer"}
    if "error" in answer:
        return {"ok": False, "error": f"probe failed: {answer['error']}"}
    return answer["value"]
