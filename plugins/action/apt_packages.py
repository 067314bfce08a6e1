# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of apt_packages (documented in plugins/modules/apt_packages.py): a real run is ansible.builtin.apt
with the same options; check mode runs the module of this name, which reads dpkg and simulates with apt-get, so that
it works on a host without python3-apt."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.packages import _apt
from ansible_collections.llamarpc.cluster.plugins.modules.apt_packages import ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if self._task.check_mode:
            module, module_args = "llamarpc.cluster.apt_packages", args
        else:
            module = "ansible.builtin.apt"
            module_args = _apt.apt_module_args(
                args["name"], args["update_cache"], args["cache_valid_time"], args["install_recommends"]
            )
        result.update(self._execute_module(module_name=module, module_args=module_args, task_vars=task_vars))
        return result
