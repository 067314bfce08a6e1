"""Inventory-driven re-deploys and bad input: the plan follows the inventory, bad requests change nothing."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from clusterlib import deployed_plan, wait_serving
from labtest import BIN, INVENTORY, REPO, ansible_env, lab


def inventory_copy(tmp_path, edit):
    """A copy of the lab inventory (it holds the scenario's settings too), changed by ``edit``."""
    with open(INVENTORY, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    edit(data["all"])
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def playbook(inventory, *args, name="demo.yml"):
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / name), *args],
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )


def main_pid(host, unit):
    return host.run_expect([0], f"systemctl show -p MainPID --value {unit}").stdout.strip()


def drop_host(name):
    def edit(data):
        data["hosts"].pop(name)
        for group in data["children"].values():
            (group.get("hosts") or {}).pop(name, None)

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda data: data["children"].pop("coordinator"), "must hold exactly one host"),
        (lambda data: data["children"]["coordinator"]["hosts"].update({"node2": None}), "must hold exactly one host"),
        (lambda data: data["children"].pop("rpc_workers"), "is empty or missing"),
        (lambda data: data["vars"].update({"llama_coordinator_ctx_size": 0}), "must be positive"),
        (lambda data: data["vars"].update({"llama_coordinator_port": "eighty"}), "unable to convert to int"),
    ],
    ids=["no-coordinator", "two-coordinators", "no-workers", "ctx-size-0", "port-as-text"],
)
def test_bad_inventory_fails_before_anything_changes(tmp_path, edit, message):
    node1 = lab("node1")
    before = main_pid(node1, "llamarpc-server")
    result = playbook(inventory_copy(tmp_path, edit), name="site.yml")
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    for line in result.stdout.splitlines():
        if "changed=" in line and "ok=" in line:
            assert "changed=0" in line, line
    assert main_pid(node1, "llamarpc-server") == before


def test_a_model_that_cannot_fit_is_refused_before_the_coordinator_changes(tmp_path):
    node1 = lab("node1")
    before = main_pid(node1, "llamarpc-server")
    model = deployed_plan()["model_path"]
    result = playbook(
        inventory_copy(tmp_path, lambda data: None),
        "--tags",
        "plan",
        "-e",
        f"llama_coordinator_model_path={model}",
        "-e",
        "llama_coordinator_ctx_size=50000000",
        name="site.yml",
    )
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
    assert "10.213.8.16" not in plan["rpc"]
    assert main_pid(node1, "llamarpc-server") != server_before
    assert main_pid(node2, "llamarpc-rpc-worker") == worker_before
    assert wait_serving(60) is not None
