# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of llama_cpp_install (documented in plugins/modules/llama_cpp_install.py; the node side is
module_utils/llama_cpp/_llama_install.py).

The module runs once on the node and reads everything there. Only when it reports a difference, and not in check mode:
the missing packages go through ansible.builtin.apt with apt_packages' arguments (packages/_apt.py), then, when the
build's marker is missing, the archive is copied into a temporary directory on the node (created only then: a node
that has the build costs one module run) and the module runs again to unpack it.
"""

from __future__ import annotations

import posixpath

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_install import ARGUMENT_SPEC
from ansible_collections.llamarpc.cluster.plugins.module_utils.packages import _apt

MODULE = "llamarpc.cluster.llama_cpp_install"


def diffs(*results):
    """The diffs of the runs, as one list (a callback shows each)."""
    found = []
    for outcome in results:
        diff = outcome.get("diff")
        found.extend(diff if isinstance(diff, list) else [diff] if diff else [])
    return found


class ActionModule(ActionBase):
    TRANSFERS_FILES = False  # the archive is copied only when the node lacks the build (no temporary directory else)
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        first = self._execute_module(MODULE, module_args=args, task_vars=task_vars)
        first.pop("invocation", None)
        if first.get("failed") or self._task.check_mode:
            result.update(first)
            return result
        outcome, notes, apt = first, [], {}
        if first.get("packages_missing"):
            apt_args = _apt.apt_module_args(
                first["packages_missing"], args["update_cache"], args["cache_valid_time"], args["install_recommends"]
            )
            apt = self._execute_module("ansible.builtin.apt", module_args=apt_args, task_vars=task_vars)
            if apt.get("failed"):
                apt.pop("invocation", None)
                result.update(first, failed=True, msg=f"installing {' '.join(apt_args['name'])}: {apt.get('msg')}")
                return result
            notes.append(f"installed {' '.join(apt_args['name'])}")
        if first.get("need_archive"):
            outcome = self._unpack(args, task_vars)
            outcome.pop("invocation", None)
            if outcome.get("failed"):
                result.update(outcome)
                return result
        notes.append(outcome["msg"])
        result.update(outcome)
        result.update(changed=bool(outcome.get("changed") or apt.get("changed")), msg="; ".join(notes))
        found = diffs(apt, outcome)
        if found:
            result["diff"] = found
        return result

    def _unpack(self, args, task_vars):
        """The module again, with the archive copied to the node."""
        if not args["archive"]:
            return {"failed": True, "msg": f"build {args['key']} is not on the node and no archive was given"}
        try:
            archive = self._find_needle("files", args["archive"])
        except AnsibleError as exc:
            return {"failed": True, "msg": f"the archive {args['archive']} is not on the controller: {exc}"}
        remote_tmp = self._make_tmp_path()  # removed by cleanup() after the task
        remote = posixpath.join(remote_tmp, "archive")
        self._transfer_file(archive, remote)
        self._fixup_perms2((remote_tmp, remote))
        return self._execute_module(MODULE, module_args={**args, "src": remote}, task_vars=task_vars)
