"""planner_workers: the coordinator's planner input (was a Jinja loop in roles/llama_coordinator/tasks/plan.yml)."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.filter.cluster_plan import planner_workers

MEM = {"available": 6 << 30, "total": 8 << 30}
HOSTVARS = {
    "w1": {"ansible_facts": {"llamarpc_memory": MEM}},
    "w2": {"ansible_facts": {"llamarpc_memory": MEM}},
    "w3": {"ansible_facts": {}},  # node_memory_facts could not reach it
}
NAMES = ["w1", "w2", "w3"]
ENDPOINTS = ["10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.3:50052"]
PROBE = [
    {"endpoint": "10.0.0.1:50052", "state": "ready", "connect_rtt_ms": 0.4},
    {"endpoint": "10.0.0.2:50052", "state": "refused", "connect_rtt_ms": None},
    {"endpoint": "10.0.0.3:50052", "state": "timeout"},
]


def states(**kwargs):
    return [w["state"] for w in planner_workers(NAMES, HOSTVARS, ENDPOINTS, probe=PROBE, **kwargs)]


def test_entries_carry_memory_and_the_probe():
    w1, w2, w3 = planner_workers(NAMES, HOSTVARS, ENDPOINTS, probe=PROBE)
    assert w1 == {
        "name": "w1",
        "endpoint": "10.0.0.1:50052",
        "state": "ready",
        "mem_available": 6 << 30,
        "mem_total": 8 << 30,
        "rtt_ms": 0.4,
    }
    assert (w2["state"], w2["rtt_ms"]) == ("refused", None)
    assert (w3["state"], w3["mem_available"], w3["mem_total"]) == ("unreachable over SSH", 0, 0)


def test_serving_plan_only_and_check_mode_count_as_ready():
    assert states() == ["ready", "refused", "unreachable over SSH"]
    assert states(serving=["10.0.0.2:50052"]) == ["ready", "ready", "unreachable over SSH"]
    assert states(all_ready=True) == ["ready", "ready", "unreachable over SSH"]
    # Check mode: refused/timeout/unreachable is a worker this run would start; a foreign answer stays what it is.
    assert states(check_mode=True) == ["ready", "ready", "unreachable over SSH"]
    bad = [{"endpoint": "10.0.0.2:50052", "state": "incompatible"}]
    assert planner_workers(NAMES[1:2], HOSTVARS, ENDPOINTS[1:2], probe=bad, check_mode=True)[0]["state"] == (
        "incompatible"
    )


def test_an_endpoint_not_probed_is_not_ready():
    assert planner_workers(["w1"], HOSTVARS, ENDPOINTS[:1])[0]["state"] == "not probed"
