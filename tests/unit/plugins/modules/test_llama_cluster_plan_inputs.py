"""llama_cluster_plan from the raw inputs the llama_coordinator role gathers: the candidates, the serving state and
the deployed record with whether it must be rewritten (was Jinja in the role's plan.yml, vars/main.yml and
configure.yml)."""

from __future__ import annotations

import base64
import json

import pytest
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.modules import llama_cluster_plan

GIB = 1 << 30
HOSTS = ["n1", "n2", "n3"]
ENDPOINTS = ["10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.3:50052"]
DEPLOYMENT = {
    "service": "llamarpc-server",
    "url": "http://10.0.0.1:8080",
    "model_path": "/m/x.gguf",
    "replan_after": 120,
}


def slurped(text):
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def memory(*names):
    """Looped, delegated node_memory_facts results; a name not given was unreachable."""
    results = []
    for name in HOSTS:
        if name in names:
            figures = {"available": 4 * GIB, "total": 8 * GIB}
            results.append({"item": name, "ansible_facts": {"llamarpc_memory": figures}, "changed": False})
        else:
            results.append({"item": name, "unreachable": True, "msg": "ssh: no route"})
    return results


PROBE = [
    {"endpoint": ENDPOINTS[0], "state": "ready", "connect_rtt_ms": 0.3},
    {"endpoint": ENDPOINTS[1], "state": "refused", "connect_rtt_ms": None},
    {"endpoint": ENDPOINTS[2], "state": "ready", "connect_rtt_ms": 0.5},
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("model"), preset="tiny", shards=2, seed=7)


@pytest.fixture
def plan(run_module, model):
    def run(check_mode=False, **args):
        base = {
            "model_path": model["files"][0]["path"],
            "worker_hosts": HOSTS,
            "endpoints": ENDPOINTS,
            "memory": memory(*HOSTS),
            "probe": PROBE,
            "coordinator": "n1",
            "ctx_size": 512,
            "strategy": "all",
            "deployment": DEPLOYMENT,
        }
        return run_module(llama_cluster_plan, {**base, **args}, check_mode=check_mode)

    return run


def states(out):
    return [worker["state"] for worker in out.result["candidates"]]


def test_candidates_carry_memory_and_the_probe(plan):
    out = plan()
    assert not out.failed, out.result
    first = out.result["candidates"][0]
    assert first == {
        "name": "n1",
        "endpoint": ENDPOINTS[0],
        "state": "ready",
        "mem_available": 4 * GIB,
        "mem_total": 8 * GIB,
        "rtt_ms": 0.3,
    }
    assert states(out) == ["ready", "refused", "ready"]
    assert out.result["plan"]["rpc"] == f"{ENDPOINTS[0]},{ENDPOINTS[2]}"
    assert out.result["serving"] == []


def test_a_host_without_memory_figures_is_unreachable_over_ssh(plan):
    out = plan(memory=memory("n1", "n2"))
    assert states(out)[2] == "unreachable over SSH"
    assert out.result["candidates"][2]["mem_available"] == 0


def test_the_plan_in_force_serves_when_healthy(plan):
    env = (
        "# managed\nLLAMARPC_RPC=10.0.0.2:50052,10.0.0.3:50052\n"
        "LLAMARPC_PLAN_ARGS=--rpc 10.0.0.2:50052,10.0.0.3:50052\n"
    )
    override_missing = {"failed": True, "msg": "file not found"}
    healthy = plan(env_in_force=[override_missing, slurped(env)], health_status=200)
    assert healthy.result["serving"] == ENDPOINTS[1:]
    assert states(healthy) == ["ready", "ready", "ready"]
    # Not healthy: nothing is serving, the probe's word stands.
    assert plan(env_in_force=[override_missing, slurped(env)], health_status=503).result["serving"] == []
    # The supervisor's override comes first.
    override = slurped("LLAMARPC_RPC=10.0.0.3:50052\n")
    assert plan(env_in_force=[override, slurped(env)], health_status=200).result["serving"] == ENDPOINTS[2:]


def test_check_mode_and_plan_only_count_workers_as_ready(plan):
    assert states(plan(check_mode_run=True)) == ["ready", "ready", "ready"]
    assert states(plan(plan_only=True, probe=[])) == ["ready", "ready", "ready"]
    assert states(plan(probe=[])) == ["not probed"] * 3


def test_a_model_that_cannot_fit_still_returns_the_candidates(plan):
    tight = [{"item": name, "ansible_facts": {"llamarpc_memory": {"available": 1 << 20, "total": 0}}} for name in HOSTS]
    out = plan(memory=tight)
    assert out.failed
    assert [worker["name"] for worker in out.result["candidates"]] == HOSTS


def test_the_record_and_when_it_must_be_rewritten(plan):
    out = plan()
    record = out.result["record"]
    assert {key: record[key] for key in DEPLOYMENT} == DEPLOYMENT
    assert record["options"] == {
        "ctx_size": 512,
        "parallel": 1,
        "cache_type_k": "f16",
        "cache_type_v": "f16",
        "headroom": 512 << 20,
        "overhead": 128 << 20,
        "strategy": "all",
        "coordinator": "n1",
        "fit_first": True,
        "cache_ram": 0,
    }
    assert all("state" not in worker for worker in record["workers"])
    assert record["plan"] == out.result["plan"]
    assert out.result["deploy_needed"] is True  # nothing deployed
    deployed = json.dumps(record, indent=4, sort_keys=True)
    assert plan(deployed=deployed).result["deploy_needed"] is False


def test_memory_that_moves_does_not_rewrite_but_a_new_plan_does(plan):
    deployed = plan().result["record"]
    moved = json.loads(json.dumps(deployed))
    for worker in moved["workers"]:
        worker["mem_available"] -= GIB
    assert plan(deployed=json.dumps(moved)).result["deploy_needed"] is False
    other = json.loads(json.dumps(deployed))
    other["plan"]["tensor_split"] = "1,0"
    assert plan(deployed=json.dumps(other)).result["deploy_needed"] is True
    assert plan(deployed=json.dumps(deployed), ctx_size=1024).result["deploy_needed"] is True
    assert plan(deployed=json.dumps(deployed), deployment={**DEPLOYMENT, "url": "http://x:1"}).result["deploy_needed"]
    assert plan(deployed="not json").result["deploy_needed"] is True


def test_endpoints_must_be_in_step_with_the_hosts(plan):
    out = plan(endpoints=ENDPOINTS[:2])
    assert out.failed and "in step" in out.result["msg"]
