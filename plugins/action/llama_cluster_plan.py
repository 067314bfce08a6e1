# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of llama_cluster_plan (documented in plugins/modules/llama_cluster_plan.py): in check mode, the
headers of the controller's copy of the model (controller_model_path) are read here and given to the module, which
runs on the coordinator and plans from them when the model is not there yet. Otherwise the module runs as it is."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as planner

MODULE = "llamarpc.cluster.llama_cluster_plan"


def controller_model(path):
    """The model summary read from the GGUF headers of ``path`` on the controller; None when there is no such file."""
    if not path or not os.path.isfile(path):
        return None
    try:
        return planner.summarize(gguf.read_model(path))
    except (gguf.GGUFError, planner.PlanError, OSError) as exc:
        raise AnsibleActionFail(f"cannot read the model's headers on the controller ({path}): {exc}") from exc


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        module_args = dict(self._task.args)
        module_args.pop("controller_model", None)  # only this plugin sets it
        plan_only = boolean(module_args.get("plan_only", False), strict=False)
        if self._task.check_mode and not module_args.get("model") and not plan_only:
            summary = controller_model(module_args.get("controller_model_path"))
            if summary is not None:
                module_args["controller_model"] = summary
        result.update(self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars))
        return result
