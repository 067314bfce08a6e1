# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-token cost of RPC, counted on the wire: llama-server's requests to its ggml-rpc-servers per generated token.

llama-server (``--rpc``, layer split, every layer on the workers) reaches one or two ggml-rpc-servers on loopback
through the collection's proxy (``_delay_proxy --rpc-stats``), which counts requests, replies and bytes per command
on each connection. After a warm-up, greedy completions of N1 and N2 tokens (``ignore_eos``, ``cache_prompt`` off, the
same prompt) are counted between SIGUSR1 snapshots; per-token figures are (count during N2 - count during N1) /
(N2 - N1), so the prompt and the request's own costs cancel. Twice, to show they repeat. ``--cache-ram 0``: the
server's prompt cache would read the previous request's KV cache back from the worker at the start of the next one
(two GET_TENSOR per layer, seen on the wire), a per-request cost that depends on the previous request's length.

What must hold, and where it comes from:

- from ggml-rpc.cpp (0c1e570): ``ggml_backend_rpc_graph_compute`` sends one GRAPH_COMPUTE, or a GRAPH_RECOMPUTE when
  the graph is the one it sent last, for each graph the scheduler gives a worker; neither has a reply. In the layer
  split each worker gets one graph per token (observed: 1 per token, 1 GRAPH_COMPUTE per request then recomputes);
- from ggml-rpc.cpp: ``cpy_tensor`` between two RPC servers refuses, so a worker's output reaches the next device
  through the coordinator: one GET_TENSOR (answered), then a SET_TENSOR (unanswered) to the next. Observed: one
  GET_TENSOR per worker and token, the only answered request: round trips per token = the number of workers;
- from the model's shapes: that GET_TENSOR brings back the hidden state (n_embd f32) from a worker that is not the
  last, the logits (n_vocab f32) from the last one, each behind the 8-byte reply header.

The proxy's wait for each reply (``rtt``, the worker side's: it includes the queued graph's computation) and the
per-token milliseconds are printed (``-s``), never asserted. Only 127.0.0.1 is contacted.

    LLAMARPC_LLAMA_BIN_DIR=... pytest -s tests/integration/test_rpc_wire_real_worker.py
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import test_real_model_identity as identity
from conftest import tiny_model

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_smoke
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _delay_proxy
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_wire as wire

pytestmark = pytest.mark.needs_llama
bin_dir = identity.bin_dir  # its fixture: the llama.cpp build to run

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = identity.LOOPBACK
N1, N2 = 8, 40
PROMPT = "Six small machines"
# lab/tools/tiny_gguf.py's "tiny" preset: 8 blocks, 256 wide, a vocabulary of 1024.
N_EMBD, N_VOCAB = 256, 1024
REPLY_HEADER = 8


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("model"), "tiny")


class Proxy:
    """``_delay_proxy --rpc-stats`` in front of each worker; ``snapshot()`` sends SIGUSR1 and reads the answer."""

    def __init__(self, worker_ports, delay_ms):
        self.ports = [_llama_smoke.free_port() for _port in worker_ports]
        routes = [f"{port}={LOOPBACK}:{target}" for port, target in zip(self.ports, worker_ports, strict=True)]
        self.proc = subprocess.Popen(
            [sys.executable, _delay_proxy.__file__, "--delay-ms", str(delay_ms), "--rpc-stats", *routes],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline() == "listening\n"

    def snapshot(self):
        """Counters per route (listen port), summed over the route's connections: {port: commands mapping}."""
        self.proc.send_signal(signal.SIGUSR1)
        while True:
            line = self.proc.stdout.readline()
            assert line, "the proxy ended"
            word, _sep, rest = line.partition(" ")
            if word == "rpc-snapshot":
                break
        per_route = {port: {} for port in self.ports}
        for connection in json.loads(rest)["connections"]:
            assert connection["parsing"], connection["note"]  # llama-server's streams are all understood
            route = per_route[connection["listen_port"]]
            for name, stats in connection["commands"].items():
                into = route.setdefault(name, dict.fromkeys(stats, 0))
                for key, value in stats.items():
                    if key in ("rtt_min_s", "rtt_max_s"):
                        if value is not None:
                            pick = min if key == "rtt_min_s" else max
                            into[key] = value if not into[key] else pick(into[key], value)
                    else:
                        into[key] += value
        return per_route

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def complete(port, n):
    body = {"prompt": PROMPT, "n_predict": n, "temperature": 0, "cache_prompt": False, "ignore_eos": True}
    answer = identity.post_json(f"http://{LOOPBACK}:{port}/completion", body, timeout=300)
    assert answer["timings"]["predicted_n"] == n, answer["timings"]
    return answer["timings"]


def measure(bin_dir, model, workdir, workers, delay_ms, split="layer"):  # noqa: F811 (the fixture's value)
    """Two rounds of (N1, N2) completions through the proxy; per round and route the per-token counters."""
    ports = [_llama_smoke.free_port() for _i in range(workers)]
    started = []
    proxy = server = None
    try:
        for i, port in enumerate(ports):
            worker = identity.Process(
                [str(bin_dir / "ggml-rpc-server"), "-H", LOOPBACK, "-p", str(port), "-t", "1"], workdir, f"worker{i}"
            )
            started.append(worker)
            identity.wait_ready(worker, port)
        proxy = Proxy(ports, delay_ms)
        rpc = ",".join(f"{LOOPBACK}:{port}" for port in proxy.ports)
        devices = ",".join(f"RPC{i}" for i in range(workers))
        extra = ("--rpc", rpc, "-dev", devices, "-ngl", "all", "--fit", "off", "-sm", split, "--cache-ram", "0")
        server, http_port = identity.server(bin_dir, model, workdir, f"server{workers}", *extra)
        complete(http_port, 4)  # warm-up
        rounds = []
        for _round in range(2):
            before = proxy.snapshot()
            short = complete(http_port, N1)
            middle = proxy.snapshot()
            long = complete(http_port, N2)
            after = proxy.snapshot()
            per_token = {}
            for port in proxy.ports:
                d1 = wire.difference(middle[port], before[port])
                d2 = wire.difference(after[port], middle[port])
                per_token[port] = {
                    name: {key: (d2[name][key] - d1.get(name, {}).get(key, 0)) / (N2 - N1) for key in d2[name]}
                    for name in d2
                }
            rounds.append(
                {
                    "per_token": per_token,
                    "during_long": {port: wire.difference(after[port], middle[port]) for port in proxy.ports},
                    "ms_per_token": (short["predicted_per_token_ms"], long["predicted_per_token_ms"]),
                }
            )
        return proxy.ports, rounds
    finally:
        for process in [server, *started]:
            if process:
                process.stop()
        if proxy:
            proxy.stop()


def describe(workers, delay_ms, ports, rounds, split="layer"):
    """The figures for the notes: per worker and command, per generated token, and the proxy's reply waits."""
    lines = [f"{workers} worker(s), {split} split, proxy delay {delay_ms} ms, N1={N1} N2={N2}"]
    for number, one in enumerate(rounds, 1):
        lines.append(
            f" round {number}: llama-server ms/token N1 {one['ms_per_token'][0]:.2f} N2 {one['ms_per_token'][1]:.2f}"
        )
        for index, port in enumerate(ports):
            for name, stats in sorted(one["per_token"][port].items()):
                long = one["during_long"][port].get(name, {})
                waits = long.get("rtt_count", 0)
                mean = f"{1000 * long['rtt_total_s'] / waits:.3f} ms" if waits else "-"
                lines.append(
                    f"  worker {index} {name:16} {stats['requests']:5.2f} req/token, "
                    f"{stats['request_bytes']:8.1f} B/token to it, {stats['responses']:4.2f} replies/token, "
                    f"{stats['response_bytes']:8.1f} B/token back; reply wait mean over N2 run {mean}"
                )
    return "\n".join(lines)


# With a delay the counts must not move; the per-token milliseconds (printed) then show what one added round trip per
# worker costs: measured +22 ms (1 worker) and +40 ms (2 workers) per token for 20 ms added (--delay-ms 10).
@pytest.mark.parametrize(("workers", "delay_ms"), [(1, 0), (2, 0), (1, 10), (2, 10)])
def test_round_trips_per_token_are_one_per_worker_in_the_layer_split(bin_dir, model, tmp_path, workers, delay_ms):  # noqa: F811
    ports, rounds = measure(bin_dir, model, tmp_path, workers, delay_ms)
    print("\n" + describe(workers, delay_ms, ports, rounds))
    first, second = rounds
    # The per-token counts and bytes repeat exactly (they are the same computation on the same shapes).
    assert _same_counts(first, second), (first["per_token"], second["per_token"])
    for one in rounds:
        per_token = one["per_token"]
        round_trips = 0
        for index, port in enumerate(ports):
            got = per_token[port]
            graphs = got.get("GRAPH_COMPUTE", {}).get("requests", 0) + got.get("GRAPH_RECOMPUTE", {}).get("requests", 0)
            assert graphs == 1, got  # one graph per worker and token
            answered = {name: stats["responses"] for name, stats in got.items() if stats["responses"]}
            assert answered == {"GET_TENSOR": 1}, got  # its output, read back: the only round trip
            round_trips += sum(answered.values())
            last = index == len(ports) - 1
            assert got["GET_TENSOR"]["response_bytes"] == REPLY_HEADER + 4 * (N_VOCAB if last else N_EMBD), got
            to_worker = sum(stats["request_bytes"] for stats in got.values())
            assert to_worker > 0  # inputs, the graph call and the read request
        assert round_trips == workers


def test_the_tensor_split_reads_back_twice_per_layer_and_the_logits(bin_dir, model, tmp_path):  # noqa: F811
    """``-sm tensor`` on two workers: 2 GET_TENSOR per layer and one for the logits per worker and token (observed; the
    performance model's TENSOR_SYNCS_PER_LAYER), and a full graph each time: no GRAPH_RECOMPUTE (printed: its bytes)."""
    ports, rounds = measure(bin_dir, model, tmp_path, 2, 0, "tensor")
    print("\n" + describe(2, 0, ports, rounds, "tensor"))
    assert _same_counts(*rounds)
    layers = 8
    for one in rounds:
        for port in ports:
            got = one["per_token"][port]
            answered = {name: stats["responses"] for name, stats in got.items() if stats["responses"]}
            assert answered == {"GET_TENSOR": 2 * layers + 1}, got
            assert "GRAPH_RECOMPUTE" not in got, got
            assert got["GRAPH_COMPUTE"]["requests"] >= 1, got


def _same_counts(first, second):
    """Equal per-token requests, replies and bytes (the reply waits differ from round to round)."""
    keys = ("requests", "request_bytes", "responses", "response_bytes", "rtt_count")

    def strip(one):
        return {
            port: {name: {key: stats[key] for key in keys} for name, stats in commands.items()}
            for port, commands in one["per_token"].items()
        }

    return strip(first) == strip(second)
