# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of gguf_shard_place: runs the module on its host, and copies the controller files (shards with
``src``) that the host turns out to need - absent, partial or corrupt there - before running it once more for
those. The hub token comes from the controller's huggingface_hub when the task gives none."""

from __future__ import annotations

import posixpath

from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_source as source
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_options import PLACE

MODULE = "llamarpc.cluster.gguf_shard_place"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False  # a temporary directory only when a shard is copied (a rerun runs the module alone)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=PLACE)
        if any(shard["hub"] for shard in args["shards"]):
            args["hf_token"] = source.hub_token(args["hf_token"])
        local = {shard["name"]: shard["src"] for shard in args["shards"] if shard["src"]}
        first = [{**shard, "src": None} for shard in args["shards"]]
        applied = self._execute_module(MODULE, module_args={**args, "shards": first}, task_vars=task_vars)
        need = [name for name in applied.pop("need_source", []) if name in local]
        if need and not applied.get("failed"):
            remote_tmp = self._make_tmp_path()  # shared with the module run below, removed by cleanup()
            copies = []
            for shard in args["shards"]:
                if shard["name"] in need:
                    remote = posixpath.join(remote_tmp, shard["name"])
                    self._transfer_file(shard["src"], remote)
                    self._fixup_perms2((remote_tmp, remote))
                    copies.append({**shard, "src": remote})
            # The first run pruned already (keep_models) and recorded the model; this one adds the copies to it.
            again_args = {**args, "shards": copies, "links": {}, "drop": [], "keep_models": []}
            merge(applied, self._execute_module(MODULE, module_args=again_args, task_vars=task_vars))
        host = self._task.delegate_to or task_vars.get("inventory_hostname")
        if applied.get("diff") and host:  # which host's repairs (a loop delegating to each host shows many)
            applied["diff"]["before_header"] = f"{host}: {applied['diff']['before_header']}"
        applied.pop("invocation", None)
        result.update(applied)
        return result


def merge(applied, again):
    """The second run's outcome (the copied shards) into the first's."""
    for key in ("fetched", "actions", "repaired"):
        applied[key] = applied.get(key, []) + again.get(key, [])
    # A corrupt shard is found by both runs (the first one only asks for its source): name it once.
    applied["refetched"] = list(dict.fromkeys(applied.get("refetched", []) + again.get("refetched", [])))
    applied["changed"] = bool(applied.get("changed") or again.get("changed"))
    if again.get("diff"):
        applied["diff"] = again["diff"]
    if again.get("failed"):
        applied.update(failed=True, msg=again.get("msg"))
    return applied
