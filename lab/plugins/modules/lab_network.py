#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_network
short_description: Manage the Linux bridge that connects local lab hosts
version_added: 0.1.0
description:
  - Creates (or removes) the bridge on the controller to which every lab host's veth pair is attached,
    and gives the controller its address on it.
  - No NAT and no default route are set up, so lab hosts reach each other and the controller and nothing else.
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  name:
    description: Bridge interface name (at most 15 characters).
    type: str
    required: true
  address:
    description: Controller address on the bridge with prefix length. Required when O(state=present).
    type: str
  state:
    description: Whether the bridge exists.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
seealso:
  - module: llamarpc.lab.lab_host
"""

EXAMPLES = r"""
- name: Lab bridge
  llamarpc.lab.lab_network:
    name: llrpc0
    address: 10.213.0.1/24
"""

RETURN = r"""
name:
  description: Bridge name.
  returned: success
  type: str
  sample: llrpc0
"""

import json

from ansible.module_utils.basic import AnsibleModule


def link_state(module, ip, name):
    """``(exists, addresses)`` of an interface, addresses as ``a.b.c.d/len`` strings."""
    rc, out, _err = module.run_command([ip, "-j", "addr", "show", "dev", name])
    if rc != 0:
        return False, []
    info = json.loads(out or "[]")
    addrs = [f"{a['local']}/{a['prefixlen']}" for item in info for a in item.get("addr_info", [])]
    return bool(info), addrs


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "address": {"type": "str"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        },
        required_if=[("state", "present", ["address"])],
        supports_check_mode=True,
    )
    name, address, state = module.params["name"], module.params["address"], module.params["state"]
    if len(name) > 15:
        module.fail_json(msg=f"bridge name {name!r} is longer than 15 characters")
    ip = module.get_bin_path("ip", required=True)
    exists, addrs = link_state(module, ip, name)
    if state == "absent":
        if exists and not module.check_mode:
            module.run_command([ip, "link", "del", name], check_rc=True)
        module.exit_json(changed=exists, name=name)

    steps = []
    if not exists:
        steps.append([ip, "link", "add", name, "type", "bridge"])
    if address not in addrs:
        steps.append([ip, "addr", "add", address, "dev", name])
    rc, out, _err = module.run_command([ip, "-j", "link", "show", "dev", name])
    up = rc == 0 and "UP" in (json.loads(out or "[{}]")[0].get("flags") or [])
    if not up:
        steps.append([ip, "link", "set", name, "up"])
    if not module.check_mode:
        for argv in steps:
            module.run_command(argv, check_rc=True)
    module.exit_json(changed=bool(steps), name=name)


if __name__ == "__main__":
    main()
