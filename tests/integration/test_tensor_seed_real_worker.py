"""A worker's tensor cache seeded from the model file before the load: llama-server then sends none of the seeded
bytes, and the output stays a single process's.

Gemma 3 270M Q4_K_M on one ggml-rpc-server (``-c``) on loopback with every layer; its only tensor over 10 MiB is the
token embedding (178 MB), which the tied output sends to the worker. The seeder (``_tensor_seed``, with the role's
C++ helper) writes it into the worker's cache before the worker starts. Bytes on the connection are counted by the
collection's proxy (``_delay_proxy --report``) between llama-server and the worker.

- Seeded: less than the seeded bytes cross the connection, the worker writes no cache file of its own ("saved to"),
  and the greedy ids equal one process's (``--device none --no-repack``).
- The check of the check: the same load on an empty cache sends the seeded bytes and more.
Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import test_real_model_identity as identity

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_smoke
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _delay_proxy
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed as ts

pytestmark = pytest.mark.needs_llama
bin_dir = identity.bin_dir  # its fixture: the llama.cpp build to run

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = identity.LOOPBACK
MARKER = b"\x0e"


class Proxy:
    """The collection's proxy with no delay, counting the bytes of every connection (``--report``)."""

    def __init__(self, target_port):
        self.port = _llama_smoke.free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                _delay_proxy.__file__,
                "--delay-ms",
                "0",
                "--report",
                f"{self.port}={LOOPBACK}:{target_port}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline() == "listening\n"

    def counts(self):
        """Connections and bytes to the worker, summed, once llama-server has exited (it opens a dozen). A last
        connection of our own marks the end: it sends one byte (HELLO's command byte, then nothing: the worker drops
        it), which no connection of llama-server's does, and every connection llama-server made was accepted
        before it. Lines are read until the marker and every connection opened have closed."""
        with socket.create_connection((LOOPBACK, self.port), timeout=30) as marker:
            marker.sendall(MARKER)
        opened, closed, sent, seen = set(), set(), 0, False
        while not seen or opened != closed:
            line = self.proc.stdout.readline()
            assert line, "the proxy ended before every connection had closed"
            word, number = line.split()[:2]
            if word == "open":
                opened.add(number)
                continue
            closed.add(number.rstrip(":"))
            count = int(line.split()[2])
            if count == len(MARKER) and not seen:
                seen = True
            else:
                sent += count
        return len(opened) - 1, sent

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def load(bin_dir, model, workdir, name, hasher=None):  # noqa: F811 (the fixture's value)
    """One worker with ``-c`` on ``workdir/cache/rpc``, seeded first when ``hasher`` is given, behind the proxy;
    llama-server loads every layer onto it and answers. Returns the ids, the bytes sent and what was seeded."""
    cache = workdir / "cache" / "rpc"
    cache.mkdir(parents=True)
    worker_port = _llama_smoke.free_port()
    seeded = []
    worker = proxy = None
    try:
        if hasher:
            # The plan: one endpoint (its name is only a label here) with every layer; seeded before the worker
            # starts, as the role would seed before a restart on a new plan.
            tensors, n_layer = ts.model_tensors(model)
            entries = ts.seed_lists(tensors, n_layer, ["worker"], [1.0])["worker"]
            seeded, stale = ts.seed(entries, str(cache), hasher)
            assert stale == [] and [row["state"] for row in seeded] == ["written"] * len(seeded)
        worker = identity.Process(
            [str(bin_dir / "ggml-rpc-server"), "-H", LOOPBACK, "-p", str(worker_port), "-t", "1", "-c"],
            workdir,
            "worker",
        )
        identity.wait_ready(worker, worker_port)
        proxy = Proxy(worker_port)
        rpc = ("--rpc", f"{LOOPBACK}:{proxy.port}", "-dev", "RPC0", "-ngl", "all", "--fit", "off")
        started, port = identity.server(bin_dir, model, workdir, name, *rpc)
        try:
            ids = identity.greedy_ids(port)
        finally:
            started.stop()
        connections, sent = proxy.counts()
    finally:
        if proxy:
            proxy.stop()
        if worker:
            worker.stop()
    return {
        "ids": ids,
        "sent": sent,
        "connections": connections,
        "seeded": seeded,
        "worker log": (workdir / "worker.log").read_text(errors="replace"),
        "cache": sorted(p.name for p in cache.iterdir()),
    }


@pytest.fixture(scope="module")
def runs(bin_dir, real_model, hasher, tmp_path_factory):  # noqa: F811
    got = {}
    single, port = identity.server(
        bin_dir, real_model, tmp_path_factory.mktemp("single"), "single", "--device", "none", "--no-repack"
    )
    try:
        got["single"] = identity.greedy_ids(port)
    finally:
        single.stop()
    got["seeded"] = load(bin_dir, real_model, tmp_path_factory.mktemp("seeded"), "seeded", hasher)
    got["cold"] = load(bin_dir, real_model, tmp_path_factory.mktemp("cold"), "cold")
    return got


def test_the_seeded_tensors_cross_no_connection_and_the_output_is_one_processs(runs):
    seeded = runs["seeded"]
    seeded_bytes = sum(row["size"] for row in seeded["seeded"])
    # What is seeded: the tied output's copy of the token embedding, the model's one tensor over 10 MiB.
    assert [row["name"] for row in seeded["seeded"]] == ["token_embd.weight"]
    assert seeded_bytes > 100 * 2**20
    # The load sent less than the seeded tensor's bytes in all (every small tensor and the protocol included) ...
    assert seeded["sent"] < seeded_bytes, seeded["sent"]
    # ... the worker answered the hash from the seeded file and wrote none of its own ...
    assert "saved to" not in seeded["worker log"]
    assert seeded["cache"] == sorted(row["hash"] for row in seeded["seeded"])
    # ... and the tokens are a single process's.
    assert seeded["ids"] == runs["single"]


def test_the_check_of_the_check_an_empty_cache_sends_those_bytes(runs):
    cold, seeded = runs["cold"], runs["seeded"]
    seeded_bytes = sum(row["size"] for row in seeded["seeded"])
    print(f"bytes to the worker: seeded {seeded['sent']}, cold {cold['sent']}; seeded tensors {seeded_bytes}")
    assert cold["sent"] - seeded["sent"] >= seeded_bytes, (cold["sent"], seeded["sent"])
    # The worker wrote the same file itself: the seeder named it as llama.cpp does.
    assert "saved to" in cold["worker log"]
    assert cold["cache"] == seeded["cache"]
    assert cold["ids"] == runs["single"]
