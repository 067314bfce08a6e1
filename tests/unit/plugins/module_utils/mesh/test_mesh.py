"""The mesh plan: addresses per provider, derivation stable under inventory changes, and every inventory error."""

from __future__ import annotations

import ipaddress

import pytest

from ansible_collections.llamarpc.cluster.plugins.filter.mesh import mesh_plan
from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import _mesh

SUBNET = "10.99.0.0/24"


def lab(count, first=11):
    return {f"node{i}": {"ansible_host": f"10.213.0.{first + i - 1}"} for i in range(1, count + 1)}


def test_none_takes_the_inventory_address_else_ansible_host():
    hostvars = {
        "a": {"ansible_host": "10.0.0.1", "llamarpc_mesh_address": "192.168.5.1"},
        "b": {"ansible_host": "10.0.0.2"},
    }
    result = mesh_plan(["a", "b"], hostvars, "none")
    assert result["addresses"] == {"a": "192.168.5.1", "b": "10.0.0.2"}
    assert result["sources"] == {"a": "inventory", "b": "ansible_host"}
    assert result["errors"] == []


def test_none_refuses_a_host_name_as_address():
    result = mesh_plan(["web.example"], {"web.example": {}}, "none")
    assert result["addresses"] == {}
    assert result["errors"][0].startswith("web.example: mesh address 'web.example' (from ansible_host) is not a")


def test_wireguard_derives_the_host_bits_of_ansible_host():
    result = mesh_plan(["node1", "node2", "node3"], lab(3), "wireguard", SUBNET)
    assert result["addresses"] == {"node1": "10.99.0.11", "node2": "10.99.0.12", "node3": "10.99.0.13"}
    assert set(result["sources"].values()) == {"derived"}
    assert result["errors"] == []


def test_adding_a_host_moves_no_other_host():
    three = mesh_plan(["node1", "node2", "node3"], lab(3), "wireguard", SUBNET)["addresses"]
    hostvars = {**lab(3), "extra": {"ansible_host": "build.example"}, "node4": {"ansible_host": "10.213.0.14"}}
    six = mesh_plan(["extra", "node1", "node2", "node3", "node4"], hostvars, "wireguard", SUBNET)["addresses"]
    assert {name: six[name] for name in three} == three


def test_a_name_hashes_into_the_subnet_deterministically():
    subnet = ipaddress.IPv4Network(SUBNET)
    seen = {_mesh.derive_address(subnet, f"host-{i}", "host.example") for i in range(500)}
    assert all(ipaddress.IPv4Address(a) in subnet for a in seen)
    assert str(subnet.network_address) not in seen and str(subnet.broadcast_address) not in seen
    assert _mesh.derive_address(subnet, "host-7") == _mesh.derive_address(subnet, "host-7", "not-an-ip")
    assert len(seen) > 200  # spread over the subnet, not a constant


@pytest.mark.parametrize("anchor", ["192.168.1.0", "192.168.1.255"])
def test_network_and_broadcast_host_bits_fall_back_to_the_name(anchor):
    subnet = ipaddress.IPv4Network(SUBNET)
    assert _mesh.derive_address(subnet, "n", anchor) == _mesh.derive_address(subnet, "n")


def test_wireguard_inventory_address_must_be_in_the_subnet():
    hostvars = {**lab(2), "node2": {"ansible_host": "10.213.0.12", "llamarpc_mesh_address": "10.98.0.12"}}
    result = mesh_plan(["node1", "node2"], hostvars, "wireguard", SUBNET)
    assert result["errors"] == [
        "node2: llamarpc_mesh_address 10.98.0.12 is not a host address of the mesh subnet 10.99.0.0/24 "
        "(llamarpc_mesh_subnet)"
    ]


def test_duplicates_name_every_host_and_source():
    hostvars = {**lab(3), "node3": {"ansible_host": "10.213.0.13", "llamarpc_mesh_address": "10.99.0.11"}}
    result = mesh_plan(["node1", "node2", "node3"], hostvars, "wireguard", SUBNET)
    assert result["errors"] == [
        "duplicate mesh address 10.99.0.11: node1 (derived), node3 (inventory); "
        "give all but one of them their own llamarpc_mesh_address"
    ]


def test_host_bits_collide_across_subnets():
    hostvars = {"a": {"ansible_host": "10.1.0.5"}, "b": {"ansible_host": "10.2.0.5"}}
    assert "duplicate mesh address 10.99.0.5" in mesh_plan(["a", "b"], hostvars, "wireguard", SUBNET)["errors"][0]


@pytest.mark.parametrize(
    ("provider", "subnet", "message"),
    [
        ("zerotier", SUBNET, "unknown mesh provider 'zerotier': llamarpc_mesh_provider must be one of none, wireguard"),
        ("wireguard", "10.99.0.1/24", "llamarpc_mesh_subnet '10.99.0.1/24' is not an IPv4 network"),
        ("wireguard", "fd00::/64", "llamarpc_mesh_subnet 'fd00::/64' is not an IPv4 network"),
        ("wireguard", "10.99.0.0/31", "llamarpc_mesh_subnet 10.99.0.0/31 is too small"),
    ],
)
def test_bad_provider_or_subnet(provider, subnet, message):
    result = mesh_plan(["node1"], lab(1), provider, subnet)
    assert result["addresses"] == {}
    assert result["errors"][0].startswith(message)


def test_tailscale_checks_only_explicit_addresses():
    hostvars = {"a": {"llamarpc_mesh_address": "100.64.0.1"}, "b": {"llamarpc_mesh_address": "100.64.0.1"}, "c": {}}
    result = mesh_plan(["a", "b", "c"], hostvars, "tailscale")
    assert result["addresses"] == {"a": "100.64.0.1", "b": "100.64.0.1"}
    assert len(result["errors"]) == 1 and "duplicate mesh address 100.64.0.1" in result["errors"][0]


@pytest.mark.parametrize("value", ["10.0.0.1", " 10.0.0.1 "])
def test_ipv4_accepts_dotted_quads(value):
    assert str(_mesh.ipv4(value)) == "10.0.0.1"


@pytest.mark.parametrize("value", ["10.0.0", "010.0.0.1", "::1", "10.0.0.256", "", "host"])
def test_ipv4_refuses_the_rest(value):
    assert _mesh.ipv4(value) is None
