# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tensor-cache seeder's speed: a model's tensors over 10 MiB (one worker with every layer) written into an empty
cache, then seeded again on the full cache, with the C++ helper and in Python.

Usage: PYTHONPATH=.collections python tools/seed_speed.py MODEL HELPER CACHE_PARENT
(HELPER: ``g++ -O2 -Wall -o HELPER roles/llama_rpc_worker/files/llamarpc_fnv1a.cpp``; CACHE_PARENT: a directory on the
disk to measure; the caches made there are removed.)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed as ts


def cpu_seconds():
    """This process's CPU time and its waited children's (the helper runs as a child)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    model, helper, parent = argv[1:]
    tensors, n_layer = ts.model_tensors(model)
    entries = ts.seed_lists(tensors, n_layer, ["worker"], [1.0])["worker"]
    size = sum(entry["size"] for entry in entries)
    for label, hasher in (("helper", helper), ("python", None)):
        cache = tempfile.mkdtemp(dir=parent)
        try:
            for step in ("write", "present"):
                wall, cpu = time.monotonic(), cpu_seconds()
                rows = ts.seed(entries, cache, hasher)[0]
                wall, cpu = time.monotonic() - wall, cpu_seconds() - cpu
                print(
                    f"{label:6} {step:7} {size / 1e6:.1f} MB: {wall:6.2f} s wall ({size / 1e6 / wall:7.1f} MB/s), "
                    f"{cpu:6.2f} s CPU; states {sorted({row['state'] for row in rows})}",
                    flush=True,
                )
        finally:
            shutil.rmtree(cache)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
