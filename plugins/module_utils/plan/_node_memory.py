# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Memory a host can really give a model: MemAvailable from /proc/meminfo, bounded by its memory cgroup's remaining
memory. Read by node_memory_facts on every worker and by llama_cluster_plan for the coordinator's own host.

Standard library only.
"""

from __future__ import annotations

import os

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
