# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a llama.cpp build costs a host that serves, at the build's two priorities, measured side by side.

On loopback, as on a build host that is also an RPC worker: ``ggml-rpc-server`` holds every layer of the model and
``llama-server`` drives it over RPC (``--rpc``, ``-ngl 99``), both in a session of their own (as systemd starts a
service). Each round measures generation (greedy completions, the tokens/s llama-server reports) in three windows, in
an order that rotates from round to round: nothing else running (``none``), the llama.cpp build running at its own
priority (``normal``), and the same build at the role's default (``idle``: started as ``llama_cpp_build`` starts each
step, with ``_llama_build_run.priority_argv`` and ``priority_options``). Each build window starts from a cleaned build
tree, so that every window compiles the same first files. Besides tokens/s, each window counts the build's progress
lines: what the priority costs the build while the host serves.

    python3 lab/tools/build_priority_bench.py --bin-dir BIN --model MODEL.gguf --source llama_cpp_python-0.3.36.tar.gz

Prints the report as JSON (also written to ``--out``): per window kind the median tokens/s and build lines, and the
ratios to ``none``. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / ".collections")]

from loopback_llama import free_port, post_json, wait_health  # noqa: E402 - beside this file

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build_run as build_run  # noqa: E402

KINDS = ("none", "normal", "idle")
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle. Once upon a time,"
PROGRESS = re.compile(r"^\[\s*\d+%\]")


class _Which:
    """What ``priority_argv`` uses of an AnsibleModule."""

    @staticmethod
    def get_bin_path(name, required=False):
        found = shutil.which(name)
        if required and not found:
            raise SystemExit(f"{name} not found")
        return found


def complete(port, tokens):
    body = {"prompt": PROMPT, "n_predict": tokens, "temperature": 0, "cache_prompt": False}
    timings = post_json(port, "/completion", body)["timings"]
    return timings["predicted_n"], timings["predicted_ms"] / 1000.0


def window(port, seconds, tokens):
    """Completions for ``seconds``: generated tokens over the seconds llama-server spent generating them."""
    count, spent = 0, 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n, s = complete(port, tokens)
        count, spent = count + n, spent + s
    return count / spent if spent else 0.0


def start_build(kind, build_dir, targets, jobs, log):
    """The build of ``targets`` from a clean tree, at ``kind``'s priority, in its own process group."""
    cmake = _Which.get_bin_path("cmake", required=True)
    subprocess.run([cmake, "--build", build_dir, "--target", "clean"], stdout=subprocess.DEVNULL, check=True)
    prefix = build_run.priority_argv(_Which, kind)
    options = build_run.priority_options(kind) or {"start_new_session": True}  # a session of its own either way
    argv = [*prefix, cmake, "--build", build_dir, "--parallel", str(jobs), "--target", *targets]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **options)


def stop_build(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def progress_lines(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return sum(1 for line in handle if PROGRESS.match(line))


def configure(source, tmp):
    """The source's llama.cpp tree configured in ``tmp`` with the role's flags for a native build (``llama_cpp_build``'s
    own defaults: the lab's build); the build directory."""
    with tarfile.open(source) as archive:
        names = archive.getnames()
        archive.extractall(tmp, filter="data")
    tree = Path(tmp) / build_run.detect_source_dir(names)
    build_dir = Path(tmp) / "build"
    flags = build_run.default_cmake_flags(platform.machine(), "native")
    subprocess.run(["cmake", "-S", str(tree), "-B", str(build_dir), *flags], stdout=subprocess.DEVNULL, check=True)
    return str(build_dir)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", required=True, help="llama.cpp binaries: llama-server and ggml-rpc-server")
    parser.add_argument("--model", required=True)
    parser.add_argument("--source", required=True, help="the llama.cpp source to build (the role's pinned sdist)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each measured window")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds of build before a window starts")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--out")
    args = parser.parse_args()

    bin_dir = Path(args.bin_dir)
    rpc_port, http_port = free_port(), free_port()
    threads = str(args.jobs)
    with tempfile.TemporaryDirectory(prefix="build-priority-") as tmp:
        build_dir = configure(args.source, tmp)
        log_path = Path(tmp) / "build.log"
        worker = subprocess.Popen(
            [bin_dir / "ggml-rpc-server", "--host", "127.0.0.1", "--port", str(rpc_port), "--threads", threads],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        server = subprocess.Popen(
            [bin_dir / "llama-server", "--model", args.model, "--host", "127.0.0.1", "--port", str(http_port),
             "--rpc", f"127.0.0.1:{rpc_port}", "-ngl", "99", "--threads", threads, "--ctx-size", "1024",
             "--parallel", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        rows = []
        try:
            wait_health(http_port)
            complete(http_port, args.tokens)  # the first request pays for the warm-up
            for number in range(args.rounds):
                order = KINDS[number % 3 :] + KINDS[: number % 3]
                for kind in order:
                    proc = None
                    with open(log_path, "w", encoding="utf-8") as log:
                        if kind != "none":
                            proc = start_build(kind, build_dir, ["llama-server", "ggml-rpc-server"], args.jobs, log)
                            time.sleep(args.warmup)
                        started = progress_lines(log_path)
                        rate = window(http_port, args.seconds, args.tokens)
                        lines = progress_lines(log_path) - started
                        if proc is not None:
                            finished = proc.poll() is not None
                            stop_build(proc)
                    row = {"round": number, "kind": kind, "tokens_per_second": round(rate, 2), "build_lines": lines}
                    if proc is not None and finished:
                        row["build_finished_early"] = True
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            for proc in (server, worker):
                proc.terminate()
                proc.wait(timeout=30)
    report = {"rounds": args.rounds, "seconds": args.seconds, "jobs": args.jobs, "windows": rows, "kinds": {}}
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        report["kinds"][kind] = {
            "tokens_per_second": round(statistics.median(r["tokens_per_second"] for r in mine), 2),
            "build_lines": statistics.median(r["build_lines"] for r in mine),
        }
    base = report["kinds"]["none"]["tokens_per_second"]
    for kind in ("normal", "idle"):
        report["kinds"][kind]["ratio_to_none"] = round(report["kinds"][kind]["tokens_per_second"] / base, 3)
    # Paired per round: each build window over the same round's window without a build.
    for kind in ("normal", "idle"):
        pairs = [
            next(r for r in rows if r["round"] == n and r["kind"] == kind)["tokens_per_second"]
            / next(r for r in rows if r["round"] == n and r["kind"] == "none")["tokens_per_second"]
            for n in range(args.rounds)
        ]
        report["kinds"][kind]["paired_ratios"] = [round(x, 3) for x in pairs]
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
