"""The six hosts booted bare, like fresh cloud VMs: what the roles run was missing before converge, and the roles
installed it themselves from the lab's apt repository (the lab gives nothing a real VM lacks)."""

from __future__ import annotations

import pytest
from labtest import before_converge, inventory_hosts, lab

HOSTS = sorted(inventory_hosts())


@pytest.mark.parametrize("name", HOSTS)
def test_what_the_roles_run_was_missing_before_converge(name):
    before = before_converge(lab(name))
    missing = {command for command, path in before.items() if path is None}
    assert {"sshfs", "fusermount3", "nft", "cmake", "g++", "curl"} <= missing, before


def test_the_coordinator_mounts_with_the_sshfs_its_role_installed():
    node1 = lab("node1")
    assert node1.exists("sshfs") and node1.exists("fusermount3")
    mounts = node1.check_output("findmnt -rn -t fuse.sshfs -o TARGET")
    assert mounts.strip(), "no shard directory is mounted over SSHFS on the coordinator"


@pytest.mark.parametrize("name", HOSTS)
def test_every_worker_has_the_nft_its_firewall_runs(name):
    host = lab(name)
    assert host.exists("nft")
    assert host.run("nft list table inet llamarpc_rpc_worker").rc == 0
