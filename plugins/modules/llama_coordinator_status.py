#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_coordinator_status
short_description: The coordinator's status - health, the deployed plan, the supervisor's verdict, mounts and workers
version_added: 0.1.0
description:
  - Reads the deployed plan record (O(plan_file)), asks llama-server's C(/health) at the plan's URL, runs the
    supervisor's C(status) (read-only probes of the workers), and lists each SSHFS mount of shards below
    O(mount_root) (from C(/proc/self/mountinfo)) in a child killed after 5 seconds - V(ok), V(HUNG (no answer within
    5 s)) (a stopped or deadlocked sshfs, or the serving host gone) or V(ERROR).
  - Sets the fact C(llama_coordinator_status). Changes nothing.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.facts]
options:
  plan_file:
    description: The deployed plan record (C(plan.json) of the llama_coordinator role).
    type: path
    required: true
  supervisor:
    description: The supervisor script; run as C(PYTHON SUPERVISOR status).
    type: path
    required: true
  python:
    description: The Python that runs the supervisor (the one its units use).
    type: path
    default: /usr/bin/python3
  mount_root:
    description: Where the shards' SSHFS mounts are (llama_model's C(llama_model_mount_root)).
    type: path
    default: /mnt/llamarpc
  workers:
    description: The worker hosts, in the inventory's order (each listed under C(memory_available)).
    type: list
    elements: str
    default: []
  memory:
    description: Each worker's memory figures (C(llamarpc_memory) of M(llamarpc.cluster.node_memory_facts), run on
      it) by name; a worker without figures did not answer.
    type: dict
    default: {}
seealso:
  - module: llamarpc.cluster.node_memory_facts
  - module: llamarpc.cluster.llama_cluster_plan
"""

EXAMPLES = r"""
- name: Status of the coordinator, its plan, mounts and workers
  llamarpc.cluster.llama_coordinator_status:
    plan_file: /etc/llamarpc/coordinator/plan.json
    supervisor: /usr/local/lib/llamarpc/coordinator/llamarpc_supervisor.py
    workers: "{{ groups['rpc_workers'] }}"
    memory: "{{ dict(groups['rpc_workers'] | zip(groups['rpc_workers'] | map('extract', hostvars)
      | map(attribute='ansible_facts.llamarpc_memory', default={}))) }}"

- name: Show it
  ansible.builtin.debug:
    var: ansible_facts.llama_coordinator_status
"""

RETURN = r"""
ansible_facts:
  description: Facts.
  returned: always
  type: dict
  contains:
    llama_coordinator_status:
      description: C(api) (the plan's URL), C(health) (C(200 ok), C(503 Loading model), or C(no answer) and why),
        C(supervisor) (its verdict, with its last timer check), C(plan) (the table), C(mounts) (C(target - state)
        strings), C(workers) (the supervisor's state of each) and C(memory_available) (C(host - 4.00 GB) or
        C(host - no answer)).
      type: dict
      sample:
        api: http://10.213.0.11:8080
        health: 200 ok
        mounts: ["/mnt/llamarpc/node2: ok"]
        memory_available: ["node1: 3.50 GB", "node2: no answer"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_state as state
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_status as status

ARGUMENT_SPEC = {
    "plan_file": {"type": "path", "required": True},
    "supervisor": {"type": "path", "required": True},
    "python": {"type": "path", "default": "/usr/bin/python3"},
    "mount_root": {"type": "path", "default": "/mnt/llamarpc"},
    "workers": {"type": "list", "elements": "str", "default": []},
    "memory": {"type": "dict", "default": {}},
}


def read_status(module):
    """The status record, every part read on this host; fails with what is missing."""
    params = module.params
    deployed = state.read_record(state.read_text(params["plan_file"]))
    if not deployed:
        module.fail_json(msg=f"no deployed plan in {params['plan_file']}: run site.yml first")
    rc, out, err = module.run_command([params["python"], params["supervisor"], "status"])
    verdict = state.read_record(out) if rc == 0 else {}
    if not verdict:
        module.fail_json(msg=f"the supervisor's status failed (exit {rc}): {(err or out).strip()}")
    timeout, ls = module.get_bin_path("timeout", required=True), module.get_bin_path("ls", required=True)
    mounts = []
    for target in status.sshfs_mounts(state.read_text("/proc/self/mountinfo") or "", params["mount_root"]):
        # In a child killed after the bound: opendir and readdir always reach sshfs, a hung one never answers.
        rc, _out, _err = module.run_command(
            [timeout, "--signal=KILL", str(status.LISTING_SECONDS), ls, "-f", target + "/"]
        )
        mounts.append((target, status.mount_state(rc)))
    health = status.health_text(*status.read_health(deployed.get("url", "")))
    return status.record(deployed, health, verdict, mounts, params["workers"], params["memory"])


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts={"llama_coordinator_status": read_status(module)})


if __name__ == "__main__":
    main()
