"""The role's day-2 entry points (tasks_from: status, restart), as playbooks/status.yml and restart.yml use them: the
status reads the unit's real state and the host's memory, the restart brings the worker back answering HELLO."""

import json

import testinfra.utils.ansible_runner
from labtest import INVENTORY, lab, run_ansible, wait_for

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
WORKERS = RUNNER.get_hosts("rpc_workers")
COORDINATOR = RUNNER.get_hosts("coordinator")[0]
TARGET = [name for name in WORKERS if name != COORDINATOR][-1]
SERVICE = "llamarpc-rpc-worker"
PORT = 50052

PLAY = """
- name: Day-2 entry point of the worker role
  hosts: {hosts}
  gather_facts: false
  tasks:
    - name: The entry point
      ansible.builtin.include_role:
        name: llamarpc.cluster.llama_rpc_worker
        tasks_from: {entry}

    - name: What it published, on the controller
      ansible.builtin.copy:
        content: >-
          {{{{ {{'unit': llama_rpc_worker_status | default(none),
                'memory': ansible_facts.llamarpc_memory | default(none)}} | to_json }}}}
        dest: "{out}/{{{{ inventory_hostname }}}}.json"
        mode: "0600"
      delegate_to: localhost
      vars:
        ansible_become: false
"""


def entry_point(tmp_path, entry, hosts="rpc_workers"):
    """Run the entry point on ``hosts``: {host: {"unit": llama_rpc_worker_status, "memory": llamarpc_memory}}."""
    playbook = tmp_path / f"{entry}.yml"
    playbook.write_text(PLAY.format(hosts=hosts, entry=entry, out=tmp_path), encoding="utf-8")
    result = run_ansible("ansible-playbook", playbook, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]
    return {path.stem: json.loads(path.read_text()) for path in tmp_path.glob("node*.json")}


def main_pid(name):
    return lab(name).check_output(f"systemctl show -p MainPID --value {SERVICE}")


def hello(name):
    result = lab(COORDINATOR).ansible(
        "llamarpc.cluster.rpc_endpoint_facts",
        f"endpoints={RUNNER.get_variables(name)['ansible_host']}:{PORT} timeout=3",
        check=False,
    )
    return result["ansible_facts"]["rpc_endpoints"][0]["state"]


def test_status_reports_each_unit_as_systemd_sees_it_and_the_memory(tmp_path):
    lab(TARGET).run_expect([0], f"systemctl stop {SERVICE}")
    try:
        report = entry_point(tmp_path, "status")
    finally:
        lab(TARGET).run_expect([0], f"systemctl start {SERVICE}")
    assert sorted(report) == sorted(WORKERS)
    states = {name: (entry["unit"]["active"], entry["unit"]["sub"]) for name, entry in report.items()}
    assert states == {name: ("inactive", "dead") if name == TARGET else ("active", "running") for name in WORKERS}
    assert all(entry["memory"]["available"] > 0 for entry in report.values()), report
    assert wait_for(lambda: hello(TARGET) == "ready")


def test_restart_restarts_the_worker_and_it_answers_again(tmp_path):
    before = main_pid(TARGET)
    entry_point(tmp_path, "restart", hosts=TARGET)
    after = main_pid(TARGET)
    assert after not in (before, "0"), (before, after)
    assert wait_for(lambda: hello(TARGET) == "ready")
