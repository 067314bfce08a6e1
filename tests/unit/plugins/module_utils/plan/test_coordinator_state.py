"""_coordinator_state: the plan in force and the endpoints serving it, the planner's candidates from raw results, and
the deployed record with when it must be rewritten (Jinja in the llama_coordinator role before)."""

from __future__ import annotations

import base64
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.filter.cluster_plan import FilterModule
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_state as state

ENV = (
    "# Ansible managed\nLLAMARPC_RPC=10.0.0.1:50052,10.0.0.2:50052\n"
    "LLAMARPC_PLAN_ARGS=--rpc 10.0.0.1:50052,10.0.0.2:50052 --device RPC0,RPC1 --tensor-split 1,1 --n-gpu-layers all\n"
)
NOT_READ = {"failed": True, "msg": "file not found: /run/llamarpc/coordinator/override.env"}


def read(text):
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64", "source": "/x"}


def test_the_rpc_list_of_an_env_file():
    assert state.rpc_in_force(ENV) == ["10.0.0.1:50052", "10.0.0.2:50052"]
    assert state.rpc_in_force("LLAMARPC_RPC=\n") == []
    assert state.rpc_in_force("LLAMARPC_PLAN_ARGS=--rpc 10.0.0.1:50052\n") == []
    # A local plan (fit first): no worker in force.
    assert state.rpc_in_force("LLAMARPC_RPC=\nLLAMARPC_PLAN_ARGS=--device none --n-gpu-layers 0\n") == []
    # Only a line that starts with the variable (a comment naming it is no plan).
    assert state.rpc_in_force("# LLAMARPC_RPC=1.2.3.4:1\nLLAMARPC_RPC=5.6.7.8:9\n") == ["5.6.7.8:9"]


def test_serving_needs_health_and_takes_the_first_file_read():
    assert state.serving([NOT_READ, read(ENV)], 200) == ["10.0.0.1:50052", "10.0.0.2:50052"]
    assert state.serving([read("LLAMARPC_RPC=10.0.0.2:50052\n"), read(ENV)], 200) == ["10.0.0.2:50052"]
    # Loading (503), down (no answer: 0, or -1 from uri) or nothing deployed: nothing is serving.
    assert state.serving([NOT_READ, read(ENV)], 503) == []
    assert state.serving([NOT_READ, read(ENV)], -1) == []
    assert state.serving([NOT_READ, NOT_READ], 200) == []
    assert state.serving([], 200) == []


def test_the_filter_is_the_same_function():
    serving_endpoints = FilterModule().filters()["serving_endpoints"]
    assert serving_endpoints([NOT_READ, read(ENV)], 200) == state.serving([NOT_READ, read(ENV)], 200)
    assert serving_endpoints([NOT_READ, read(ENV)]) == []


def test_memory_by_host_from_looped_delegated_results():
    results = [
        {"item": "w1", "ansible_facts": {"llamarpc_memory": {"available": 1, "total": 2}}},
        {"item": "w2", "unreachable": True},
        {"item": "w3", "failed": True, "msg": "no /proc/meminfo"},
    ]
    assert state.memory_by_host(results) == {"w1": {"available": 1, "total": 2}}


def test_candidates_pass_the_serving_endpoints_as_ready():
    results = [{"item": name, "ansible_facts": {"llamarpc_memory": {"available": 8, "total": 16}}} for name in "ab"]
    probe = [{"endpoint": "a:1", "state": "ready"}]
    rows = state.candidates(["a", "b"], ["a:1", "b:1"], results, probe, serving_endpoints=["b:1"])
    assert [row["state"] for row in rows] == ["ready", "ready"]
    rows = state.candidates(["a", "b"], ["a:1", "b:1"], results, probe)
    assert [row["state"] for row in rows] == ["ready", "not probed"]


def test_the_record_is_plain_json_without_worker_states():
    doc = state.record(
        {"service": "s", "url": "u", "model_path": "m", "replan_after": 120},
        {"n_layer": 2, "layer_bytes": (1, 2)},
        [{"name": "a", "endpoint": "a:1", "state": "ready", "mem_available": 8}],
        {"ctx_size": 4096},
        {"rpc": "a:1", "devices": "RPC0", "tensor_split": "3"},
    )
    assert doc["summary"]["layer_bytes"] == [1, 2]  # a tuple would never equal the JSON read back
    assert doc["workers"] == [{"name": "a", "endpoint": "a:1", "mem_available": 8}]
    assert json.loads(json.dumps(doc)) == doc


def test_deploy_needed():
    old = {
        "service": "s",
        "options": {"ctx_size": 4096},
        "workers": [{"endpoint": "a:1", "mem_available": 8}, {"endpoint": "b:1", "mem_available": 8}],
        "plan": {"rpc": "a:1,b:1", "devices": "RPC0,RPC1", "tensor_split": "2,1", "table": ["a 8"]},
    }
    same = json.loads(json.dumps(old))
    same["workers"][0]["mem_available"] = 4  # memory moved
    same["plan"]["table"] = ["a 4"]  # and the table with it
    assert not state.deploy_needed(old, same)
    for change in (
        lambda doc: doc["plan"].update(tensor_split="1,2"),
        lambda doc: doc["plan"].update(devices="RPC1,RPC0"),
        lambda doc: doc["workers"].reverse(),
        lambda doc: doc["options"].update(ctx_size=8192),
        lambda doc: doc.update(service="t"),
    ):
        new = json.loads(json.dumps(old))
        change(new)
        assert state.deploy_needed(old, new)
    assert state.deploy_needed({}, old)
    assert state.read_record("") == {} and state.read_record("[1]") == {} and state.read_record("{") == {}
    assert state.read_record(json.dumps(old)) == old


SEEDING = {"cache_dir": "/var/cache/w/rpc", "keep_file": "/var/cache/w/seeded-tensors", "hasher": "/usr/local/h"}
ENDPOINTS = ["10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.3:50052"]
WORKERS = ["node1", "node2", "node3"]


def test_seed_targets_follow_the_plans_device_order():
    seeding = {host: SEEDING for host in WORKERS}
    targets = state.seed_targets(["10.0.0.3:50052", "10.0.0.1:50052"], ENDPOINTS, WORKERS, seeding)
    assert [(t["host"], t["endpoint"]) for t in targets] == [("node3", "10.0.0.3:50052"), ("node1", "10.0.0.1:50052")]
    assert targets[0]["seeding"] == SEEDING
    # The plan as llama-server's comma-separated list gives the same.
    assert state.seed_targets("10.0.0.3:50052,10.0.0.1:50052", ENDPOINTS, WORKERS, seeding) == targets


def test_seed_targets_leave_out_workers_without_a_cache_and_local_plans():
    seeding = {"node1": SEEDING, "node2": {}, "node3": None}
    assert [t["host"] for t in state.seed_targets(ENDPOINTS, ENDPOINTS, WORKERS, seeding)] == ["node1"]
    # Fit first: no RPC, nothing to seed.
    assert state.seed_targets([], ENDPOINTS, WORKERS, seeding) == []
    assert state.seed_targets("", ENDPOINTS, WORKERS, seeding) == []


def test_seed_targets_refuse_an_endpoint_no_worker_has():
    with pytest.raises(ValueError, match="10.0.0.9:50052 is in the plan"):
        state.seed_targets(["10.0.0.9:50052"], ENDPOINTS, WORKERS, {})
    with pytest.raises(ValueError, match="must be parallel"):
        state.seed_targets(ENDPOINTS, ENDPOINTS, WORKERS[:2], {})


def test_seed_targets_filter_reads_each_workers_published_fact():
    seed_targets = FilterModule().filters()["seed_targets"]
    hostvars = {"node1": {"llama_rpc_worker_seeding": SEEDING}, "node2": {}, "node3": {}}
    assert seed_targets(ENDPOINTS, ENDPOINTS, WORKERS, hostvars) == [
        {"host": "node1", "endpoint": "10.0.0.1:50052", "seeding": SEEDING}
    ]
    with pytest.raises(AnsibleFilterError, match="seed_targets: 10.0.0.9"):
        seed_targets(["10.0.0.9:50052"], ENDPOINTS, WORKERS, hostvars)


def test_shard_peers_name_each_shard_off_the_coordinator_at_its_holders_mesh_address():
    placement = [
        {"name": "m-00001-of-00003.gguf", "host": "node1"},
        {"name": "m-00002-of-00003.gguf", "host": "node4"},
        {"name": "m-00003-of-00003.gguf", "host": "node5"},
    ]
    hostvars = {
        "node1": {"ansible_host": "10.0.0.1"},
        "node4": {"ansible_host": "10.0.0.4", "llamarpc_mesh_address": "100.64.0.4"},
        "node5": {"ansible_host": "10.0.0.5"},
    }
    keys = ("llamarpc-shards", "shards", "/etc/llamarpc/sshfs/id_ed25519", "/etc/llamarpc/sshfs/known_hosts")
    peers = FilterModule().filters()["shard_peers"](placement, "node1", hostvars, *keys)
    assert peers == {
        "m-00002-of-00003.gguf": {
            "host": "100.64.0.4",  # the mesh address, as the coordinator's mount of the same export
            "user": "llamarpc-shards",
            "path": "/shards/m-00002-of-00003.gguf",
            "identity_file": "/etc/llamarpc/sshfs/id_ed25519",
            "known_hosts_file": "/etc/llamarpc/sshfs/known_hosts",
        },
        "m-00003-of-00003.gguf": {
            "host": "10.0.0.5",
            "user": "llamarpc-shards",
            "path": "/shards/m-00003-of-00003.gguf",
            "identity_file": "/etc/llamarpc/sshfs/id_ed25519",
            "known_hosts_file": "/etc/llamarpc/sshfs/known_hosts",
        },
    }
    assert FilterModule().filters()["shard_peers"](placement[:1], "node1", hostvars, *keys) == {}
    with pytest.raises(AnsibleFilterError, match="placed on node9, whose address is not given"):
        FilterModule().filters()["shard_peers"]([{"name": "x.gguf", "host": "node9"}], "node1", hostvars, *keys)
