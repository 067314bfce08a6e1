# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory planner's input from what the coordinator role gathered (module_utils/_cluster_plan.candidates)."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils import _cluster_plan

DOCUMENTATION = r"""
name: planner_workers
short_description: The input of llama_cluster_plan, one entry per RPC worker
version_added: 0.1.0
description:
  - For worker host names and their endpoints (in step), one dictionary each with C(name), C(endpoint), C(state),
    C(mem_available), C(mem_total) and C(rtt_ms), as M(llamarpc.cluster.llama_cluster_plan) takes them.
  - C(state) is V(unreachable over SSH) when the host has no C(llamarpc_memory) fact
    (M(llamarpc.cluster.node_memory_facts)); V(ready) when its endpoint is in O(serving), when O(all_ready), or in
    O(check_mode) when nothing answers for it yet (V(refused), V(timeout) or V(unreachable) - a worker the run would
    start); else the state O(probe) reports for it.
options:
  _input:
    description: Worker host names.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable (each worker's C(ansible_facts.llamarpc_memory)).
    type: dict
    required: true
  endpoints:
    description: The workers' endpoints (C(address:port)), in the order of the names.
    type: list
    elements: str
    required: true
  probe:
    description: The C(rpc_endpoints) fact of M(llamarpc.cluster.rpc_endpoint_facts).
    type: list
    elements: dict
    default: []
  serving:
    description: Endpoints that serve llama-server now (not probed).
    type: list
    elements: str
    default: []
  all_ready:
    description: Count every worker whose memory is known as ready (the plan-only run, before any worker runs).
    type: bool
    default: false
  check_mode:
    description: Count a worker that nothing answers for yet as ready (pass C(ansible_check_mode)).
    type: bool
    default: false
author:
  - llamarpc.cluster contributors (@llamarpc)
"""

EXAMPLES = r"""
- name: Planner input
  ansible.builtin.set_fact:
    workers: >-
      {{ groups['rpc_workers'] | llamarpc.cluster.planner_workers(hostvars, endpoints,
         probe.ansible_facts.rpc_endpoints, check_mode=ansible_check_mode) }}
"""

RETURN = r"""
_value:
  description: One entry per worker, in order.
  type: list
  elements: dict
"""


def planner_workers(names, hostvars, endpoints, probe=(), serving=(), all_ready=False, check_mode=False):
    memory = {}
    for name in names:
        facts = (hostvars[name].get("ansible_facts") if name in hostvars else None) or {}
        if facts.get("llamarpc_memory") is not None:
            memory[name] = facts["llamarpc_memory"]
    return _cluster_plan.candidates(
        list(names),
        list(endpoints),
        memory,
        list(probe or ()),
        serving=list(serving or ()),
        all_ready=bool(all_ready),
        check_mode=bool(check_mode),
    )


class FilterModule:
    """The planner's input."""

    def filters(self):
        return {"planner_workers": planner_workers}
