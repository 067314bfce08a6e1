# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gguf_shard_plan (documented in plugins/modules/gguf_shard_plan.py): runs on the controller only and never
connects. Resolves the source once, reads every candidate's gguf_shard_facts report from its facts, plans
(module_utils/shards/_shard_plan_run.py) and returns what each host's gguf_shard_place is to do."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_plan_run as plan_run
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_source as source
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_options import PLAN
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_plan import PlanError


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=PLAN)
        args["coordinator"] = args["coordinator"] or task_vars["inventory_hostname"]
        candidates = args["candidates"] or list(task_vars.get("ansible_play_batch") or [args["coordinator"]])
        try:
            request = plan_run.check_request(args, candidates, set(task_vars.get("groups", {}).get("all", [])))
            shards, info = self._resolve(args)
            facts = {name: self._fact(task_vars, name) for name in request["candidates"]}
            reports = plan_run.gather(facts, request, [shard["name"] for shard in shards])
            if not args["fetch"]:
                result.update(
                    plan_run.plan_only(
                        shards,
                        reports,
                        request,
                        info,
                        timeout=args["timeout"],
                        validate_certs=args["validate_certs"],
                        link=args["link"],
                        diff=self._task.diff,
                    )
                )
                return result
            placement, planned = plan_run.place(shards, reports, request)
        except (PlanError, source.SourceError) as exc:
            raise AnsibleActionFail(str(exc)) from None
        tasks = plan_run.host_tasks(placement, reports, request, args["link"])
        result.update(plan_run.summary(placement, planned, reports, request, tasks, info, self._task.diff))
        result["changed"] = plan_run.pending(placement, reports, tasks)
        return result

    def _resolve(self, args):
        """The source's shards and ``{"headers", "revision"}`` (hub only); SourceError says what is wrong."""
        return source.resolve(args, lambda entry: self._find_needle("files", entry))

    @staticmethod
    def _fact(task_vars, name):
        """The host's gguf_shard_dir fact (set by gguf_shard_facts), as plain data, or None."""
        host = task_vars.get("hostvars", {}).get(name) or {}
        fact = (host.get("ansible_facts") or {}).get(plan_run.FACT)
        return plan_run.plain(fact) if fact else None
