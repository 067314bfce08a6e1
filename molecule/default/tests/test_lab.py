"""Verify the lab: real booted hosts, each with its own address, reaching each other, able to mount FUSE."""

import os
import socket
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
import yaml
from labtest import before_converge, lab

from ansible_collections.llamarpc.lab.plugins.module_utils._lab import parse_size

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["LLAMARPC_LAB_INVENTORY"])
HOSTS = RUNNER.get_hosts("all")
SCENARIO = Path(__file__).resolve().parents[1]


@pytest.fixture(params=HOSTS)
def host(request):
    """Each lab host in turn, through labtest.lab() (one SSH connection per host, not one per check)."""
    return lab(request.param)


def address_of(name):
    return RUNNER.get_variables(name)["ansible_host"]


def test_systemd_is_running(host):
    result = host.run("systemctl is-system-running --wait")
    assert result.stdout.strip() == "running", host.run("systemctl --failed --no-legend").stdout


def test_hostname_is_inventory_name(host):
    assert host.check_output("hostname") == host.backend.get_hostname()


def test_has_its_own_address(host):
    name = host.backend.get_hostname()
    addresses = host.interface("eth0").addresses
    assert address_of(name) in addresses
    assert all(address_of(other) not in addresses for other in HOSTS if other != name)


def test_bare_host_got_sshfs_from_the_lab_repository_and_nothing_else(host):
    # Like a fresh cloud VM, the image lacks what the roles install; converge asked apt for sshfs and fuse3 alone.
    before = before_converge(host)
    assert {name: path for name, path in before.items() if path} == {}, before
    assert host.exists("sshfs") and host.exists("fusermount3")
    for name in ("nft", "wg", "lsyncd", "rsync", "curl", "cmake", "g++"):
        assert not host.exists(name), f"{name} is on a bare lab host: the image is kinder than a fresh VM"


def test_the_only_apt_source_is_the_labs_repository(host):
    sources = host.run("grep -rhs '^[^#]' /etc/apt/sources.list /etc/apt/sources.list.d/").stdout
    bridge = RUNNER.get_variables(host.backend.get_hostname())["llamarpc_lab_controller_address"]
    assert sources.split() == ["Types:", "deb", "URIs:", f"http://{bridge}:8642/", "Suites:", "./", "Trusted:", "yes"]


def test_the_repository_listens_on_the_lab_bridge_only():
    # Served on the controller's bridge address alone: on loopback (and so on any other address) nothing answers.
    with socket.socket() as probe:
        probe.settimeout(2)
        assert probe.connect_ex(("127.0.0.1", 8642)) != 0, "the lab's apt repository answers on loopback"


def test_no_route_beyond_the_lab(host):
    # Lab hosts must not be able to send traffic anywhere but the lab subnet.
    assert "default" not in host.check_output("ip route show")


@pytest.mark.parametrize("other", HOSTS)
def test_reaches_every_other_host(host, other):
    result = host.run(f"ping -c 1 -W 2 {address_of(other)}")
    assert result.rc == 0, result.stderr


def test_sshd_serves_the_admin_with_a_key_only(host):
    sshd = host.run("sshd -T")
    assert "passwordauthentication no" in sshd.stdout
    assert host.service("ssh").is_running


def test_fuse_mount_works(host):
    # A real FUSE mount (sshfs over a local sftp-server), mounted, read through and unmounted.
    host.run("install -d -m 0755 /tmp/fusecheck-src /mnt/fusecheck && echo fuse-ok > /tmp/fusecheck-src/probe")
    host.run("printf '#!/bin/sh\\nexec /usr/lib/openssh/sftp-server\\n' > /usr/local/bin/lab-local-sftp")
    host.run("chmod 0755 /usr/local/bin/lab-local-sftp")
    mount = host.run("sshfs -o ssh_command=/usr/local/bin/lab-local-sftp local:/tmp/fusecheck-src /mnt/fusecheck")
    try:
        assert mount.rc == 0, mount.stderr
        assert host.mount_point("/mnt/fusecheck").filesystem == "fuse.sshfs"
        assert host.file("/mnt/fusecheck/probe").content_string.strip() == "fuse-ok"
    finally:
        host.run("fusermount3 -u /mnt/fusecheck")


def test_data_dir_size_cap(host):
    name = host.backend.get_hostname()
    want = int(RUNNER.get_variables(name)["llamarpc_lab_data_size"])
    data_dir = RUNNER.get_variables(name)["llamarpc_lab_data_dir"]
    size = int(host.check_output(f"df --output=size -B1 {data_dir} | tail -1"))
    if want:
        assert 0.8 * want <= size <= want  # ext4 keeps some of the image for itself
    else:
        assert size > 1024**3


def memory_limit(proc_cgroup, root="/sys/fs/cgroup"):
    """The memory limit that holds a process of the controller whose ``/proc/PID/cgroup`` reads ``proc_cgroup``: the
    smallest over its cgroup and every ancestor (a cap set on a parent holds its children too), from cgroup v2's
    ``memory.max`` or v1's ``memory.limit_in_bytes``, whichever hierarchy has the memory controller. None when no
    limit is set."""
    v1 = v2 = None
    for line in proc_cgroup.splitlines():
        _id, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = Path(root, "memory"), path, "memory.limit_in_bytes"
        elif not controllers:
            v2 = Path(root), path, "memory.max"
    mount, path, name = v1 or v2
    limits = []
    parts = [part for part in path.split("/") if part]
    for depth in range(len(parts), -1, -1):
        limit = mount.joinpath(*parts[:depth], name)
        text = limit.read_text(encoding="ascii").strip() if limit.exists() else "max"
        if text != "max" and int(text) < 1 << 62:  # v1 writes "no limit" as a huge number
            limits.append(int(text))
    return min(limits, default=None)


def test_memory_cap(host):
    # memory_max puts the host in a memory cgroup: read on the controller, from the cgroup of the host's init and its
    # ancestors, in cgroup v2 or v1 alike, and wherever systemd-nspawn nests the container under the cap.
    name = host.backend.get_hostname()
    variables = RUNNER.get_variables(name)
    state = Path("/var/lib/llamarpc-lab", variables["llamarpc_lab_name"], "hosts", name)
    nspawn = int((state / "nspawn.pid").read_text(encoding="ascii"))
    init = Path(f"/proc/{nspawn}/task/{nspawn}/children").read_text(encoding="ascii").split()
    assert init, f"systemd-nspawn {nspawn} of {name} has no child: the host is not running"
    lab_hosts = yaml.safe_load(SCENARIO.joinpath("lab.yml").read_text(encoding="utf-8"))["lab_hosts"]
    want = next(parse_size(entry.get("memory_max")) for entry in lab_hosts if entry["name"] == name)
    limit = memory_limit(Path(f"/proc/{init[0]}/cgroup").read_text(encoding="ascii"))
    assert limit == (want or None), f"{name}: lab.yml says memory_max {want or 'none'}"
