# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Performance model: generation tokens/s of a plan from link figures and each node's memory bandwidth.

Generating one token reads every weight once (memory bound) and, per RPC worker, crosses the link a fixed number
of times and the logits come back to the coordinator. For the layer split the nodes work one after another and the
last worker holds the output layer. Each RPC worker costs, per generated token (``rpc_token_seconds``)::

    round_trips * (rtt_w + call_seconds) + bytes_per_token / throughput_w

with ``round_trips`` (LAYER_ROUND_TRIPS) round trips per worker and token, ``rtt_w`` the network's round trip,
``call_seconds`` (RPC_CALL_SECONDS) what one round trip costs on the two hosts beyond the wire, ``bytes_per_token`` the
activations in and out and ``throughput_w`` the worker's link; and a worker reads its weights ``compute_factor``
(RPC_COMPUTE_FACTOR) times slower than the coordinator's in-process CPU backend. So::

    t_token = sum_i(bytes_i * factor_i / bw_i) + sum_workers(rpc_token_seconds(w)) + logits_bytes / throughput_last

The round trips are counted on the wire (issue #22 item 5: ``_delay_proxy --rpc-stats`` between llama-server and
its ggml-rpc-servers, tests/integration/test_rpc_wire_real_worker.py, llama.cpp 0c1e570, protocol 7.0.0). In the layer
split each worker gets, per generated token, its inputs (SET_TENSOR: 5-6 of them, no reply) and its graph
(GRAPH_RECOMPUTE, no reply: the same graph as the last token's; GRAPH_COMPUTE once per request), sent without
waiting, then ONE answered request: the GET_TENSOR that reads its output back (the hidden state, relayed by the
coordinator to the next worker, or the logits). One round trip per worker and token, 1 and 2 workers alike, the same in
every repeat (``round_trips_per_token``). Bytes per worker and token on the tiny model (8 x 256, vocabulary 1024):
3.1-3.8 kB to it (about 2 kB of it rpc_tensor descriptors, 296 bytes each) and 8 + 4 * n_embd or 8 + 4 * n_vocab
back.

The two RPC parameters were first fitted to the ``make bench`` report 20261201T144821Z (quiet machine, 1 thread per
process): a single process 56.26 tokens/s (17.77 ms per token), one worker on the coordinator's host over loopback
43.06 (23.22 ms), two workers in the layer split 41.9 (23.87 ms). The second worker added 0.64 ms: its one round trip
per token (RPC_CALL_SECONDS 0.64 ms). The first added 5.45 ms, which was read as workers computing 1.27 times slower
than the in-process backend. That run's llama-server kept its prompt cache in RAM (``--cache-ram`` 8192 MiB, the
default then), and its one worker shared the coordinator's two cores. With ``--cache-ram 0`` (the coordinator's
default since) and a worker on another host (``make bench`` 20261203T175040Z, quiet): single 30.29 tokens/s (33.0 ms),
one worker 29.17 (34.3 ms): 1.3 ms added, which one round trip and the hidden state over the 100 Mbit/s link account
for with no slower compute. RPC_COMPUTE_FACTOR is therefore 1.0 (kept as a parameter: ``tools/seed_paper.py`` shows
how the seed's figures move with it).

For the tensor split (``-sm tensor``) every node reads its slice in parallel, but each layer ends with a
synchronisation through the coordinator (two per layer: attention and feed-forward), and each worker sends its share
of the logits (taken as even)::

    t_token = max_i(bytes_i / bw_i) + sum_w((layers * syncs_per_layer + 1) * rtt_w)
              + sum_w(logits_bytes / n / throughput_w)

Counted on the wire (2 workers, 8 layers): 17 GET_TENSOR per worker and token, 2 per layer and the logits, and the
coordinator reads them one worker after the other: 20 ms of added round trip made a token 690-750 ms slower, 34
round trips (was: ``layers * syncs_per_layer * max_w(rtt_w)``, 16 of them, the workers' taken as parallel). Not
charged: the tensor split sends each worker its graphs in full every token (33 GRAPH_COMPUTE, 1.4 MB per worker and
token on 8 layers; the layer split re-runs its one graph with a 13-byte GRAPH_RECOMPUTE).

A worker without a throughput (the coordinator's own host, loopback) costs no transfer time. The logits are what a
real model's large vocabulary adds (Gemma 3: 1 MiB per token, f32), next to the hidden state (a few KiB).

A link shaped by a token bucket (``tc tbf``, as the lab caps its coordinator at 100 Mbit/s: 125,000 bytes of burst)
passes a message up to its ``burst`` at the wire's own speed when the bucket has refilled since the last one, which it
has between tokens: a token's few kB wait for nothing, where a real 100 Mbit/s NIC serialises them (9.2 kB: 0.74 ms).
A worker's ``burst`` (bytes, 0 by default: a real link) is therefore subtracted from each per-token transfer. Measured
(``make bench`` 20261203T220410Z, quiet): single 16.14 ms per token, two workers in the layer split 16.84 ms; the
transfer at the link's rate would have added 1.9 ms more than was measured (predicted/measured 0.87), without it the
prediction is 0.97.

Nodes that share one machine's memory (the lab) cannot exceed its aggregate bandwidth: the compute term is at
least ``sum(bytes) / shared_bandwidth`` when that is given.

Speculative decoding (``speculative``) trades passes for tokens. One pass drafts ``k`` tokens and verifies
them with the target in one batch of ``k + 1``. The drafted tokens are accepted up to the first one the target would
not have produced, and the target adds its own token, so with ``a`` the acceptance rate (the probability that a
drafted token is accepted when the ones before it were) a pass yields on average (Leviathan et al. 2023, "Fast
Inference from Transformers via Speculative Decoding", eq. 1; ``tokens_per_pass``)::

    1 + accepted_per_pass(k, a) = 1 + a * (1 - a ** k) / (1 - a)    (k + 1 when a = 1)

It can never exceed ``1 / (1 - a)``, however long the draft: the longest draft the settings allow (64 tokens for
ngram-mod) is what each pass verifies, not what it yields. llama-server's own figure, drafted tokens accepted /
drafted, is ``accepted_per_pass / k`` (below ``a``); a benchmark that counted the passes gives the accepted tokens per
pass and the drafted tokens per pass directly (``speculative``'s ``accepted``; an n-gram type drafts only where the
text repeats, so its mean draft is shorter than its maximum). Per pass it costs::

    t_pass = (k + 1) * t_draft                                   (a draft model; 0 for the n-gram types)
           + sum_i(read_i * (1 + k * verify_slope_for(share)))   (weights read once, compute grows with k)
           + sum_workers(round_trips * (rtt_w + call_seconds) + (k + 1) * activations / throughput_w)
           + (k + 1) * logits / throughput_last

``t_draft``: the draft reads its weights at its node's bandwidth; on a worker each draft token adds that worker's round
trip and the draft's logits back. The draft model runs ``k`` passes one token after another and one batch that catches
it up on the accepted tokens (``common/speculative.cpp``, draft-simple: ``k + 1``). The round trips of the
verification are the plain token's: one per worker and pass, not per token, which is where a slow mesh gains.
``verify_slope_for``: each drafted token adds that fraction of one token's time to the pass that verifies it, in two
parts. The body's: a batch of ``n`` new tokens behind the cached text costs about ``VERIFY_BODY_SLOPE`` of a token
more per token (measured through one loopback RPC worker, docs/development.md). The output head's: a verification
computes, returns and samples the logits of every verified position where a prompt computes one, so each drafted token
also costs ``VERIFY_HEAD_SLOPE`` times the head's share of the bytes a token reads (``share``): 0.72 on Gemma 3 270M,
whose 262,144-entry head is its largest matrix, about 0.03 on Qwen2.5-32B. The head's part is what the benchmark fits
on the bench lab (``_bench_spec.calibrated_slope``: its n-gram configurations at the least round trip,
docs/benchmark.md).
"""

from __future__ import annotations

#: Round trips per RPC worker per generated token in the layer split, counted on the wire (module docstring): the one
#: answered request, GET_TENSOR of the worker's output; its inputs and its graph go one way, unanswered.
LAYER_ROUND_TRIPS = 1
#: Seconds one RPC round trip costs on the hosts beyond the network's (calibrated: see the module docstring).
RPC_CALL_SECONDS = 0.00064
#: How much slower an RPC worker reads its weights than the in-process CPU backend (1.0: measured, module docstring).
RPC_COMPUTE_FACTOR = 1.0
#: Synchronisations per layer in the tensor split. Counted on the wire (2 workers, 8 layers, ``-sm tensor``): 17
#: GET_TENSOR per worker and token, 2 per layer and the logits, one worker after the other.
TENSOR_SYNCS_PER_LAYER = 2


#: What each token of a batch behind the cached text adds, as a fraction of one token's time (module docstring):
#: ``n`` = 1..8 new tokens through a loopback RPC worker holding Gemma 3 270M, a least-squares fit (0.081).
VERIFY_BODY_SLOPE = 0.08
#: What each verified position's logits add per unit of the head's share of a token's bytes (module docstring): the
#: benchmark's fitted slope on the bench lab (0.329 on Gemma 3 270M, head share 0.723) less the body's, over the share.
VERIFY_HEAD_SLOPE = 0.34


def head_share(output_bytes, read_bytes):
    """The output head's share of the bytes a token reads (the planner's ``output_bytes`` over the layers' and its)."""
    return float(output_bytes) / float(read_bytes) if read_bytes else 0.0


def verify_slope_for(share, body=VERIFY_BODY_SLOPE, head=VERIFY_HEAD_SLOPE):
    """What each drafted token adds to its verification pass, as a fraction of one token's time, for a model whose
    output head is ``share`` of the bytes a token reads (module docstring)."""
    return float(body) + float(head) * float(share)


def round_trips_per_token(workers, split_mode="layer", layers=1):
    """Answered RPC requests (round trips on the wire) per generated token for ``workers`` RPC workers, as counted by
    ``_delay_proxy --rpc-stats``: the layer split, LAYER_ROUND_TRIPS per worker (one after another); the tensor split,
    per worker TENSOR_SYNCS_PER_LAYER per layer and one for its logits (one worker after the other too); none
    without workers."""
    if split_mode not in ("layer", "tensor", "none"):
        raise ValueError(f"unknown split mode {split_mode!r}: layer, tensor or none")
    if workers <= 0 or split_mode == "none":
        return 0
    if split_mode == "tensor":
        return workers * (TENSOR_SYNCS_PER_LAYER * layers + 1)
    return workers * LAYER_ROUND_TRIPS


def predict(
    nodes,
    split_mode="layer",
    layers=1,
    activation_bytes=0,
    shared_bandwidth=0.0,
    round_trips=LAYER_ROUND_TRIPS,
    syncs_per_layer=TENSOR_SYNCS_PER_LAYER,
    logits_bytes=0,
    call_seconds=RPC_CALL_SECONDS,
    compute_factor=RPC_COMPUTE_FACTOR,
):
    """Predicted seconds per token and tokens/s.

    ``nodes``: list of dicts ``{name, bytes, bandwidth}`` (weights read per token, bytes/s) and, for RPC
    workers in their order, ``rtt`` (seconds), ``throughput`` (bytes/s) and optionally ``burst`` (bytes its link
    passes unthrottled, a token bucket's depth). Returns a dict with ``seconds_per_token``,
    ``tokens_per_second`` and the terms (``compute``, ``network``) so the planner can explain its choice.
    """
    if split_mode not in ("layer", "tensor", "none"):
        raise ValueError(f"unknown split mode {split_mode!r}: layer, tensor or none")
    if not nodes:
        raise ValueError("a plan needs at least one node")
    times = []
    for node in nodes:
        bandwidth = float(node.get("bandwidth") or 0)
        if bandwidth <= 0:
            raise ValueError(f"node {node.get('name')!r} has no memory bandwidth")
        factor = float(compute_factor) if node.get("rtt") is not None else 1.0
        times.append(float(node.get("bytes", 0)) * factor / bandwidth)
    total = sum(float(n.get("bytes", 0)) for n in nodes)
    workers = [n for n in nodes if n.get("rtt") is not None]
    if split_mode == "tensor":
        compute = max(times)
        network = sum((layers * syncs_per_layer + 1) * float(w["rtt"]) for w in workers)
        network += sum(_transfer(logits_bytes / len(workers), w) for w in workers)
    else:
        compute = sum(times)
        network = 0.0
        for w in workers:
            network += rpc_token_seconds(w, round_trips, call_seconds, activation_bytes)
        if workers:
            network += _transfer(logits_bytes, workers[-1])
    if shared_bandwidth and shared_bandwidth > 0:
        compute = max(compute, total / float(shared_bandwidth))
    seconds = compute + network
    return {
        "seconds_per_token": seconds,
        "tokens_per_second": 1.0 / seconds if seconds > 0 else 0.0,
        "compute_seconds": compute,
        "network_seconds": network,
    }


def accepted_per_pass(drafted, acceptance):
    """Drafted tokens accepted per verification pass on average (module docstring): drafts of ``drafted`` tokens
    (``k``, a mean may be fractional), each accepted with probability ``acceptance`` (from 0 to 1) when the tokens
    before it were, up to the first one refused: ``a * (1 - a ** k) / (1 - a)``, ``k`` when every one is."""
    if drafted < 0:
        raise ValueError(f"drafted tokens per pass must not be negative, got {drafted}")
    a = float(acceptance)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"an acceptance rate is from 0 to 1, got {acceptance}")
    if a == 1.0:
        return float(drafted)
    return a * (1.0 - a ** float(drafted)) / (1.0 - a)


def tokens_per_pass(drafted, acceptance):
    """Tokens one verification pass yields on average: the target's own and the accepted drafted ones,
    ``1 + accepted_per_pass(drafted, acceptance)``."""
    return 1.0 + accepted_per_pass(drafted, acceptance)


def speculative(
    nodes,
    drafted,
    acceptance=None,
    draft=None,
    activation_bytes=0,
    logits_bytes=0,
    shared_bandwidth=0.0,
    verify_slope=None,
    share=0.0,
    call_seconds=RPC_CALL_SECONDS,
    compute_factor=RPC_COMPUTE_FACTOR,
    accepted=None,
):
    """Predicted seconds per token and tokens/s of the layer split with speculative decoding (module docstring).

    ``nodes`` as ``predict``'s; ``drafted``: tokens drafted per pass (``k``: the draft length, or a benchmark's mean
    drafted tokens per pass); ``acceptance``: the probability that a drafted token is accepted when the ones before it
    were (``accepted_per_pass``); ``accepted``: instead of it, the accepted tokens per pass a benchmark counted (its
    accepted tokens over its passes); ``draft``: the draft model, ``{bytes, bandwidth}`` (weights read per draft
    token, bytes/s) and, on a worker, ``rtt``, ``throughput``, ``burst`` and ``logits_bytes``; None for the n-gram
    types (drafting costs nothing). ``activation_bytes``/``logits_bytes``: per token, as ``predict``'s;
    ``verify_slope``: what each drafted token adds to the verification's compute, as a fraction of one token's; None:
    ``verify_slope_for(share)``, ``share`` the output head's share of a token's bytes (``head_share``). Returns
    ``predict``'s keys (per generated token) and ``tokens_per_pass``, ``draft_seconds``, ``verify_seconds`` (per
    pass)."""
    if accepted is None and acceptance is None:
        raise ValueError("speculative decoding's prediction needs an acceptance rate or the accepted tokens per pass")
    if accepted is not None and not 0.0 <= float(accepted) <= max(float(drafted), 0.0):
        raise ValueError(f"accepted tokens per pass are from 0 to the drafted ones ({drafted}), got {accepted}")
    batch = float(drafted) + 1
    one = predict(
        nodes,
        "layer",
        activation_bytes=activation_bytes * batch,
        shared_bandwidth=shared_bandwidth,
        logits_bytes=logits_bytes * batch,
        call_seconds=call_seconds,
        compute_factor=compute_factor,
    )
    slope = verify_slope_for(share) if verify_slope is None else float(verify_slope)
    compute = one["compute_seconds"] * (1.0 + slope * float(drafted))
    drafting = 0.0
    if draft:
        bandwidth = float(draft.get("bandwidth") or 0)
        if bandwidth <= 0:
            raise ValueError("the draft model's node has no memory bandwidth")
        per_token = float(draft.get("bytes", 0)) / bandwidth
        if draft.get("rtt") is not None:
            per_token += rpc_token_seconds(draft, LAYER_ROUND_TRIPS, call_seconds)
            per_token += _transfer(draft.get("logits_bytes", 0), draft)
        drafting = batch * per_token
    tokens = 1.0 + float(accepted) if accepted is not None else tokens_per_pass(drafted, acceptance)
    seconds = (drafting + compute + one["network_seconds"]) / tokens
    return {
        "seconds_per_token": seconds,
        "tokens_per_second": 1.0 / seconds if seconds > 0 else 0.0,
        "compute_seconds": compute / tokens,
        "network_seconds": one["network_seconds"] / tokens,
        "tokens_per_pass": tokens,
        "draft_seconds": drafting,
        "verify_seconds": compute + one["network_seconds"],
    }


def rpc_token_seconds(worker, round_trips=LAYER_ROUND_TRIPS, call_seconds=RPC_CALL_SECONDS, bytes_per_token=0):
    """Seconds one RPC worker adds to each generated token: ``round_trips * (rtt + call_seconds)`` plus its
    ``bytes_per_token`` over its link (``worker``: ``rtt`` in seconds, ``throughput`` in bytes/s or none)."""
    return round_trips * (float(worker["rtt"]) + float(call_seconds)) + _transfer(bytes_per_token, worker)


def _transfer(size, worker):
    """Seconds to move ``size`` bytes (per token) over a worker's link: what exceeds the link's token-bucket ``burst``
    at its ``throughput`` (0 when the throughput is not known)."""
    throughput = float(worker.get("throughput") or 0)
    waited = float(size or 0) - float(worker.get("burst") or 0)
    return waited / throughput if throughput > 0 and waited > 0 else 0.0


def effective_bandwidth(model_bytes, tokens_per_second):
    """Bytes/s one process reads its weights at, calibrated from a single-process run's tokens/s."""
    if model_bytes <= 0 or tokens_per_second <= 0:
        raise ValueError("calibration needs the model size and a positive tokens/s")
    return float(model_bytes) * float(tokens_per_second)


def ratio(predicted, measured):
    """predicted / measured (None when nothing was measured)."""
    if not measured:
        return None
    return predicted / measured


def load_seconds(
    *,
    local_bytes,
    sshfs_bytes,
    hashed_bytes,
    offers,
    sent_bytes,
    disk_rate,
    sshfs_rate,
    hash_rate,
    link_rate,
    rtt,
):
    """Seconds llama-server spends loading a model onto its RPC workers, term by term.

    It reads every weight (``local_bytes`` from its own disk at ``disk_rate``, ``sshfs_bytes`` over SSHFS at
    ``sshfs_rate``), hashes the ``hashed_bytes`` of the weight tensors over the RPC cache's threshold
    (``_model_profile.CACHE_THRESHOLD_BYTES``) bound for a worker (``hash_rate``), offers each of them by hash
    (``offers`` synchronous round trips of ``rtt``), and sends the
    ``sent_bytes`` the workers lack over its link (``link_rate``; a worker on its own host is loopback, not counted).
    One tensor after another, so the terms add up. Rates in bytes/s, ``rtt`` in seconds."""
    terms = {
        "read_local": local_bytes / disk_rate,
        "read_sshfs": sshfs_bytes / sshfs_rate if sshfs_bytes else 0.0,
        "hash": hashed_bytes / hash_rate,
        "offer": offers * rtt,
        "send": sent_bytes / link_rate,
    }
    terms["total"] = sum(terms.values())
    return terms


def seed_seconds(worker_bytes, disk_rate, hash_rate):
    """Seconds to fill every worker's tensor cache from its own copy of the shards, the workers in parallel: each
    reads its tensors, hashes them and writes the cache files (the read and the write share its disk)."""
    return max((size * (2 / disk_rate + 1 / hash_rate) for size in worker_bytes), default=0.0)
