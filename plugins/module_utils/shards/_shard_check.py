# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``gguf_shard_check``: every shard of a plan read through the coordinator's model directory (links
followed into the SSHFS mounts) at the size the plan gives it."""

from __future__ import annotations

import os

ARGUMENT_SPEC = {
    "model_dir": {"type": "path", "required": True},
    # Items of the plan as gguf_shard_plan returns them: more keys than these (checked in shard_items).
    "shards": {"type": "list", "elements": "dict", "required": True},
    "mount_root": {"type": "path"},
    "coordinator": {"type": "str"},
}


def shard_items(shards):
    """``[{"name", "size", "host"}]`` of the plan's items; ValueError naming an item without a name or a size."""
    items = []
    for shard in shards:
        name, size = shard.get("name"), shard.get("size")
        if not isinstance(name, str) or not name or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"each shard needs a file name and a size in bytes, got {shard!r}")
        items.append({"name": name, "size": size, "host": shard.get("host")})
    return items


def shard_state(model_dir, shard):
    """``{"name", "host", "state", "size"}`` of one shard: ``ok``, ``missing`` (absent, a dangling link, an unreadable
    mount) or ``size`` (another size than the plan's); ``size`` is what the file has, None when missing."""
    try:
        size = os.stat(os.path.join(model_dir, shard["name"])).st_size
    except OSError:
        return {"name": shard["name"], "host": shard.get("host"), "state": "missing", "size": None}
    state = "ok" if size == shard["size"] else "size"
    return {"name": shard["name"], "host": shard.get("host"), "state": state, "size": size}


def problem(params, shard, found):
    """The message for a shard that is not there at its size (the role's words before this module)."""
    where = f"{params['model_dir']}/{shard['name']}"
    if params.get("coordinator"):
        where += f" on {params['coordinator']}"
    if shard.get("host"):
        where += f" (placed on {shard['host']})"
    what = (
        "missing or unreadable"
        if found["state"] == "missing"
        else f"of size {found['size']} instead of {shard['size']}"
    )
    hint = (
        f": check the mount {params['mount_root']}/{shard['host']}."
        if params.get("mount_root") and shard.get("host")
        else "."
    )
    return f"{where} is {what}{hint}"


def run_module(module):
    """The module's result; fails through ``module`` naming every shard that is not there at its size."""
    params = module.params
    try:
        shards = shard_items(params["shards"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    found = [shard_state(params["model_dir"], shard) for shard in shards]
    problems = [
        problem(params, shard, state) for shard, state in zip(shards, found, strict=True) if state["state"] != "ok"
    ]
    result = {"changed": False, "shards": found}
    if problems:
        module.fail_json(msg="\n".join(problems), **result)
    result["msg"] = f"{len(found)} shard(s) read through {params['model_dir']} at their sizes"
    return result
