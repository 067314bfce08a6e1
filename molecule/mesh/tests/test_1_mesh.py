"""The WireGuard mesh on three lab hosts: a full mesh, in the kernel or in userspace (wireguard-go), under systemd."""

from __future__ import annotations

import itertools
import json

import pytest
from conftest import HOSTS, IFACE, PORT, lab_address, mesh_address, ping, wg_dump
from labtest import lab, wait_for
from unit_users import CAPABILITY_BITS, process_bounding_set, root_unit_findings


@pytest.mark.parametrize("name", HOSTS)
def test_wireguard_runs_under_systemd_in_the_kernel_or_in_userspace(name):
    """The kernel's WireGuard where the host has the module, else wireguard-go supervised by systemd. Which one serves
    is read from the interface itself (its link kind), not from whether the module is loaded now: a module loaded
    after the interface came up (the lab hosts share the controller's kernel) changes nothing of it. So the test holds
    with the module or without, loaded before, after or never."""
    host = lab(name)
    assert host.service(f"wg-quick@{IFACE}").is_enabled
    kind = json.loads(host.check_output(f"ip -json -details link show dev {IFACE}"))[0]["linkinfo"]["info_kind"]
    go = host.check_output(f"systemctl show -p ActiveState,MainPID llamarpc-wireguard-go@{IFACE}.service")
    if kind == "wireguard":  # the kernel's: there is a module (loaded, or built in), and no wireguard-go beside it
        assert host.file("/sys/module/wireguard").exists
        assert "ActiveState=active" not in go, go
    else:  # wireguard-go's TUN device, its process supervised by systemd and holding the interface's control socket
        assert kind == "tun", kind
        assert "ActiveState=active" in go, go
        pid = go.split("MainPID=")[1].split()[0]
        assert host.check_output(f"cat /proc/{pid}/comm") == "wireguard-go"
        assert host.file(f"/var/run/wireguard/{IFACE}.sock").is_socket
    assert mesh_address(name) in host.interface(IFACE).addresses


@pytest.mark.parametrize("name", HOSTS)
def test_wireguard_go_is_root_with_only_the_capability_its_reason_names(name):
    """llamarpc-wireguard-go@ must be root (ROOT_UNITS: the TUN device and its configuration): CAP_NET_ADMIN only,
    in the unit systemd loaded and in the bounding set of the running process - and the mesh works with that (the
    other tests of this module, after wg-quick started it)."""
    host = lab(name)
    unit = f"llamarpc-wireguard-go@{IFACE}.service"
    if host.check_output(f"systemctl show -p ActiveState --value {unit}") != "active":
        pytest.skip(f"the kernel's WireGuard serves {IFACE} on {name}: no wireguard-go")
    wrong, seen = root_unit_findings(host, name)
    assert "llamarpc-wireguard-go@<interface>.service" in seen, seen
    assert not wrong, wrong
    pid = host.check_output(f"systemctl show -p MainPID --value {unit}")
    assert process_bounding_set(host, pid) == {CAPABILITY_BITS["cap_net_admin"]}


@pytest.mark.parametrize("name", HOSTS)
def test_private_key_stays_on_the_host(name):
    host = lab(name)
    key = host.file(f"/etc/wireguard/{IFACE}.key")
    assert key.mode == 0o600 and key.user == "root"
    assert host.file("/etc/wireguard").mode == 0o700
    private = key.content_string.strip()
    assert private not in host.file(f"/etc/wireguard/{IFACE}.conf").content_string
    # The interface uses the key from the file: its public key is the file's.
    public = host.check_output(f"wg pubkey < /etc/wireguard/{IFACE}.key")
    assert wg_dump(host)[0]["public_key"] == public


def test_full_mesh_every_host_a_peer_of_every_other():
    keys = {name: wg_dump(lab(name))[0]["public_key"] for name in HOSTS}
    assert len(set(keys.values())) == len(HOSTS)
    for name in HOSTS:
        interface, peers = wg_dump(lab(name))
        assert interface["listen_port"] == PORT
        expected = {keys[other]: other for other in HOSTS if other != name}
        assert set(peers) == set(expected), f"{name}: peers {peers}"
        for key, other in expected.items():
            assert peers[key]["allowed_ips"] == f"{mesh_address(other)}/32"
            assert peers[key]["endpoint"] == f"{lab_address(other)}:{PORT}"


@pytest.mark.parametrize(("source", "target"), list(itertools.permutations(HOSTS, 2)))
def test_each_host_reaches_the_others_over_the_mesh(source, target):
    assert wait_for(lambda: ping(lab(source), mesh_address(target)))


def test_traffic_to_a_mesh_address_goes_through_the_tunnel():
    """Ping node2's mesh address from node1: node1's counters for peer node2 grow by at least the bytes sent."""
    node1, node2 = lab("node1"), lab("node2")
    peer = wg_dump(node2)[0]["public_key"]
    before = wg_dump(node1)[1][peer]
    count, size = 50, 1000
    assert ping(node1, mesh_address("node2"), count=count, size=size)
    after = wg_dump(node1)[1][peer]
    sent, received = after["tx"] - before["tx"], after["rx"] - before["rx"]
    print(f"\nnode1 -> node2: {count} pings of {size} B: tunnel tx +{sent} B, rx +{received} B")
    assert sent >= count * size and received >= count * size
    assert after["latest_handshake"] > 0
