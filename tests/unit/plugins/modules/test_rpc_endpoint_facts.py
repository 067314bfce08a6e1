# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""rpc_endpoint_facts: main() against scripted loopback workers, the documentation, and a real playbook run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_endpoints
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc
from ansible_collections.llamarpc.cluster.plugins.modules import rpc_endpoint_facts as module

REPO = Path(__file__).resolve().parents[4]
ANSIBLE_BIN = Path(sys.executable).parent


@pytest.fixture
def run(run_module):
    """Run rpc_endpoint_facts in-process (the shared run_module fixture of tests/unit/plugins/modules)."""
    return lambda args, *, check_mode=False: run_module(module, args, check_mode=check_mode)


# The scripted workers answer at once: the deadlines only bound a broken test, and leave a loaded machine
# time to schedule the server thread (a reply late by 0.5 s would read as "busy").
PROMPT = {"timeout": 5.0, "connect_timeout": 5.0}


def test_ready_and_refused_endpoints(rpc_server, closed_port, run):
    server = rpc_server(major=7, devices=((1 << 30, 2 << 30, 64, 1 << 40),))
    outcome = run({"endpoints": [server.endpoint, f"127.0.0.1:{closed_port}"], **PROMPT})
    assert not outcome.failed
    result = outcome.result
    assert result["changed"] is False
    ready, refused = result["ansible_facts"]["rpc_endpoints"]
    assert ready == {
        "name": server.endpoint,
        "endpoint": server.endpoint,
        "host": "127.0.0.1",
        "port": server.port,
        "state": "ready",
        "protocol": "7.0.0",
        "major": 7,
        "minor": 0,
        "patch": 0,
        "hello_form": "conn_caps",
        "device_count": 1,
        "devices": [{"index": 0, "free": 1 << 30, "total": 2 << 30, "alignment": 64, "max_size": 1 << 40}],
        "connect_rtt_ms": ready["connect_rtt_ms"],
        "error": None,
    }
    assert isinstance(ready["connect_rtt_ms"], float)
    assert refused["state"] == "refused"
    assert refused["protocol"] is None
    assert refused["devices"] == []
    assert result["summary"] == {
        "total": 2,
        "ready": 1,
        "busy": 0,
        "refused": 1,
        "timeout": 0,
        "unreachable": 0,
        "incompatible": 0,
        "malformed": 0,
    }
    assert result["msg"].startswith("2 endpoints: 1 ready, 1 refused; ")
    assert f"127.0.0.1:{closed_port} refused: connection refused" in result["msg"]


def test_check_mode_probes_the_same(rpc_server, run):
    server = rpc_server()
    outcome = run({"endpoints": [server.endpoint], **PROMPT}, check_mode=True)
    assert not outcome.failed
    assert outcome.result["changed"] is False
    assert outcome.result["ansible_facts"]["rpc_endpoints"][0]["state"] == "ready"
    assert outcome.result["msg"] == "1 endpoint: 1 ready"


def test_dict_endpoints_names_and_default_port(rpc_server, run):
    first = rpc_server(minor=1)
    second = rpc_server(minor=2)
    outcome = run(
        {
            "endpoints": [
                {"host": "127.0.0.1", "port": first.port, "name": "node1"},
                {"host": "127.0.0.1", "port": str(second.port)},
                "127.0.0.1",
            ],
            "default_port": second.port,
            **PROMPT,
        },
    )
    facts = outcome.result["ansible_facts"]["rpc_endpoints"]
    assert [(item["name"], item["protocol"]) for item in facts] == [
        ("node1", "7.1.0"),
        (second.endpoint, "7.2.0"),
        (second.endpoint, "7.2.0"),
    ]
    assert second.connections == 1  # listed twice, probed once: a second probe would find it busy


def test_comma_separated_string_like_llama_server_rpc_option(rpc_server, run):
    first = rpc_server()
    second = rpc_server()
    outcome = run({"endpoints": f"{first.endpoint},{second.endpoint}", **PROMPT})
    assert [item["state"] for item in outcome.result["ansible_facts"]["rpc_endpoints"]] == ["ready", "ready"]


def test_ipv6_endpoint(rpc_server, run):
    server = rpc_server(family=socket.AF_INET6)
    outcome = run({"endpoints": [f"[::1]:{server.port}", {"host": "[::1]", "port": server.port}], **PROMPT})
    facts = outcome.result["ansible_facts"]["rpc_endpoints"]
    assert [(item["endpoint"], item["state"]) for item in facts] == [(f"[::1]:{server.port}", "ready")] * 2


def test_busy_worker_passes_unless_listed_in_fail_on(rpc_server, run):
    busy = rpc_server(accept=False)
    outcome = run({"endpoints": [busy.endpoint], "timeout": 0.3, "connect_timeout": 1})
    assert not outcome.failed
    assert outcome.result["summary"]["busy"] == 1
    outcome = run({"endpoints": [busy.endpoint], "timeout": 0.3, "connect_timeout": 1, "fail_on": ["refused"]})
    assert not outcome.failed


def test_fail_on_fails_with_facts(rpc_server, closed_port, run):
    server = rpc_server()
    outcome = run(
        {
            "endpoints": [server.endpoint, {"host": "127.0.0.1", "port": closed_port, "name": "node9"}],
            "fail_on": ["refused", "timeout"],
            **PROMPT,
        },
    )
    assert outcome.failed
    assert outcome.result["msg"].startswith("1 of 2 endpoints in a state listed in fail_on: node9 (refused).")
    assert outcome.result["changed"] is False
    assert [item["state"] for item in outcome.result["ansible_facts"]["rpc_endpoints"]] == ["ready", "refused"]
    assert outcome.result["summary"]["refused"] == 1


def test_empty_list_probes_nothing(run):
    outcome = run({"endpoints": []})
    assert not outcome.failed
    assert outcome.result["ansible_facts"]["rpc_endpoints"] == []
    assert outcome.result["msg"] == "0 endpoints"


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        (["h:0"], "invalid endpoint: endpoint 'h:0': port 0 is out of range 1-65535"),
        ([{"port": 1}], "'host' must be a non-empty string"),
        ([{"host": "h", "addr": 1}], "unknown keys addr"),
        ([{"host": "h", "port": "x"}], "port 'x' is not an integer"),
        ([{"host": "h", "port": True}], "port must be an integer"),
        ([{"host": "h", "name": 5}], "'name' must be a string"),
        ([5], "expected a 'host:port' string"),
    ],
)
def test_invalid_endpoints_fail_with_a_message(endpoints, message, run):
    outcome = run({"endpoints": endpoints})
    assert outcome.failed
    assert message in outcome.result["msg"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"timeout": 0}, "timeout must be greater than 0"),
        ({"connect_timeout": -1}, "connect_timeout must be greater than 0"),
        ({"default_port": 70000}, "default_port must be within 1-65535"),
        ({"fail_on": ["ready"]}, "value of fail_on must be one or more of"),
    ],
)
def test_invalid_options_fail(args, message, run):
    outcome = run({"endpoints": ["127.0.0.1:1"], **args})
    assert outcome.failed
    assert message in outcome.result["msg"]


# ---------------------------------------------------------------------------------------------------
# Documentation


def _doc(name):
    return yaml.safe_load(getattr(module, name))


def test_documentation_matches_argument_spec():
    options = _doc("DOCUMENTATION")["options"]
    assert set(options) == set(module.ARGUMENT_SPEC)
    for name, spec in module.ARGUMENT_SPEC.items():
        doc = options[name]
        assert doc["type"] == spec["type"], name
        assert doc.get("elements") == spec.get("elements"), name
        assert doc.get("required", False) == spec.get("required", False), name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("choices") == spec.get("choices"), name


def test_examples_and_return_are_yaml():
    examples = _doc("EXAMPLES")
    assert all("llamarpc.cluster.rpc_endpoint_facts" in task or "ansible.builtin.debug" in task for task in examples)
    returned = _doc("RETURN")
    item = returned["ansible_facts"]["contains"]["rpc_endpoints"]["contains"]
    assert set(item) == {"name", *rpc.ProbeResult("h", 1).as_dict()}
    assert set(item["devices"]["contains"]) == set(rpc.DeviceInfo(0, 0, 0, 0, 0).as_dict())
    assert item["state"]["choices"] == list(rpc.STATES)
    assert set(returned["summary"]["sample"]) == {"total", *rpc.STATES}


@pytest.mark.skipif(not (ANSIBLE_BIN / "ansible-doc").exists(), reason="ansible-doc is not installed")
def test_ansible_doc_renders():
    proc = subprocess.run(
        [str(ANSIBLE_BIN / "ansible-doc"), "llamarpc.cluster.rpc_endpoint_facts"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "fail_on" in proc.stdout
    assert "rpc_endpoints" in proc.stdout
    assert "WARNING" not in proc.stderr


# ---------------------------------------------------------------------------------------------------
# A real playbook: the endpoints expressions of EXAMPLES, built from inventory hostvars

PLAYBOOK = """
- name: Probe the workers of the inventory
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Probe by ansible_host and default_port
      llamarpc.cluster.rpc_endpoint_facts:
        endpoints: "{{ groups['rpc_workers'] | map('extract', hostvars, 'ansible_host') | list }}"
        default_port: "{{ rpc_port }}"
        timeout: 10
      register: by_host

    - name: Probe with the inventory names as labels
      llamarpc.cluster.rpc_endpoint_facts:
        endpoints: >-
          {{ dict(groups['rpc_workers'] | zip(groups['rpc_workers'] | map('extract', hostvars, 'ansible_host')))
             | dict2items(key_name='name', value_name='host') }}
        default_port: "{{ rpc_port }}"
        timeout: 10
        fail_on: [busy, refused, timeout, unreachable, incompatible, malformed]
      register: by_name

    - name: Report
      ansible.builtin.copy:
        content: "{{ {'by_host': by_host, 'by_name': by_name, 'facts': ansible_facts.rpc_endpoints} | to_json }}"
        dest: "{{ report }}"
        mode: "0600"
"""


@pytest.mark.skipif(not (ANSIBLE_BIN / "ansible-playbook").exists(), reason="ansible-playbook is not installed")
def test_playbook_with_hostvars_expression(rpc_server, tmp_path):
    server = rpc_server(major=7, minor=0, patch=0)
    inventory = {
        "all": {
            "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
            "children": {
                "rpc_workers": {
                    "hosts": {"node1": {"ansible_host": "127.0.0.1"}},
                },
            },
        },
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    report = tmp_path / "report.json"
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections")
    )
    env.pop("ANSIBLE_INVENTORY", None)
    proc = subprocess.run(
        [
            shutil.which("ansible-playbook", path=str(ANSIBLE_BIN)) or "ansible-playbook",
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"),
            "-e",
            json.dumps({"rpc_port": server.port, "report": str(report)}),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    by_host = data["by_host"]["ansible_facts"]["rpc_endpoints"]
    assert [(item["endpoint"], item["state"], item["protocol"]) for item in by_host] == [
        (server.endpoint, "ready", "7.0.0"),
    ]
    by_name = data["by_name"]["ansible_facts"]["rpc_endpoints"]
    assert [(item["name"], item["state"]) for item in by_name] == [("node1", "ready")]
    assert data["by_name"]["changed"] is False
    assert data["facts"][0]["name"] == "node1"


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0A00020F:C384 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 1 1 0000 100 0 0 10 0
   1: 0A00020F:C384 0A000201:D2F0 01 00000000:00000000 00:00000000 00000000   999        0 2 1 0000 20 4 30 10 -1
   2: 0A00020F:0016 0A000201:9C40 01 00000000:00000000 02:0007F1A6 00000000     0        0 3 2 0000 21 4 30 10 -1
   3: 0A00020F:E2A8 0A000203:C384 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0000 20 4 30 10 -1
   4: 0A00020F:1F90 0A000201:D2F1 06 00000000:00000000 03:00000D8F 00000000     0        0 0 3 0000 0 0 0 0 0
"""


def test_established_ports_are_the_local_ports_of_established_connections(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(PROC_NET_TCP, encoding="ascii")  # and no tcp6: an empty table
    # 50052 (0xC384) serving a client, ssh (22), and 58024, the local end of this host's own connection to another
    # worker's 50052 (whose 50052 is the remote port: not this host's); the listening socket (0A) and a TIME_WAIT one
    # (06) are not established.
    ports = _rpc_endpoints.established_ports(str(tmp_path))
    assert ports == {50052, 22, 58024}


def test_skip_connected_reports_a_serving_worker_busy_without_connecting(run):
    listener = socket.create_server(("127.0.0.1", 0), backlog=1)
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _address = listener.accept()  # llama-server's connection to the worker: established on the worker's port
    try:
        outcome = run({"endpoints": [f"127.0.0.1:{port}"], "skip_connected": True, **PROMPT})
        (item,) = outcome.result["ansible_facts"]["rpc_endpoints"]
        assert (item["state"], item["error"]) == ("busy", _rpc_endpoints.SERVING_ERROR)
        assert item["connect_rtt_ms"] is None
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing was left in the worker's backlog
    finally:
        for sock in (client, served, listener):
            sock.close()


def test_without_skip_connected_a_free_worker_is_probed(rpc_server, run):
    server = rpc_server(major=7, devices=((1 << 30, 2 << 30, 64, 1 << 40),))
    outcome = run({"endpoints": [server.endpoint], "skip_connected": True, **PROMPT})
    assert outcome.result["ansible_facts"]["rpc_endpoints"][0]["state"] == "ready"
