# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of llama_cpp_build_check (documented in plugins/modules/llama_cpp_build_check.py): the build
host's platform facts against every node's, from ``hostvars``; the comparison is
module_utils/llama_cpp/_llama_platform.py."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_platform import compat_problems

ARGUMENT_SPEC = {
    "build_host": {"type": "str", "required": True},
    "nodes": {"type": "list", "elements": "str", "required": True},
}
FACT = "llamarpc_platform"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hostvars = task_vars.get("hostvars") or {}
        platforms = {}
        for host in [args["build_host"], *args["nodes"]]:
            try:
                platforms[host] = self._templar.template(hostvars[host]["ansible_facts"][FACT])
            except (KeyError, TypeError) as exc:
                raise AnsibleActionFail(
                    f"no {FACT} fact for {host}: run llamarpc.cluster.llama_cpp_platform_facts on it first"
                ) from exc
        build = platforms[args["build_host"]]
        nodes = {host: platforms[host] for host in args["nodes"]}
        problems = compat_problems(args["build_host"], build, nodes)
        result.update(changed=False, problems=problems, build_host=args["build_host"], platform=build)
        if problems:
            result.update(
                failed=True,
                msg="llama.cpp cannot be built on "
                f"{args['build_host']} for these nodes; nothing has been built:\n"
                + "\n".join(f"- {problem}" for problem in problems),
            )
        else:
            result["msg"] = (
                f"binaries built on {args['build_host']} ({build.get('architecture')}, {build.get('pretty_name')}, "
                f"glibc {build.get('libc_version')}) run on {len(nodes)} node(s)"
            )
        return result
