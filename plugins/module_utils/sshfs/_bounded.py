# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A child process bounded in time even when it cannot be killed.

A process whose FUSE request the file system has already read (sshfs waiting on a dead or frozen server) sleeps
uninterruptibly until the answer comes: SIGKILL stays pending and nothing that waits for it returns, not
``timeout(1)`` and not ``AnsibleModule.run_command``. Here the caller stops waiting instead: the child is sent
SIGKILL, given a moment to be reaped, and otherwise left behind (it exits once the mount is torn down).
"""

from __future__ import annotations

import contextlib
import subprocess

#: Seconds to wait for a killed child to be reaped before leaving it behind.
REAP_SECONDS = 1.0


def run_bounded(argv, timeout):
    """``(rc, stdout, stderr)`` of ``argv`` (no shell), or None when it did not finish within ``timeout`` s."""
    # A child this function may have to leave behind unreaped (run_command always waits): Popen is the point here.
    proc = subprocess.Popen(  # noqa: S603 - argv list, no shell  # pylint: disable=ansible-bad-function
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        # Uninterruptible: leave it behind, never block on it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=REAP_SECONDS)
        return None
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
