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

import os

from ansible.module_utils.basic import AnsibleModule

# Larger than this, a v1 limit means "no limit" (the kernel's default is 2^63 rounded to pages).
_UNLIMITED = 1 << 60


def read_meminfo(path="/proc/meminfo"):
    """MemTotal and MemAvailable in bytes."""
    values = {}
    with open(path, encoding="ascii") as handle:
        for line in handle:
            key, rest = line.split(":", 1)
            fields = rest.split()
            values[key] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return values["MemTotal"], values.get("MemAvailable", values.get("MemFree", 0))


def _read_int(path):
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except OSError:
        return None
    if text == "max" or not text:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= _UNLIMITED else value


def cgroup_memory(root="/sys/fs/cgroup"):
    """(limit, usage) of the memory cgroup this host sees as its root, or (None, None) without a limit."""
    for limit_name, usage_name in (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        limit = _read_int(os.path.join(root, limit_name))
        if limit is not None:
            return limit, _read_int(os.path.join(root, usage_name)) or 0
    return None, None


def memory_facts(meminfo="/proc/meminfo", cgroup_root="/sys/fs/cgroup"):
    total, available = read_meminfo(meminfo)
    limit, usage = cgroup_memory(cgroup_root)
    usable = available if limit is None else min(available, max(limit - usage, 0))
    return {
        "total": total,
        "mem_available": available,
        "cgroup_limit": limit,
        "cgroup_usage": usage,
        "available": usable,
    }


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    try:
        facts = memory_facts()
    except (OSError, KeyError, ValueError, IndexError) as exc:
        module.fail_json(msg=f"cannot read the host's memory figures: {exc}")
    module.exit_json(changed=False, ansible_facts={"llamarpc_memory": facts})


if __name__ == "__main__":
    main()
