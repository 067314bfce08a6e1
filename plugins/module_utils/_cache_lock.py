# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One lock for a cache entry that runs at the same time may both build (a lab image, the lab's apt repository, a
llama.cpp build): the first takes it and builds, the others wait, then find the entry built and use it. The caller
checks again under the lock; the lock is the kernel's (``flock``), so a killed holder releases it."""

from __future__ import annotations

import contextlib
import fcntl
import os


@contextlib.contextmanager
def exclusive(directory, name, mode=0o755):
    """Hold an exclusive ``flock`` on ``directory/name`` (the directory made if missing) for the ``with`` block."""
    os.makedirs(directory, mode=mode, exist_ok=True)
    with open(os.path.join(directory, name), "w", encoding="ascii") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield handle
