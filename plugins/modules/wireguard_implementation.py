#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wireguard_implementation
short_description: Whether WireGuard runs in the kernel or in userspace here, loading the kernel module if there is one
version_added: 0.1.0
description:
  - V(kernel) when the WireGuard kernel module is loaded (C(/sys/module/wireguard)) or C(modprobe wireguard) loads
    it; V(userspace) (C(wireguard-go)) otherwise - containers, kernels without the module, no C(modprobe).
  - Returns it as the fact C(wireguard_implementation).
author:
  - llamarpc.cluster contributors (@llamarpc)
options: {}
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.facts]
attributes:
  check_mode:
    details: Only asks whether the kernel has the module (C(modprobe --dry-run)); loads nothing.
seealso:
  - module: llamarpc.cluster.wireguard_interface
"""

EXAMPLES = r"""
- name: Kernel or userspace WireGuard
  llamarpc.cluster.wireguard_implementation:

- name: The userspace implementation where the kernel has no module
  ansible.builtin.apt:
    name: wireguard-go
  when: ansible_facts.wireguard_implementation == 'userspace'
"""

RETURN = r"""
loaded:
  description: Whether the kernel module is loaded (or, in check mode, would load).
  returned: always
  type: bool
  sample: false
modprobe:
  description: What C(modprobe) said, when it ran.
  returned: when the module was not loaded and modprobe is installed
  type: str
  sample: "modprobe: FATAL: Module wireguard not found in directory /lib/modules/6.1.0-28-amd64"
ansible_facts:
  description: Facts.
  returned: always
  type: dict
  contains:
    wireguard_implementation:
      description: V(kernel) or V(userspace).
      type: str
      sample: userspace
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh._wireguard_interface import implementation


def main():
    implementation(AnsibleModule(argument_spec={}, supports_check_mode=True))


if __name__ == "__main__":
    main()
