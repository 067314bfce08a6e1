"""wireguard-go is a systemd service: when it dies, wg-quick brings the interface back, configured."""

from __future__ import annotations

from conftest import IFACE, mesh_address, ping
from labtest import lab, wait_for


def main_pid(host):
    out = host.check_output(f"systemctl show -p MainPID --value llamarpc-wireguard-go@{IFACE}.service")
    return int(out.strip())


def test_killed_wireguard_go_comes_back_and_the_mesh_works():
    node3 = lab("node3")
    old = main_pid(node3)
    assert old > 0
    node3.check_output(f"kill -KILL {old}")
    assert wait_for(lambda: main_pid(node3) not in (0, old)), "wireguard-go was not started again"
    assert wait_for(lambda: node3.run(f"ip -4 -o address show dev {IFACE}").stdout.count(mesh_address("node3")))
    assert wait_for(lambda: ping(lab("node1"), mesh_address("node3")))
    assert wait_for(lambda: ping(node3, mesh_address("node2")))
