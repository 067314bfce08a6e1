#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_plan
short_description: Validate a local lab request and check the controller can boot it
version_added: 0.1.0
description:
  - Computes the address, network namespace and interface names of every host of a local lab
    (hosts booted with C(systemd-nspawn) on the controller, see the P(llamarpc.lab.lab#role) role).
  - Checks before anything is created that the request is valid (host count, names, subnet capacity,
    sizes, rates) and that the controller has what booting needs (root, kernel features, programs).
  - Changes nothing.
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  lab_name:
    description: Name of the lab; part of every kernel object name it creates.
    type: str
    required: true
  hosts:
    description:
      - The lab hosts. Each item needs C(name) and may set C(groups) (inventory groups),
        C(address), C(data_size), C(memory_max) and C(bandwidth); missing keys come from O(defaults).
      - When empty, O(host_count) hosts named C(node1) ... C(nodeN) are planned, C(node1) in groups
        C(coordinator) and C(rpc_workers), the others in C(rpc_workers).
    type: list
    elements: dict
    default: []
  host_count:
    description: Number of hosts planned when O(hosts) is empty.
    type: int
    default: 6
  subnet:
    description: Private IPv4 subnet of the lab bridge; the controller takes its first address.
    type: str
    default: 10.213.0.0/24
  defaults:
    description: Default C(data_size), C(memory_max) and C(bandwidth) for hosts that do not set them.
    type: dict
    default: {}
  check_controller:
    description: Check root, kernel features and programs on the controller.
    type: bool
    default: true
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
notes:
  - Sizes accept bytes or IEC multiples (V(512M), V(2G)); rates accept tc rates (V(100mbit)).
"""

EXAMPLES = r"""
- name: Plan a three-host lab whose first host has a small data disk
  llamarpc.lab.lab_plan:
    lab_name: demo
    hosts:
      - {name: node1, groups: [coordinator, rpc_workers], data_size: 2G}
      - {name: node2, groups: [rpc_workers]}
      - {name: node3, groups: [rpc_workers], bandwidth: 100mbit}
  register: lab
"""

RETURN = r"""
bridge_address:
  description: Address of the controller on the lab bridge, with prefix length.
  returned: success
  type: str
  sample: 10.213.0.1/24
hosts:
  description: Every planned host with sizes in bytes and rates in bit/s (0 = no limit).
  returned: success
  type: list
  elements: dict
  sample:
    - name: node1
      address: 10.213.0.11
      prefixlen: 24
      groups: [coordinator, rpc_workers]
      netns: llrpc-demo-node1
      veth: llv0123456789a
      data_size: 2147483648
      memory_max: 0
      bandwidth: 0
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.lab.plugins.module_utils._lab import LabError, default_hosts, plan

_MEMORY_CGROUP_V1 = "/sys/fs/cgroup/memory"
_CGROUP_V2_CONTROLLERS = "/sys/fs/cgroup/cgroup.controllers"


def memory_cgroup_available():
    """True when a memory cgroup (v1 hierarchy or v2 controller) can be used by the lab."""
    if os.path.isfile(os.path.join(_MEMORY_CGROUP_V1, "memory.limit_in_bytes")):
        return True
    try:
        with open(_CGROUP_V2_CONTROLLERS, encoding="ascii") as handle:
            return "memory" in handle.read().split()
    except OSError:
        return False


def controller_problems(module, planned):
    """Everything missing on the controller for this plan, as user-facing sentences."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the lab must be run as root (it creates network namespaces, mounts and containers)")
    try:
        with open("/proc/filesystems", encoding="ascii") as handle:
            filesystems = handle.read().split()
    except OSError:
        filesystems = []
    if "overlay" not in filesystems:
        problems.append("the kernel has no overlay filesystem (needed for per-host root overlays)")
    for dev, why in (("/dev/fuse", "FUSE inside lab hosts (sshfs)"), ("/dev/net/tun", "TUN inside lab hosts")):
        if not os.path.exists(dev):
            problems.append(f"{dev} is missing (needed for {why})")
    if any(h["data_size"] for h in planned) and not os.path.exists("/dev/loop-control"):
        problems.append("/dev/loop-control is missing: size-limited data directories need loop devices")
    if any(h["memory_max"] for h in planned) and not memory_cgroup_available():
        problems.append("no memory cgroup is available: memory_max cannot be enforced")
    programs = ["systemd-nspawn", "debootstrap", "ip", "ssh-keygen", "mount", "umount"]
    if any(h["bandwidth"] for h in planned):
        programs.append("tc")
    if any(h["data_size"] for h in planned):
        programs.append("mkfs.ext4")
    for program in programs:
        if not module.get_bin_path(program):
            problems.append(f"program {program} is not installed")
    return problems


def main():
    module = AnsibleModule(
        argument_spec={
            "lab_name": {"type": "str", "required": True},
            "hosts": {"type": "list", "elements": "dict", "default": []},
            "host_count": {"type": "int", "default": 6},
            "subnet": {"type": "str", "default": "10.213.0.0/24"},
            "defaults": {"type": "dict", "default": {}},
            "check_controller": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        hosts = params["hosts"] or default_hosts(params["host_count"])
        result = plan(params["lab_name"], hosts, params["subnet"], params["defaults"])
    except LabError as exc:
        module.fail_json(msg=str(exc))
    if params["check_controller"]:
        problems = controller_problems(module, result["hosts"])
        if problems:
            module.fail_json(msg="the controller cannot boot this lab: " + "; ".join(problems), problems=problems)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
