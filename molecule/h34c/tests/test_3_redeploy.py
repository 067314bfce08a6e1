"""Inventory-driven re-deploys and bad input: the plan follows the inventory, bad requests change nothing."""

from __future__ import annotations

import pytest
from clusterlib import (
    address,
    changed_nothing,
    deployed_plan,
    inventory_copy,
    main_pid,
    plan_only,
    playbook,
    wait_serving,
)
from faultreport import record
from labtest import EVENTUALLY, INVENTORY, lab


def drop_host(name):
    def edit(data):
        data["hosts"].pop(name)
        for group in data["children"].values():
            (group.get("hosts") or {}).pop(name, None)

    return edit


@pytest.mark.fault(8)
@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda data: data["children"].pop("coordinator"), "must hold exactly one host"),
        (lambda data: data["children"]["coordinator"]["hosts"].update({"node2": None}), "must hold exactly one host"),
        (lambda data: data["children"].pop("rpc_workers"), "is empty or missing"),
        (lambda data: data["vars"].update({"llama_coordinator_ctx_size": 0}), "must be positive"),
        (lambda data: data["vars"].update({"llama_coordinator_port": "eighty"}), "unable to convert to int"),
        (
            lambda data: data["hosts"]["node3"].update(
                {"llamarpc_mesh_address": data["hosts"]["node2"]["ansible_host"]}
            ),
            "duplicate mesh address",
        ),
        (lambda data: data["vars"].update({"llama_coordinator_headroom": "-1G"}), "are sizes such as 512M"),
    ],
    ids=[
        "no-coordinator",
        "two-coordinators",
        "no-workers",
        "ctx-size-0",
        "port-as-text",
        "duplicate-address",
        "negative-size",
    ],
)
def test_bad_inventory_fails_before_anything_changes(request, tmp_path, edit, message):
    node1 = lab("node1")
    before = main_pid(node1, "llamarpc-server")
    result = playbook(inventory_copy(tmp_path, edit))
    output = result.stdout + result.stderr
    case = request.node.callspec.id
    unchanged = changed_nothing(result) and main_pid(node1, "llamarpc-server") == before
    record(
        8,
        f"rc {result.returncode}, {'message' if message in output else 'NO message'} '{message}', "
        f"{'changed=0 everywhere, llama-server untouched' if unchanged else 'SOMETHING CHANGED'}",
        ok=result.returncode != 0 and message in output and unchanged,
        key=f"8 {case}",
        detail=case,
    )
    assert result.returncode != 0
    assert message in output
    for line in result.stdout.splitlines():
        if "changed=" in line and "ok=" in line:
            assert "changed=0" in line, line
    assert main_pid(node1, "llamarpc-server") == before


def test_a_model_that_cannot_fit_is_refused_before_the_coordinator_changes(tmp_path):
    node1 = lab("node1")
    before = main_pid(node1, "llamarpc-server")
    result = plan_only(inventory_copy(tmp_path, lambda data: None), "-e", "llama_coordinator_ctx_size=50000000")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "the model does not fit" in output and "more" in output
    assert main_pid(node1, "llamarpc-server") == before


def test_removing_a_worker_from_the_inventory_replans_and_restarts_only_the_coordinator(tmp_path):
    node1, node2 = lab("node1"), lab("node2")
    server_before = main_pid(node1, "llamarpc-server")
    worker_before = main_pid(node2, "llamarpc-rpc-worker")
    result = playbook(inventory_copy(tmp_path, drop_host("node6")))
    assert result.returncode == 0, result.stdout[-3000:]
    plan = deployed_plan()["plan"]
    assert [row["name"] for row in plan["workers"]] == [f"node{i}" for i in range(1, 6)]
    assert f"{address('node6')}:" not in plan["rpc"]
    assert main_pid(node1, "llamarpc-server") != server_before
    assert main_pid(node2, "llamarpc-rpc-worker") == worker_before
    assert wait_serving(EVENTUALLY) is not None


def test_adding_a_worker_to_the_inventory_plans_it_in():
    """The README's "adding a node": node6 back in the inventory (the test above left it out), one re-run, and the
    coordinator re-plans with it; the other workers are not restarted."""
    node1, node2 = lab("node1"), lab("node2")
    assert "node6" not in [row["name"] for row in deployed_plan()["plan"]["workers"]]  # the state the removal left
    server_before = main_pid(node1, "llamarpc-server")
    worker_before = main_pid(node2, "llamarpc-rpc-worker")
    result = playbook(INVENTORY)
    assert result.returncode == 0, result.stdout[-3000:]
    plan = deployed_plan()["plan"]
    assert [row["name"] for row in plan["workers"]] == [f"node{i}" for i in range(1, 7)]
    assert f"{address('node6')}:" in plan["rpc"]
    assert main_pid(node1, "llamarpc-server") != server_before
    assert main_pid(node2, "llamarpc-rpc-worker") == worker_before
    assert wait_serving(EVENTUALLY) is not None
