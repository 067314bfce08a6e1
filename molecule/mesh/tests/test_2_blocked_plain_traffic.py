"""Block every plain packet between the lab hosts except WireGuard's own UDP: the mesh (and the RPC worker on it)
still works, the lab addresses do not. Proves the traffic really goes through the tunnel."""

from __future__ import annotations

import pytest
from conftest import HOSTS, PORT, RPC_PORT, lab_address, mesh_address, module, ping
from labtest import lab, wait_for

TABLE = "llamarpc_test_block"


@pytest.fixture
def plain_traffic_blocked():
    """On node2: drop everything from the other lab hosts but WireGuard's UDP port (the controller keeps SSH)."""
    node2 = lab("node2")
    others = "{ " + ", ".join(lab_address(name) for name in HOSTS if name != "node2") + " }"
    node2.check_output(
        f"nft add table inet {TABLE} && "
        f"nft add chain inet {TABLE} input '{{ type filter hook input priority -10; policy accept; }}' && "
        f"nft add rule inet {TABLE} input ip saddr '{others}' udp dport {PORT} accept && "
        f"nft add rule inet {TABLE} input ip saddr '{others}' drop"
    )
    try:
        yield
    finally:
        node2.run(f"nft delete table inet {TABLE}")


def test_plain_address_blocked_mesh_address_answers(plain_traffic_blocked):
    node1 = lab("node1")
    assert not ping(node1, lab_address("node2"), count=2, wait=1), "the block should stop plain traffic"
    assert wait_for(lambda: ping(node1, mesh_address("node2"), count=3))


def test_coordinator_reaches_the_worker_over_the_mesh_only(plain_traffic_blocked):
    # The worker listens on its mesh address only: with plain traffic blocked, the RPC handshake still works.
    result = module(
        "node1", "llamarpc.cluster.rpc_endpoint_facts", {"endpoints": [f"{mesh_address('node2')}:{RPC_PORT}"]}
    )
    endpoint = result["ansible_facts"]["rpc_endpoints"][0]
    assert endpoint["state"] == "ready", endpoint


@pytest.mark.parametrize("name", HOSTS)
def test_worker_binds_the_mesh_address(name):
    host = lab(name)
    listening = host.check_output(f"ss -ltnH 'sport = :{RPC_PORT}'")
    assert f"{mesh_address(name)}:{RPC_PORT}" in listening, listening
    assert f"{lab_address(name)}:{RPC_PORT}" not in listening and f"0.0.0.0:{RPC_PORT}" not in listening
    exec_start = host.check_output("systemctl show -p ExecStart llamarpc-rpc-worker.service")
    assert f"-H {mesh_address(name)} " in exec_start


def rpc_state(source, target):
    """The RPC state of ``target``'s worker on its mesh address, probed from ``source``."""
    result = module(
        source, "llamarpc.cluster.rpc_endpoint_facts", {"endpoints": [f"{mesh_address(target)}:{RPC_PORT}"]}
    )
    return result["ansible_facts"]["rpc_endpoints"][0]


@pytest.mark.parametrize("worker", ["node2", "node3"])
def test_worker_accepts_the_coordinator_and_refuses_another_mesh_host(worker):
    """The firewall is judged by connections, not by its rule text: from the coordinator (node1) the worker's mesh
    address and port answer the RPC handshake; from the other worker, the same address and port refuse. The
    listener is shown first, so that the refusal cannot come from a port nobody listens on."""
    other = next(name for name in HOSTS if name not in {"node1", worker})
    listening = lab(worker).check_output(f"ss -ltnH 'sport = :{RPC_PORT}'")
    assert f"{mesh_address(worker)}:{RPC_PORT}" in listening, listening
    accepted = rpc_state("node1", worker)
    assert accepted["state"] == "ready", accepted
    refused = rpc_state(other, worker)
    assert refused["state"] == "refused", refused
