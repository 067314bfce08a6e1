"""The mesh contract: mesh address first, then ansible_host, then the inventory name."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.filter.mesh import mesh_addresses


def test_mesh_address_precedence():
    hostvars = {
        "a": {"llamarpc_mesh_address": "100.64.0.1", "ansible_host": "10.0.0.1"},
        "b": {"ansible_host": "10.0.0.2"},
        "c": {},
        "d": {"llamarpc_mesh_address": "", "ansible_host": "10.0.0.4"},
    }
    assert mesh_addresses(["a", "b", "c", "d"], hostvars) == ["100.64.0.1", "10.0.0.2", "c", "10.0.0.4"]


def test_order_follows_the_names():
    hostvars = {"x": {"ansible_host": "1"}, "y": {"ansible_host": "2"}}
    assert mesh_addresses(["y", "x"], hostvars) == ["2", "1"]
