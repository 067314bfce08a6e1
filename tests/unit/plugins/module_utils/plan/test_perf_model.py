# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The performance model: layer split adds up, tensor split runs in parallel and pays per-layer syncs."""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _perf_model as pm

GB = 1e9
#: The network and compute terms alone, without the calibrated per-worker RPC costs.
BARE = {"call_seconds": 0.0, "compute_factor": 1.0}


def test_single_node_is_bytes_over_bandwidth():
    out = pm.predict([{"name": "a", "bytes": 2 * GB, "bandwidth": 10 * GB}], "none")
    assert out["seconds_per_token"] == pytest.approx(0.2)
    assert out["tokens_per_second"] == pytest.approx(5.0)
    assert out["network_seconds"] == 0


def test_layer_split_adds_compute_and_round_trips():
    nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.005, "throughput": 1e7} for n in "ab"]
    out = pm.predict(nodes, "layer", activation_bytes=10_000, **BARE)
    # 2 x 0.1 s compute, per worker 1 round trip of 5 ms (counted on the wire) and 1 ms of activations.
    assert out["compute_seconds"] == pytest.approx(0.2)
    assert out["network_seconds"] == pytest.approx(2 * (0.005 + 0.001))


def test_tensor_split_wins_on_fast_links_and_loses_on_slow_ones():
    def both(rtt):
        nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": rtt} for n in "abcd"]
        return (
            pm.predict(nodes, "layer", layers=32)["tokens_per_second"],
            pm.predict(nodes, "tensor", layers=32)["tokens_per_second"],
        )

    layer, tensor = both(0.0001)
    assert tensor > layer
    layer, tensor = both(0.01)
    assert layer > tensor


def test_shared_bandwidth_caps_parallel_compute():
    nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.0} for n in "ab"]
    free = pm.predict(nodes, "tensor", **BARE)
    shared = pm.predict(nodes, "tensor", shared_bandwidth=10 * GB, **BARE)
    assert free["compute_seconds"] == pytest.approx(0.1)
    assert shared["compute_seconds"] == pytest.approx(0.2)


def test_calibration_and_errors():
    assert pm.effective_bandwidth(1000, 2.5) == 2500
    assert pm.ratio(3, 2) == 1.5
    assert pm.ratio(3, 0) is None
    with pytest.raises(ValueError, match="split mode"):
        pm.predict([{"name": "a", "bytes": 1, "bandwidth": 1}], "row")
    with pytest.raises(ValueError, match="memory bandwidth"):
        pm.predict([{"name": "a", "bytes": 1, "bandwidth": 0}])
    with pytest.raises(ValueError, match="at least one node"):
        pm.predict([])
    with pytest.raises(ValueError, match="calibration"):
        pm.effective_bandwidth(0, 1)


def test_logits_cross_the_output_workers_link_only():
    # A Gemma-sized vocabulary: 1 MiB of f32 logits per token, over a 12.5 MB/s (100 Mbit/s) link.
    logits = 262144 * 4
    slow = [
        {"name": "local", "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.0},  # the coordinator's own host: no link
        {"name": "far", "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.0, "throughput": 12.5e6},
    ]
    out = pm.predict(slow, "layer", logits_bytes=logits, **BARE)
    assert out["network_seconds"] == pytest.approx(logits / 12.5e6)
    # The output layer on the coordinator's own host: nothing crosses a link.
    assert pm.predict(slow[::-1], "layer", logits_bytes=logits, **BARE)["network_seconds"] == 0
    # Tensor split: each worker sends its half of the logits.
    tensor = pm.predict(slow, "tensor", logits_bytes=logits, **BARE)
    assert tensor["network_seconds"] == pytest.approx(logits / 2 / 12.5e6)
    assert pm.predict(slow, "layer", **BARE)["network_seconds"] == 0


# The per-token cost of RPC (issue #22 item 5). First calibrated on make bench 20261201T144821Z: a single process
# 56.26 tok/s, one worker on the coordinator's host over loopback 43.06 (llama-server's prompt cache on).
SINGLE_TPS, ONE_LOOPBACK_TPS = 56.26, 43.06
# make bench 20261203T175040Z (quiet, --cache-ram 0): a single process 30.29 tok/s, one worker on another host 29.17,
# over a 100 Mbit/s link measured at 11.98 MB/s; the cache model's hidden state 9216 bytes, its logits 4096.
SINGLE_0312, REMOTE_0312, LINK_0312, HIDDEN, LOGITS = 30.29, 29.17, 11.98e6, 9216, 4096


def _bench(workers, size=222e6, single=SINGLE_TPS, throughput=None, **options):
    """The bench's cache model (222 MB) as llama_benchmark predicts it: bandwidth from the single process, the
    weights shared evenly, loopback/bridge round trips taken as 0."""
    bandwidth = pm.effective_bandwidth(size, single)
    if not workers:
        return pm.predict([{"name": "single", "bytes": size, "bandwidth": bandwidth}], "none", **options)
    nodes = [
        {"name": f"w{i}", "bytes": size / workers, "bandwidth": bandwidth, "rtt": 0.0, "throughput": throughput}
        for i in range(workers)
    ]
    return pm.predict(nodes, "layer", **options)


def test_a_worker_on_another_host_costs_its_round_trip_and_its_link_not_slower_compute():
    """With the prompt cache off and the worker on its own host, one round trip and the hidden state and logits over
    the link account for the measured cost: workers compute as fast as the in-process backend (factor 1.0). The
    factor 1.27 fitted to the first run (prompt cache on, a loopback worker sharing the coordinator's cores) would
    predict 0.79 of what was measured."""
    measured = {"activation_bytes": 2 * HIDDEN, "logits_bytes": LOGITS}
    one = _bench(1, 217e6, SINGLE_0312, LINK_0312, **measured)
    assert pm.RPC_COMPUTE_FACTOR == 1.0
    assert one["tokens_per_second"] / REMOTE_0312 == pytest.approx(0.965, abs=0.01)
    old = _bench(1, 217e6, SINGLE_0312, LINK_0312, compute_factor=1.27, **measured)
    assert old["tokens_per_second"] / REMOTE_0312 == pytest.approx(0.77, abs=0.01)
    # The first run's loopback worker (prompt cache on, cores shared) stays unexplained: 1.31 bare, 1.26 with the call.
    assert _bench(1, **BARE)["tokens_per_second"] / ONE_LOOPBACK_TPS == pytest.approx(1.31, abs=0.01)
    assert _bench(1)["tokens_per_second"] / ONE_LOOPBACK_TPS == pytest.approx(1.26, abs=0.01)


def test_rpc_token_seconds_names_its_terms():
    worker = {"rtt": 0.002, "throughput": 12.5e6}
    # 2 x (2 ms + 0.32 ms) + 50 kB over 12.5 MB/s (4 ms)
    assert pm.rpc_token_seconds(worker, 2, 0.00032, 50_000) == pytest.approx(2 * 0.00232 + 0.004)
    assert pm.rpc_token_seconds({"rtt": 0.0}, 3, 0.001) == pytest.approx(0.003)
    # Each worker pays it: a third worker costs a third worker's exchanges, at equal compute.
    two, three = _bench(2)["network_seconds"], _bench(3)["network_seconds"]
    assert three - two == pytest.approx(pm.LAYER_ROUND_TRIPS * pm.RPC_CALL_SECONDS)


def test_round_trips_per_token_are_the_counts_on_the_wire():
    """Counted by the proxy (tests/integration/test_rpc_wire_real_worker.py): in the layer split one answered request
    (GET_TENSOR) per worker and token; in the tensor split 17 per worker on 8 layers (2 per layer and the logits)."""
    assert [pm.round_trips_per_token(n) for n in (0, 1, 2, 3)] == [0, 1, 2, 3]
    assert pm.round_trips_per_token(2, "tensor", layers=8) == 2 * 17
    assert pm.round_trips_per_token(4, "none") == 0
    with pytest.raises(ValueError, match="split mode"):
        pm.round_trips_per_token(1, "row")


def test_each_worker_pays_one_added_round_trip_per_token_in_the_layer_split():
    """The relation the delay runs measured (tests/integration/test_rpc_wire_real_worker.py prints them; 2 workers
    behind a proxy adding 20 ms of round trip cost 39.6 ms more per token, 40 ms cost 80-84 ms): added network time =
    workers x added round trip."""
    for workers in (1, 2, 3):
        nodes = [{"name": str(i), "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.0} for i in range(workers)]
        base = pm.predict(nodes, "layer")["seconds_per_token"]
        slow = pm.predict([{**n, "rtt": 0.020} for n in nodes], "layer")["seconds_per_token"]
        assert slow - base == pytest.approx(workers * 0.020)
    # At 0 ms the calibration is unchanged: one round trip of RPC_CALL_SECONDS is what two exchanges of 0.32 ms were.
    per_worker = pm.LAYER_ROUND_TRIPS * pm.RPC_CALL_SECONDS
    assert per_worker == pytest.approx(2 * 0.00032)


def test_the_tensor_split_pays_every_workers_round_trips_one_after_another():
    """Measured (2 workers, 8 layers, ``-sm tensor``): 17 answered requests per worker and token, and 20 ms of added
    round trip made each token 690-750 ms slower: 2 x 17 round trips, not 2 x 8 of the slowest worker."""
    nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.0} for n in "ab"]
    base = pm.predict(nodes, "tensor", layers=8)["seconds_per_token"]
    slow = pm.predict([{**n, "rtt": 0.020} for n in nodes], "tensor", layers=8)["seconds_per_token"]
    assert slow - base == pytest.approx(pm.round_trips_per_token(2, "tensor", layers=8) * 0.020)
    assert slow - base == pytest.approx(0.680)


def test_load_seconds_adds_its_terms():
    terms = pm.load_seconds(
        local_bytes=2 * GB,
        sshfs_bytes=1 * GB,
        hashed_bytes=3 * GB,
        offers=100,
        sent_bytes=1.2 * GB,
        disk_rate=0.2 * GB,
        sshfs_rate=0.01 * GB,
        hash_rate=1 * GB,
        link_rate=0.012 * GB,
        rtt=0.001,
    )
    assert terms == pytest.approx(
        {"read_local": 10, "read_sshfs": 100, "hash": 3, "offer": 0.1, "send": 100, "total": 213.1}
    )


def test_seeding_runs_the_workers_in_parallel():
    # Each worker reads, hashes and writes its own bytes; the slowest (largest) one sets the time.
    assert pm.seed_seconds([1 * GB, 3 * GB], 0.2 * GB, 1 * GB) == pytest.approx(3 * (2 / 0.2 + 1))
    assert pm.seed_seconds([], 0.2 * GB, 1 * GB) == 0


# make bench 20261203T220410Z (quiet): a single process 61.97 tok/s; layer split over node1's own worker (loopback)
# and node2's (11.98 MB/s through node1's 100 Mbit/s tbf, burst 125,000 bytes) 59.39.
SINGLE_1203, LAYER2_1203, BURST_LAB = 61.97, 59.39, 125_000


def test_a_token_bucket_passes_a_tokens_few_kilobytes_at_the_wires_speed():
    worker = {"rtt": 0.0, "throughput": 12.5e6}
    assert pm.rpc_token_seconds({**worker, "burst": BURST_LAB}, 1, 0.0, 2 * HIDDEN) == 0.0
    # Only what exceeds the burst waits for the rate; without a burst (a real NIC) every byte does.
    assert pm.rpc_token_seconds({**worker, "burst": 100_000}, 1, 0.0, 150_000) == pytest.approx(50_000 / 12.5e6)
    assert pm.rpc_token_seconds(worker, 1, 0.0, 2 * HIDDEN) == pytest.approx(2 * HIDDEN / 12.5e6)
    # The bench lab's two-worker layer split: within 10% with the burst, 13% under without it.
    size, bandwidth = 217e6, pm.effective_bandwidth(217e6, SINGLE_1203)
    loopback = {"name": "node1", "bytes": size / 2, "bandwidth": bandwidth, "rtt": 0.0}
    remote = {**loopback, "name": "node2", "throughput": LINK_0312}
    terms = {"activation_bytes": 2 * HIDDEN, "logits_bytes": LOGITS}
    shaped = pm.predict([loopback, {**remote, "burst": BURST_LAB}], "layer", **terms)["tokens_per_second"]
    serialised = pm.predict([loopback, remote], "layer", **terms)["tokens_per_second"]
    assert shaped / LAYER2_1203 == pytest.approx(0.967, abs=0.01)
    assert serialised / LAYER2_1203 == pytest.approx(0.87, abs=0.01)


# Speculative decoding (issue #36): per pass, the drafting, a verification of k + 1 tokens whose compute grows with k
# and whose weight reads and round trips do not.


def test_a_pass_yields_the_targets_token_and_the_drafted_ones_up_to_the_first_refused():
    # 4 drafted at 0.5: the first accepted half the time, the first two a quarter, ...: 0.5 + 0.25 + 0.125 + 0.0625.
    assert pm.accepted_per_pass(4, 0.5) == pytest.approx(0.9375)
    assert pm.tokens_per_pass(4, 0.5) == pytest.approx(1.9375)
    assert pm.tokens_per_pass(0, 0.9) == 1.0
    assert pm.tokens_per_pass(8, 1.0) == 9.0
    assert pm.tokens_per_pass(3, 0.0) == 1.0
    for bad in ((-1, 0.5), (4, 1.5), (4, -0.1)):
        with pytest.raises(ValueError):
            pm.tokens_per_pass(*bad)


def test_a_longer_draft_never_yields_more_than_one_over_one_minus_the_acceptance():
    """The longest draft the settings allow is what a pass verifies, not what it yields: ngram-mod's 64 at 0.5 yields
    2 tokens a pass (was: 1 + 0.5 x 64 = 33)."""
    assert pm.tokens_per_pass(64, 0.5) == pytest.approx(2.0)
    assert pm.tokens_per_pass(64, 0.7) == pytest.approx(1 / 0.3)
    yields = [pm.tokens_per_pass(k, 0.7) for k in range(0, 20)]
    assert yields == sorted(yields) and yields[-1] < 1 / 0.3


def test_the_standard_formula_is_the_mean_of_the_process_it_describes():
    """Each drafted token accepted with probability a while the ones before it were: enumerate the outcomes."""
    k, a = 5, 0.6
    mean = sum(n * (a**n) * ((1 - a) if n < k else 1) for n in range(k + 1))
    assert pm.accepted_per_pass(k, a) == pytest.approx(mean)


def test_a_measured_accepted_per_pass_replaces_the_formula():
    nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.016} for n in "abc"]
    measured = pm.speculative(nodes, 4, accepted=2.5, verify_slope=0.1, **BARE)
    assert measured["tokens_per_pass"] == 3.5
    assert measured["seconds_per_token"] == pytest.approx((3 * 0.1 * 1.4 + 3 * 0.016) / 3.5)
    # A benchmark's mean drafted tokens per pass may be fractional (an n-gram type drafts only where the text repeats).
    assert pm.speculative(nodes, 2.5, accepted=1.0, **BARE)["tokens_per_pass"] == 2.0
    with pytest.raises(ValueError, match="needs an acceptance rate or the accepted tokens per pass"):
        pm.speculative(nodes, 4)
    with pytest.raises(ValueError, match="from 0 to the drafted ones"):
        pm.speculative(nodes, 2, accepted=3.0)


def test_nothing_drafted_is_the_plain_prediction():
    nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.004, "throughput": 1.25e7} for n in "abc"]
    terms = {"activation_bytes": 4096, "logits_bytes": 600_000}
    plain = pm.predict(nodes, "layer", **terms)
    none = pm.speculative(nodes, 0, 0.0, **terms)
    assert none["seconds_per_token"] == pytest.approx(plain["seconds_per_token"])
    assert none["tokens_per_pass"] == 1.0 and none["draft_seconds"] == 0.0


def test_the_round_trips_are_paid_once_per_pass_and_the_weights_read_once():
    """Three workers 16 ms away: a plain token pays 3 round trips and reads 3 GB; a pass of 4 drafted tokens at
    acceptance 0.8 pays the same and yields 1 + 0.8 + 0.64 + 0.512 + 0.4096 tokens (n-gram drafting costs nothing)."""
    nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.016} for n in "abc"]
    out = pm.speculative(nodes, 4, 0.8, verify_slope=0.0, **BARE)
    per_pass = 3 * 0.1 + 3 * 0.016  # at slope 0 a batch costs one token's compute: one read of the weights
    tokens = 3.3616
    assert out["tokens_per_pass"] == pytest.approx(tokens)
    assert out["verify_seconds"] == pytest.approx(per_pass)
    assert out["seconds_per_token"] == pytest.approx(per_pass / tokens)
    assert out["tokens_per_second"] / pm.predict(nodes, "layer", **BARE)["tokens_per_second"] == pytest.approx(tokens)


def test_each_drafted_token_adds_the_slope_of_a_tokens_compute_to_the_verification():
    """One read of the weights (0.1 s) for the first token of the batch, then ``slope`` of it per drafted token, not a
    free read up to a roofline; without a slope given, the layers' batch and the head's logits by the head's share."""
    nodes = [{"name": "a", "bytes": GB, "bandwidth": 10 * GB}]
    assert pm.speculative(nodes, 0, 0.0, verify_slope=0.5)["verify_seconds"] == pytest.approx(0.1)
    assert pm.speculative(nodes, 4, 0.0, verify_slope=0.5)["verify_seconds"] == pytest.approx(0.3)  # 1 + 4 x 0.5
    assert pm.speculative(nodes, 8, 0.0)["verify_seconds"] == pytest.approx(0.1 * (1 + 8 * pm.VERIFY_BODY_SLOPE))
    slope = pm.VERIFY_BODY_SLOPE + 0.5 * pm.VERIFY_HEAD_SLOPE
    assert pm.verify_slope_for(0.5) == pytest.approx(slope)
    assert pm.speculative(nodes, 8, 0.0, share=0.5)["verify_seconds"] == pytest.approx(0.1 * (1 + 8 * slope))
    assert pm.head_share(30, 120) == 0.25 and pm.head_share(30, 0) == 0.0


def test_the_activations_and_logits_of_every_verified_token_cross_the_links():
    nodes = [{"name": n, "bytes": 0, "bandwidth": GB, "rtt": 0.0, "throughput": 1e6} for n in "ab"]
    out = pm.speculative(nodes, 3, 0.0, activation_bytes=1000, logits_bytes=10_000, **BARE)
    # 4 tokens: 4 kB of activations to each of the 2 workers, 40 kB of logits back from the last, at 1 MB/s.
    assert out["verify_seconds"] == pytest.approx((2 * 4000 + 40_000) / 1e6)


def test_a_draft_model_is_charged_per_drafted_token_and_where_it_runs():
    nodes = [{"name": "a", "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.0}]
    on_cpu = {"bytes": 0.1 * GB, "bandwidth": 10 * GB}
    out = pm.speculative(nodes, 4, 0.5, draft=on_cpu, **BARE)
    # k passes one token after another and one batch catching up on the accepted tokens: 5 reads of 0.1 GB.
    assert out["draft_seconds"] == pytest.approx(5 * 0.01)
    on_worker = {**on_cpu, "rtt": 0.016, "throughput": 1e6, "logits_bytes": 1000}
    far = pm.speculative(nodes, 4, 0.5, draft=on_worker, **BARE)
    assert far["draft_seconds"] == pytest.approx(5 * (0.01 + 0.016 + 0.001))
    assert far["seconds_per_token"] == pytest.approx((far["draft_seconds"] + far["verify_seconds"]) / 1.9375)
    with pytest.raises(ValueError, match="draft model's node has no memory bandwidth"):
        pm.speculative(nodes, 4, 0.5, draft={"bytes": 1})


def test_a_draft_that_is_never_accepted_is_slower_than_none():
    nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.016} for n in "abc"]
    draft = {"bytes": 0.1 * GB, "bandwidth": 10 * GB}
    assert pm.speculative(nodes, 4, 0.0, draft=draft)["tokens_per_second"] < pm.predict(nodes)["tokens_per_second"]
