"""Changes to a running mesh (roles/wireguard/README.md): a peer added or removed is applied in place (wg syncconf)
without dropping the other peers' sessions, a peer removed by hand is brought back the same way, and an MTU change
restarts the interface. Runs last: the final test puts every host back as converge left it (the default MTU, the
full mesh), and checks that every host reaches every other again.

"In place" is read from two things a restart changes: wg-quick's unit gets a new InvocationID, and the interface
is created anew, so a peer's transfer counters start again from zero and its handshake is renewed (wireguard-go and
the kernel both). A peer kept in place keeps counting from where it was and keeps its handshake.
"""

from __future__ import annotations

import itertools
import json

from conftest import HOSTS, IFACE, SCENARIO, mesh_address, ping, playbook, wg_dump
from labtest import lab, wait_for

PLAYBOOK = SCENARIO / "tests" / "mesh.yml"
UNIT = f"wg-quick@{IFACE}.service"
DEFAULT_MTU = 1420


def invocation(host):
    """wg-quick's InvocationID (a new one for every start or restart of the unit)."""
    value = host.check_output(f"systemctl show -p InvocationID --value {UNIT}").strip()
    assert value, f"{UNIT} has no InvocationID: it is not running"
    return value


def mtu(host):
    return json.loads(host.check_output(f"ip -json link show dev {IFACE}"))[0]["mtu"]


def key_of(name):
    return wg_dump(lab(name))[0]["public_key"]


def session(host, peer):
    """A live session with ``peer`` (traffic sent first): its handshake time and counters."""
    peer_name = next(name for name in HOSTS if key_of(name) == peer)
    assert wait_for(lambda: ping(host, mesh_address(peer_name))), f"no traffic to {peer_name}"
    found = wg_dump(host)[1][peer]
    assert found["latest_handshake"] > 0, found
    return found


def assert_kept(before, after, what):
    """The peer's session survived: same or later handshake, counters that only grew."""
    assert after["latest_handshake"] >= before["latest_handshake"] > 0, f"{what}: {before} -> {after}"
    assert after["rx"] >= before["rx"] and after["tx"] >= before["tx"], f"{what}: counters reset {before} -> {after}"


def run_mesh(*args):
    """tests/mesh.yml as converge runs the mesh (provider wireguard), with ``args`` added."""
    rc, output = playbook(PLAYBOOK, "-e", "llamarpc_mesh_provider=wireguard", *args)
    assert rc == 0, output[-3000:]
    return output


def test_a_peer_removed_by_hand_comes_back_in_place():
    node1 = lab("node1")
    node2_key, node3_key = key_of("node2"), key_of("node3")
    unit_before = invocation(node1)
    kept_before = session(node1, node2_key)
    node1.check_output(f"wg set {IFACE} peer {node3_key} remove")
    assert node3_key not in wg_dump(node1)[1]

    run_mesh()  # every host (one left out with --limit would be dropped from the others' peers)

    peers = wg_dump(node1)[1]
    assert node3_key in peers and peers[node3_key]["allowed_ips"] == f"{mesh_address('node3')}/32"
    assert invocation(node1) == unit_before, "the interface was restarted, not synced"
    assert_kept(kept_before, wg_dump(node1)[1][node2_key], "node1's peer node2")
    assert wait_for(lambda: ping(node1, mesh_address("node3")))


def test_a_host_left_out_is_removed_in_place_and_added_back_in_place():
    """--limit node1,node2: node3 is out of the play, so no peer of theirs (README); then the full play adds it."""
    node1, node2 = lab("node1"), lab("node2")
    node2_key, node3_key = key_of("node2"), key_of("node3")
    units = {name: invocation(lab(name)) for name in ("node1", "node2")}
    kept = session(node1, node2_key)

    run_mesh("--limit", "node1,node2")
    for host in (node1, node2):
        assert node3_key not in wg_dump(host)[1]
    assert {name: invocation(lab(name)) for name in ("node1", "node2")} == units, "removing a peer restarted"
    removed = wg_dump(node1)[1][node2_key]
    assert_kept(kept, removed, "node1's peer node2 after node3 was removed")

    run_mesh()
    for host in (node1, node2):
        assert node3_key in wg_dump(host)[1]
    assert {name: invocation(lab(name)) for name in ("node1", "node2")} == units, "adding a peer restarted"
    assert_kept(removed, wg_dump(node1)[1][node2_key], "node1's peer node2 after node3 was added")
    assert wait_for(lambda: ping(node1, mesh_address("node3")) and ping(node2, mesh_address("node3")))


def test_an_mtu_change_restarts_the_interface_then_the_default_is_restored():
    before = {name: invocation(lab(name)) for name in HOSTS}
    assert {name: mtu(lab(name)) for name in HOSTS} == dict.fromkeys(HOSTS, DEFAULT_MTU)

    run_mesh("-e", "wireguard_mtu=1380")
    changed = {name: invocation(lab(name)) for name in HOSTS}
    assert {name: mtu(lab(name)) for name in HOSTS} == dict.fromkeys(HOSTS, 1380)
    assert all(changed[name] != before[name] for name in HOSTS), f"not restarted: {before} -> {changed}"

    run_mesh()  # back to converge's state, for whatever runs after this file
    assert {name: mtu(lab(name)) for name in HOSTS} == dict.fromkeys(HOSTS, DEFAULT_MTU)
    restored = {name: invocation(lab(name)) for name in HOSTS}
    assert all(restored[name] != changed[name] for name in HOSTS), f"not restarted: {changed} -> {restored}"
    for source, target in itertools.permutations(HOSTS, 2):
        assert wait_for(lambda s=source, t=target: ping(lab(s), mesh_address(t))), f"{source} -> {target}"
