#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_memory_facts
short_description: Memory a host can really give a model (MemAvailable and its cgroup's limit)
version_added: 0.1.0
description:
  - Reads C(MemTotal) and C(MemAvailable) from C(/proc/meminfo) and, when the host runs in a memory cgroup with a
    limit (a container, a VM-like slice), the limit and usage of that cgroup (v2 C(memory.max)/C(memory.current),
    v1 C(memory.limit_in_bytes)/C(memory.usage_in_bytes)).
  - C(available) is the smaller of MemAvailable and the cgroup's remaining memory. It is what the planner uses, since
    llama.cpp's CPU workers report free == total over RPC.
  - Changes nothing.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.facts]
options: {}
"""

EXAMPLES = r"""
- name: Memory of every worker
  llamarpc.cluster.node_memory_facts:

- name: Show it
  ansible.builtin.debug:
    msg: "{{ ansible_facts.llamarpc_memory.available | human_readable }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts.
  returned: always
  type: dict
  contains:
    llamarpc_memory:
      description: C(total), C(mem_available), C(cgroup_limit) and C(cgroup_usage) (null without a limit), C(available)
        (bytes).
      type: dict
      sample: {"total": 8589934592, "mem_available": 7516192768, "cgroup_limit": null, "cgroup_usage": null,
               "available": 7516192768}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._node_memory import memory_facts


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    try:
        facts = memory_facts()
    except (OSError, KeyError, ValueError, IndexError) as exc:
        module.fail_json(msg=f"cannot read the host's memory figures: {exc}")
    module.exit_json(changed=False, ansible_facts={"llamarpc_memory": facts})


if __name__ == "__main__":
    main()
