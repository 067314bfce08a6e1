"""Bad input fails the whole play in preflight with a message naming the problem, before anything changes."""

from __future__ import annotations

import pytest
from conftest import HOSTS, IFACE, SCENARIO, playbook
from labtest import lab

PLAYBOOK = SCENARIO / "tests" / "mesh.yml"


def snapshot():
    """What a run could change on the hosts: configuration files and the running peers."""
    return {
        name: lab(name).check_output(
            f"sha256sum /etc/wireguard/{IFACE}.conf /etc/systemd/system/wg-quick@{IFACE}.service.d/llamarpc.conf; "
            f"wg show {IFACE} peers | sort"
        )
        for name in HOSTS
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["-e", "llamarpc_mesh_provider=wireguard", "-e", "llamarpc_mesh_address=10.99.0.50"],
            "duplicate mesh address 10.99.0.50: node1 (inventory), node2 (inventory), node3 (inventory)",
        ),
        (
            ["-e", "llamarpc_mesh_provider=zerotier"],
            "value of llamarpc_mesh_provider must be one of: none, wireguard, tailscale, got: zerotier",
        ),
        (
            # tailscale_repo_url emptied: never Tailscale's own repository (the default) in a test
            ["-e", "llamarpc_mesh_provider=tailscale", "-e", "tailscale_auth_key=hunter2-not-a-key"]
            + ["-e", "tailscale_repo_url="],
            "does not have the format of tskey-auth-<id>-<secret>",
        ),
        (
            ["-e", "llamarpc_mesh_provider=wireguard", "-e", "llamarpc_mesh_subnet=10.99.0.0/33"],
            "llamarpc_mesh_subnet '10.99.0.0/33' is not an IPv4 network",
        ),
    ],
    ids=["duplicate-address", "unknown-provider", "bad-auth-key", "bad-subnet"],
)
def test_bad_input_fails_before_changing_anything(extra, message):
    before = snapshot()
    rc, output = playbook(PLAYBOOK, *extra)
    flat = " ".join(output.split())
    assert rc != 0 and message in flat, output[-3000:]
    assert "changed=0" in flat and "changed=1" not in flat
    assert "hunter2-not-a-key" not in output
    assert snapshot() == before
