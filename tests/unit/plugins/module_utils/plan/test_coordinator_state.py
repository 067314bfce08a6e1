"""_coordinator_state: the plan in force and the endpoints serving it, the planner's candidates from raw results, and
the deployed record with when it must be rewritten (Jinja in the llama_coordinator role before)."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.filter.cluster_plan import FilterModule
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_state as state

ENV = (
    "# Ansible managed\nLLAMARPC_RPC=10.0.0.1:50052,10.0.0.2:50052\n"
    "LLAMARPC_PLAN_ARGS=--rpc 10.0.0.1:50052,10.0.0.2:50052 --device RPC0,RPC1 --tensor-split 1,1 --n-gpu-layers all\n"
)


def test_the_rpc_list_of_an_env_file():
    assert state.rpc_in_force(ENV) == ["10.0.0.1:50052", "10.0.0.2:50052"]
    assert state.rpc_in_force("LLAMARPC_RPC=\n") == []
    assert state.rpc_in_force("LLAMARPC_PLAN_ARGS=--rpc 10.0.0.1:50052\n") == []
    # A local plan (fit first): no worker in force.
    assert state.rpc_in_force("LLAMARPC_RPC=\nLLAMARPC_PLAN_ARGS=--device none --n-gpu-layers 0\n") == []
    # Only a line that starts with the variable (a comment naming it is no plan).
    assert state.rpc_in_force("# LLAMARPC_RPC=1.2.3.4:1\nLLAMARPC_RPC=5.6.7.8:9\n") == ["5.6.7.8:9"]


def test_the_env_in_force_is_the_first_file_that_can_be_read(tmp_path):
    override, deployed = tmp_path / "override.env", tmp_path / "cluster.env"
    assert state.env_in_force([str(override), str(deployed)]) is None
    deployed.write_text(ENV)
    assert state.env_in_force([str(override), str(deployed)]) == ENV
    override.write_text("LLAMARPC_RPC=10.0.0.2:50052\n")
    assert state.env_in_force([str(override), str(deployed)]) == "LLAMARPC_RPC=10.0.0.2:50052\n"
    assert state.env_in_force([str(tmp_path)]) is None  # a directory is not read


def test_serving_needs_health_and_a_plan_in_force():
    assert state.serving_now(ENV, 200) == ["10.0.0.1:50052", "10.0.0.2:50052"]
    # Loading (503), down (0) or nothing deployed: nothing is serving.
    assert state.serving_now(ENV, 503) == []
    assert state.serving_now(ENV, 0) == []
    assert state.serving_now(None, 200) == []


def test_health_is_zero_when_nothing_answers(closed_port):
    assert state.health_status(f"http://127.0.0.1:{closed_port}", timeout=1) == 0
    assert state.health_status("not a url") == 0


def test_memory_by_host_leaves_out_hosts_without_figures():
    memory = {"w1": {"available": 1, "total": 2}, "w2": {}, "w3": None}
    assert state.memory_by_host(memory) == {"w1": {"available": 1, "total": 2}}


def test_candidates_pass_the_serving_endpoints_as_ready():
    memory = {name: {"available": 8, "total": 16} for name in "ab"}
    probe = [{"endpoint": "a:1", "state": "ready"}]
    rows = state.candidates(["a", "b"], ["a:1", "b:1"], memory, probe, serving_endpoints=["b:1"])
    assert [row["state"] for row in rows] == ["ready", "ready"]
    rows = state.candidates(["a", "b"], ["a:1", "b:1"], memory, probe)
    assert [row["state"] for row in rows] == ["ready", "not probed"]


@pytest.mark.parametrize(
    ("probe", "protocol", "foreign"),
    [
        ([{"endpoint": "a:1", "major": 7}, {"endpoint": "b:1", "major": 6}], "7.0.0", ["b:1"]),
        ([{"endpoint": "a:1", "major": 7}], "7.1.2", []),
        ([{"endpoint": "a:1", "major": None}], "7.0.0", []),  # no HELLO reply: nothing to compare
        ([{"endpoint": "a:1", "major": 6}], "", []),  # the coordinator's protocol is not known
        ([{"endpoint": "a:1", "major": 6}], "unknown", []),
        # The minor: a worker's no newer than the coordinator's (llama.cpp's client refuses a newer one).
        ([{"endpoint": "a:1", "major": 7, "minor": 1}], "7.0.0", ["a:1"]),
        ([{"endpoint": "a:1", "major": 7, "minor": 0}, {"endpoint": "b:1", "major": 7, "minor": 2}], "7.1.0", ["b:1"]),
        ([{"endpoint": "a:1", "major": 7, "minor": 1}], "7.1.5", []),
        ([{"endpoint": "a:1", "major": 7, "minor": 3}], "7", ["a:1"]),  # a version without a minor is minor 0
        ([{"endpoint": "a:1", "major": 7, "minor": None}], "7.0.0", []),  # a worker that gave no minor: its major
    ],
)
def test_foreign_workers(probe, protocol, foreign):
    assert [entry["endpoint"] for entry in state.foreign_workers(probe, protocol)] == foreign


def test_the_protocol_refusal_names_every_foreign_worker():
    foreign = [{"endpoint": "a:1", "protocol": "6.0.0"}, {"endpoint": "b:1", "protocol": "8.1.0"}]
    assert state.protocol_refusal(foreign, "7.0.0", "node1", "rpc_workers") == (
        "a:1 speaks RPC protocol 6.0.0; b:1 speaks RPC protocol 8.1.0, but llama-server on node1 speaks 7.0.0 and "
        "accepts only a worker of its own major version with a minor no newer than its own: deploy the same llama.cpp "
        "version on every host (run site.yml on the workers), or take that worker out of the 'rpc_workers' group."
    )
    assert state.protocol_refusal([], "7.0.0", "node1", "rpc_workers") == ""


@pytest.mark.parametrize(
    ("given", "here", "controller", "check_mode", "plan_only", "source"),
    [
        (True, False, None, False, True, "given"),
        (False, True, {"n_layer": 1}, True, False, "coordinator"),
        (False, False, {"n_layer": 1}, True, False, "controller"),
        (False, False, {"n_layer": 1}, True, True, None),  # the plan-only run never plans from the controller
        (False, False, None, True, False, None),
    ],
)
def test_plan_source(given, here, controller, check_mode, plan_only, source):
    assert state.plan_source(given, here, controller, check_mode, plan_only) == source


def test_plan_source_refuses_a_real_run_without_the_model():
    with pytest.raises(FileNotFoundError):
        state.plan_source(False, False, {"n_layer": 1}, False, False)


@pytest.mark.parametrize(
    ("targets", "plan_only", "source", "deploy_needed", "health", "needed"),
    [
        ([1], False, "coordinator", True, 200, True),
        ([1], False, "coordinator", False, 503, True),
        ([1], False, "coordinator", False, 200, False),  # a rerun that changes nothing
        ([], False, "coordinator", True, 0, False),  # no worker cache to seed
        ([1], True, "given", True, 0, False),  # plan only
        ([1], False, "controller", True, 0, False),  # check mode planning from the controller's headers
    ],
)
def test_seed_needed(targets, plan_only, source, deploy_needed, health, needed):
    decided = state.seed_needed(targets, plan_only=plan_only, source=source, deploy_needed=deploy_needed, health=health)
    assert decided is needed


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
