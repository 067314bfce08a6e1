"""Helpers of the mesh scenario's tests: lab hosts by name, their WireGuard state, Ansible runs against the lab.

Traffic goes only to this scenario's own lab hosts and their mesh addresses (namespaces the lab created).
"""

from __future__ import annotations

from pathlib import Path

import testinfra.utils.ansible_runner
from labtest import INVENTORY, adhoc, run_ansible

SCENARIO = Path(__file__).resolve().parents[1]
HOSTS = ["node1", "node2", "node3"]
IFACE = "wg-llamarpc"
PORT = 51820
RPC_PORT = 50052
SUBNET_PREFIX = "10.99.0."

_RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)


def lab_address(name):
    """The host's address on the lab bridge (its ansible_host)."""
    return _RUNNER.get_variables(name)["ansible_host"]


def mesh_address(name):
    """The mesh address the role derives (the host bits of ansible_host in 10.99.0.0/24)."""
    return SUBNET_PREFIX + lab_address(name).rsplit(".", 1)[1]


def wg_dump(host):
    """``wg show IFACE dump`` of ``host``: (interface fields, {public key: peer fields})."""
    lines = host.check_output(f"wg show {IFACE} dump").splitlines()
    head = lines[0].split("\t")
    peers = {}
    for line in lines[1:]:
        fields = line.split("\t")
        peers[fields[0]] = {
            "endpoint": fields[2],
            "allowed_ips": fields[3],
            "latest_handshake": int(fields[4]),
            "rx": int(fields[5]),
            "tx": int(fields[6]),
        }
    return {"public_key": head[1], "listen_port": int(head[2])}, peers


def ping(host, address, count=1, size=56, wait=2):
    """True when ``host`` gets ``count`` answers from ``address``."""
    return host.run(f"ping -n -q -c {count} -s {size} -W {wait} -i 0.2 {address}").rc == 0


def playbook(path, *args, timeout=600):
    """Run ansible-playbook ``path`` against the lab: (return code, combined output)."""
    done = run_ansible("ansible-playbook", path, *args, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def module(host_name, name, args, timeout=120):
    """Run module ``name`` on one lab host through ansible; its JSON result."""
    done, result = adhoc(host_name, name, args, timeout=timeout)
    if result is None:
        raise AssertionError(f"no result from ansible (rc {done.returncode}): {done.stdout}\n{done.stderr}")
    return result
