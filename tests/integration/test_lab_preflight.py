"""lab_up refuses bad input with a clear error before it creates anything (needs root, like the lab itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")


def lab_objects(name):
    """Everything a lab named ``name`` could have created on this machine."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {
        "netns": [line for line in netns.splitlines() if f"llrpc-{name}-" in line],
        "bridge": [link["ifname"] for link in json.loads(links) if link["ifname"] == "llrpcbad0"],
        "state": Path(f"/var/lib/llamarpc-lab/{name}").exists(),
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"lab_host_count": 0}, "lab_host_count must be a whole number >= 1"),
        ({"lab_host_count": 300}, "do not fit in 10.213.250.0/24"),
        ({"lab_hosts": [{"name": "Node_1"}]}, "invalid lab host name 'Node_1'"),
        ({"lab_hosts": [{"name": "a"}, {"name": "a"}]}, "used twice"),
        ({"lab_hosts": [{"name": "a", "data_size": "lots"}]}, "invalid data_size"),
        ({"lab_subnet": "8.8.8.0/24"}, "must be a private IPv4 network"),
        ({"lab_host_count": "three"}, "lab_host_count"),
    ],
)
def test_bad_input_fails_before_anything_is_created(tmp_path, extra, message):
    name = "badinput"
    variables = {
        "lab_name": name,
        "lab_bridge": "llrpcbad0",
        "lab_subnet": "10.213.250.0/24",
        "lab_inventory_path": str(tmp_path / "hosts.yml"),
    }
    variables.update(extra)
    before = lab_objects(name)
    result = subprocess.run(
        [str(PLAYBOOK), "-i", "localhost,", "lab/playbooks/lab_up.yml", "-e", json.dumps(variables)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )
    assert result.returncode != 0, result.stdout
    assert message in result.stdout + result.stderr
    assert lab_objects(name) == before == {"netns": [], "bridge": [], "state": False}
    assert not (tmp_path / "hosts.yml").exists()
