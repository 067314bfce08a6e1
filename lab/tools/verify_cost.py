# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a batch of n tokens costs against one token: a speculative pass verifies its drafted tokens in one batch.

On loopback: ``llama-server`` drives a ``ggml-rpc-server`` that holds every layer (``--rpc``, ``-ngl 99``), or with
``--local`` computes alone on its CPU (without weight repacking, like the workers). For n = 1 .. ``--max``, a prompt
of n token ids (no prompt cache) is processed and one token generated; llama-server's ``timings.prompt_ms`` is the
batch's time. Prints, per n, the median over ``--repeats`` and its ratio to one token, as JSON lines. Loopback only.

    python3 lab/tools/verify_cost.py --bin-dir BIN --model gemma-3-270m-q4_k_m.gguf [--local]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from loopback_llama import free_port, post_json, wait_health


def batch_ms(port, tokens, repeat):
    """Milliseconds llama-server took for a prompt of ``tokens`` ids (BOS, then ids that differ per repeat)."""
    ids = [2] + [1000 + (i * 37 + repeat * 11) % 5000 for i in range(tokens - 1)]
    answer = post_json(port, "/completion", {"prompt": ids, "n_predict": 1, "cache_prompt": False})
    return answer["timings"]["prompt_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", required=True, help="llama.cpp binaries: llama-server and ggml-rpc-server")
    parser.add_argument("--model", required=True)
    parser.add_argument("--local", action="store_true", help="llama-server alone on its CPU, no RPC worker")
    parser.add_argument("--max", type=int, default=9, help="the largest batch")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    bin_dir = Path(args.bin_dir)
    rpc_port, http_port = free_port(), free_port()
    threads = str(args.threads)
    server_argv = [bin_dir / "llama-server", "--model", args.model, "--host", "127.0.0.1", "--port", str(http_port),
                   "--threads", threads, "--ctx-size", "512", "--parallel", "1", "--cache-ram", "0"]  # fmt: skip
    if args.local:
        server_argv += ["--device", "none", "-ngl", "0", "--no-repack"]
    else:
        server_argv += ["--rpc", f"127.0.0.1:{rpc_port}", "-ngl", "99"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    worker = subprocess.Popen(
        [bin_dir / "ggml-rpc-server", "--host", "127.0.0.1", "--port", str(rpc_port), "--threads", threads], **quiet
    )
    server = subprocess.Popen(server_argv, **quiet)
    try:
        wait_health(http_port)
        times = {}
        for repeat in range(args.repeats):
            for tokens in range(1, args.max + 1):
                times.setdefault(tokens, []).append(batch_ms(http_port, tokens, repeat))
        one = statistics.median(times[1])
        for tokens in range(1, args.max + 1):
            median = statistics.median(times[tokens])
            print(json.dumps({"n": tokens, "median_ms": round(median, 2), "over_one": round(median / one, 3)}))
    finally:
        for proc in (server, worker):
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
