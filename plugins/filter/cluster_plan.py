# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory planner's input from what the coordinator role gathered (module_utils/_cluster_plan.candidates)."""

# Each filter is documented beside this file, in plugins/filter/<filter name>.yml.

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils import _cluster_plan


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
