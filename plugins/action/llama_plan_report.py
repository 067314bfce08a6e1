# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of llama_plan_report (documented in plugins/modules/llama_plan_report.py): the predictions and the
text come from module_utils/plan/_plan_report.py; this plugin writes the JSON on the controller and never connects."""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _plan_report as report
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as shard_fetch

ARGUMENT_SPEC = {
    "model": {"type": "dict", "required": True},
    "shards": {"type": "list", "elements": "dict", "required": True},
    "coordinator": {"type": "str", "required": True},
    "placement": {"type": "list", "elements": "dict"},
    "disk": {"type": "dict"},
    "reports": {"type": "dict", "default": {}},
    "memory": {"type": "dict"},
    "probe": {"type": "list", "elements": "dict", "default": []},
    "workers": {"type": "list", "elements": "dict", "default": []},
    "header_reads": {"type": "list", "elements": "dict", "default": []},
    "refusals": {"type": "list", "elements": "str", "default": []},
    "links": {"type": "dict"},
    "link_mbit": {"type": "float", "default": 1000.0},
    "source_mbit": {"type": "float", "default": 100.0},
    "rtt_ms": {"type": "float", "default": 1.0},
    "memory_gbps": {"type": "float", "default": 10.0},
    "spec_acceptance": {"type": "float", "default": 0.5},
    "n_vocab": {"type": "int", "default": 0},
    "dest": {"type": "path", "required": True},
    "fail_on_refusal": {"type": "bool", "default": True},
}


def write_json(path, doc):
    """Write ``doc`` to ``path`` atomically (``_shard_fetch.write_json``: fsync, rename, no temporary file left on
    failure); True when the content changed."""
    if shard_fetch.read_json(path) == json.loads(json.dumps(doc)):
        return False
    shard_fetch.write_json(path, doc)
    return True


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        for name in ("link_mbit", "source_mbit", "memory_gbps"):
            if args[name] <= 0:
                raise AnsibleActionFail(f"{name} must be positive, got {args[name]}")
        if not 0.0 <= args["spec_acceptance"] <= 1.0:
            raise AnsibleActionFail(f"spec_acceptance is a rate from 0 to 1, got {args['spec_acceptance']}")
        given = args["links"]
        if given is None:
            hostvars = (task_vars or {}).get("hostvars", {})
            given = {
                host: hostvars[host].get("llamarpc_plan_link_mbit")
                for host in (task_vars or {}).get("groups", {}).get("all", [])
            }
        links = {}
        for host, mbit in given.items():
            try:
                links[host] = None if mbit in (None, "") else float(mbit)
            except (TypeError, ValueError):
                links[host] = -1.0
            if links[host] is not None and links[host] <= 0:
                raise AnsibleActionFail(f"links[{host}] must be a positive number of Mbit/s (or null), got {mbit!r}")
        doc = report.build(
            model=args["model"],
            shards=args["shards"],
            coordinator=args["coordinator"],
            placement=args["placement"],
            disk=args["disk"],
            reports=args["reports"],
            memory=args["memory"],
            probe=args["probe"],
            workers=args["workers"],
            header_reads=args["header_reads"],
            refusals=args["refusals"],
            links=links,
            default_mbit=args["link_mbit"],
            source_mbit=args["source_mbit"],
            default_rtt_ms=args["rtt_ms"],
            memory_bandwidth=args["memory_gbps"] * 1e9,
            spec_acceptance=args["spec_acceptance"],
            n_vocab=max(args["n_vocab"], 0),
        )
        dest = os.path.abspath(os.path.expanduser(args["dest"]))
        if not os.path.isdir(os.path.dirname(dest)):
            raise AnsibleActionFail(f"dest: the directory of {dest} does not exist")
        if self._task.check_mode:
            changed = True
        else:
            try:
                changed = write_json(dest, doc)
            except OSError as exc:
                raise AnsibleActionFail(f"cannot write the plan to {dest}: {exc}") from None
        result.update(changed=changed, plan=doc, lines=doc["text"], dest=dest)
        if args["refusals"] and args["fail_on_refusal"]:
            result.update(
                failed=True,
                msg=f"the model cannot be deployed (the plan is in {dest}); nothing was downloaded: "
                + " | ".join(args["refusals"]),
            )
        return result
