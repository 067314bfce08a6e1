# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The performance model: layer split adds up, tensor split runs in parallel and pays per-layer syncs."""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils import _perf_model as pm

GB = 1e9


def test_single_node_is_bytes_over_bandwidth():
    out = pm.predict([{"name": "a", "bytes": 2 * GB, "bandwidth": 10 * GB}], "none")
    assert out["seconds_per_token"] == pytest.approx(0.2)
    assert out["tokens_per_second"] == pytest.approx(5.0)
    assert out["network_seconds"] == 0


def test_layer_split_adds_compute_and_round_trips():
    nodes = [{"name": n, "bytes": GB, "bandwidth": 10 * GB, "rtt": 0.005, "throughput": 1e7} for n in "ab"]
    out = pm.predict(nodes, "layer", activation_bytes=10_000)
    # 2 x 0.1 s compute, per worker 2 round trips of 5 ms and 1 ms of activations.
    assert out["compute_seconds"] == pytest.approx(0.2)
    assert out["network_seconds"] == pytest.approx(2 * (2 * 0.005 + 0.001))


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
    free = pm.predict(nodes, "tensor")
    shared = pm.predict(nodes, "tensor", shared_bandwidth=10 * GB)
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
    out = pm.predict(slow, "layer", logits_bytes=logits)
    assert out["network_seconds"] == pytest.approx(logits / 12.5e6)
    # The output layer on the coordinator's own host: nothing crosses a link.
    assert pm.predict(slow[::-1], "layer", logits_bytes=logits)["network_seconds"] == 0
    # Tensor split: each worker sends its half of the logits.
    assert pm.predict(slow, "tensor", logits_bytes=logits)["network_seconds"] == pytest.approx(logits / 2 / 12.5e6)
    assert pm.predict(slow, "layer")["network_seconds"] == 0
