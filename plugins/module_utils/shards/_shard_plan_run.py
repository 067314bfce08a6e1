# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller's half of shard placement (gguf_shard_plan): the task's options checked, the candidate hosts'
gguf_shard_facts reports read for this model's shards, the plan made (``_shard_plan``), and what each host's
gguf_shard_place is to do; with ``fetch=false``, the model read from the shards' GGUF headers instead.

No I/O but the header reads of ``plan_only``; every error is a ``_shard_plan.PlanError`` with a message for the user.
"""

from __future__ import annotations

import json
import os

from ansible.module_utils.common.text.formatters import human_to_bytes

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf_header
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as cluster_plan
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as shard_fetch
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_plan import PlanError
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_plan import plan as plan_shards

FACT = "gguf_shard_dir"
REPORT_KEYS = ("free", "partial_bytes", "complete", "exists")


def plain(data):
    """``data`` (a fact read through hostvars) as plain JSON types."""
    return json.loads(json.dumps(data))


def check_request(args, candidates, known):
    """The task's options checked against the inventory (``known``): ``{"coordinator", "candidates" (coordinator
    first), "mounts", "reserve" (bytes), "caches", "model_dir"}``."""
    if not os.path.isabs(args["model_dir"]):
        raise PlanError(f"model_dir must be an absolute path, got {args['model_dir']!r}")
    sources = [key for key in ("hf_repo", "urls", "files") if args.get(key)]
    if len(sources) != 1:
        raise PlanError(f"give exactly one source of hf_repo, urls and files (got {sources or 'none'})")
    if args.get("hf_repo") and not args.get("hf_pattern"):
        raise PlanError("hf_pattern is required with hf_repo (for example '*q4_k_m*.gguf')")
    candidates = list(dict.fromkeys(candidates))
    unknown = [name for name in candidates if name not in known]
    if unknown:
        raise PlanError(f"candidates not in the inventory: {', '.join(unknown)}")
    coordinator = args["coordinator"]
    if coordinator not in known:
        raise PlanError(f"unknown coordinator {coordinator!r}: it is not in the inventory")
    hosts = [coordinator, *(name for name in candidates if name != coordinator)]
    for name, path in (args.get("mount_paths") or {}).items():
        if name not in hosts:
            raise PlanError(f"mount_paths names unknown host {name!r} (hosts: {', '.join(hosts)})")
        if not isinstance(path, str) or not os.path.isabs(path):
            raise PlanError(f"mount_paths[{name}] must be an absolute path, got {path!r}")
    if not os.path.isabs(args["mount_root"]):
        raise PlanError(f"mount_root must be an absolute path, got {args['mount_root']!r}")
    try:
        reserve = human_to_bytes(args["reserve"]) if str(args["reserve"]).strip() else 0
    except ValueError as exc:
        raise PlanError(f"reserve: {exc}") from None
    return {
        "coordinator": coordinator,
        "candidates": hosts,
        "mounts": {
            name: (args.get("mount_paths") or {}).get(name) or os.path.join(args["mount_root"], name) for name in hosts
        },
        "reserve": reserve,
        "caches": tensor_caches(args.get("tensor_caches") or {}, hosts, known),
        "model_dir": args["model_dir"],
    }


def tensor_caches(given, hosts, known=None):
    """``{host: {"path", "cap" (bytes)}}`` of the O(tensor_caches) entries for ``hosts`` (others, and empty entries,
    are ignored).

    Raises PlanError for a host not in the inventory (``known``, when given) or a bad path or size.
    """
    if not isinstance(given, dict):
        raise PlanError(f"tensor_caches must be a dict of host: {{path, max_size}}, got {given!r}")
    caches = {}
    for name, entry in given.items():
        if entry == {}:
            continue  # a host whose worker keeps no cache
        if known is not None and name not in known:
            raise PlanError(f"tensor_caches names {name!r}, which is not in the inventory")
        if not isinstance(entry, dict) or set(entry) != {"path", "max_size"}:
            raise PlanError(f"tensor_caches[{name}] must be a dict with path and max_size, got {entry!r}")
        path = entry["path"]
        if not isinstance(path, str) or not os.path.isabs(path):
            raise PlanError(f"tensor_caches[{name}].path must be an absolute path, got {path!r}")
        try:
            cap = human_to_bytes(str(entry["max_size"]).strip())
        except ValueError as exc:
            raise PlanError(f"tensor_caches[{name}].max_size: {exc}") from None
        if cap < 0:
            raise PlanError(f"tensor_caches[{name}].max_size must not be negative, got {entry['max_size']!r}")
        if name in hosts:
            caches[name] = {"path": os.path.normpath(path), "cap": cap}
    return caches


def host_view(report, names):
    """A host's gguf_shard_facts report narrowed to this model's shard ``names``: ``{"free", "partial_bytes",
    "complete", "files", "exists"}`` (and ``tensor_cache`` as reported)."""
    files = {name: dict(report.get("files", {}).get(name) or {"state": "absent"}) for name in names}
    view = {
        "free": int(report["free"]),
        "partial_bytes": sum(int(entry.get("partial", 0)) for entry in files.values()),
        "complete": {name: int(entry["size"]) for name, entry in files.items() if entry["state"] == "file"},
        "files": files,
        "exists": bool(report.get("exists")),
    }
    if report.get("tensor_cache"):
        view["tensor_cache"] = dict(report["tensor_cache"])
    return view


def gather(facts, request, names):
    """``{host: host_view}`` for every candidate from ``facts`` (``{host: its gguf_shard_dir fact or None}``)."""
    missing = [name for name in request["candidates"] if not facts.get(name)]
    if missing:
        raise PlanError(
            f"no {FACT} fact from {', '.join(missing)}: run llamarpc.cluster.gguf_shard_facts on every candidate "
            "host first (delegate_facts with delegate_to)"
        )
    reports = {name: host_view(facts[name], names) for name in request["candidates"]}
    for name, cache in request["caches"].items():
        seen = reports[name].get("tensor_cache")
        if not seen or os.path.normpath(seen["path"]) != cache["path"]:
            raise PlanError(
                f"tensor_caches[{name}] is {cache['path']}, but {name}'s {FACT} fact reports "
                f"{seen['path'] if seen else 'no tensor cache'}: give gguf_shard_facts tensor_cache={cache['path']}"
            )
    return reports


def place(shards, reports, request):
    """``(placement, planned)``: every shard with its host, and ``_shard_plan.plan``'s whole answer."""
    hosts_input = {}
    for name, rep in reports.items():
        hosts_input[name] = {key: rep[key] for key in ("free", "partial_bytes", "complete")}
        cache = rep.get("tensor_cache")
        if cache and cache["same_filesystem"] and name in request["caches"]:
            hosts_input[name]["tensor_cache"] = {
                "path": cache["path"],
                "cap": request["caches"][name]["cap"],
                "cached": cache["cached"],
            }
    try:
        planned = plan_shards(shards, hosts_input, request["coordinator"], request["reserve"], request["model_dir"])
    except PlanError as exc:
        raise PlanError(f"nothing was downloaded: {exc}") from None
    return planned["placement"], planned


def coordinator_links(placement, request, link=True):
    """On the coordinator, ``{shard name: path through the mount of the host holding it}``."""
    if not link:
        return {}
    coordinator = request["coordinator"]
    return {
        shard["name"]: os.path.join(request["mounts"][shard["host"]], shard["name"])
        for shard in placement
        if shard["host"] != coordinator
    }


def host_tasks(placement, reports, request, link=True):
    """What gguf_shard_place is to do on each candidate host: ``{host: {"shards", "links", "drop"}}``."""
    tasks = {}
    for host in request["candidates"]:
        shards = []
        for shard in placement:
            if shard["host"] == host:
                entry = {key: shard[key] for key in ("name", "size", "sha256", "etag", "url", "hub") if key in shard}
                if "src_controller" in shard:
                    entry["src"] = shard["src_controller"]
                shards.append(entry)
        files = reports[host]["files"]
        tasks[host] = {
            "shards": shards,
            "links": coordinator_links(placement, request, link) if host == request["coordinator"] else {},
            "drop": [s["name"] for s in placement if s["host"] != host and "partial" in files.get(s["name"], {})],
        }
    return tasks


def pending(placement, reports, tasks):
    """Whether the hosts do not hold the plan yet: a shard not complete at its size on its host, a link of the
    coordinator's missing or elsewhere, a partial download to drop."""
    for shard in placement:
        if reports[shard["host"]]["complete"].get(shard["name"]) != int(shard["size"]):
            return True
    for host, task in tasks.items():
        files = reports[host]["files"]
        if task["drop"]:
            return True
        for name, target in task["links"].items():
            if files[name].get("state") != "link" or files[name].get("target") != target:
                return True
    return False


def summary(placement, planned, reports, request, tasks, info, diff=False):
    """The plan's result: ``plan``, ``hosts``, ``place``, the coordinator's ``assigned`` and ``links``, ``redundant``
    per host, ``model_path``, ``revision`` (hub), and with ``diff`` the placement before and after."""
    coordinator, model_dir = request["coordinator"], request["model_dir"]
    out = {
        "plan": [
            {
                **{key: shard[key] for key in ("name", "size", "sha256", "host", "url") if key in shard},
                "path": os.path.join(model_dir, shard["name"]),
            }
            for shard in placement
        ],
        "hosts": planned["hosts"],
        "place": tasks,
        "assigned": [shard["name"] for shard in tasks[coordinator]["shards"]],
        "links": tasks[coordinator]["links"],
        "redundant": {},
        "model_path": os.path.join(model_dir, placement[0]["name"]),
    }
    for host, report in reports.items():
        extra = sorted(s["name"] for s in placement if s["host"] != host and s["name"] in report["complete"])
        if extra:
            out["redundant"][host] = extra
    if "revision" in info:
        out["revision"] = info["revision"]
    if diff:
        out["diff"] = {
            "before_header": "shard placement (now)",
            "after_header": "shard placement (plan)",
            "before": describe_now(placement, reports, coordinator),
            "after": "".join(f"{shard['name']}: {shard['host']}\n" for shard in placement),
        }
    return out


def describe_now(shards, reports, coordinator):
    """Where each shard is now: the hosts holding it complete, and the coordinator's link."""
    lines = []
    for shard in shards:
        where = [name for name in sorted(reports) if reports[name]["complete"].get(shard["name"]) is not None]
        state = reports.get(coordinator, {}).get("files", {}).get(shard["name"], {})
        if state.get("state") == "link":
            where.append(f"link on {coordinator} -> {state['target']}")
        lines.append(f"{shard['name']}: {', '.join(where) if where else 'absent'}\n")
    return "".join(lines)


def plan_only(shards, reports, request, info, *, timeout=60, validate_certs=True, link=True, diff=False):
    """fetch=false: the plan (or the refusal a fetching run would fail with) and the model read from the shards'
    GGUF headers; nothing changes on any host."""
    try:
        model, reads = shard_fetch.read_headers(
            shards, headers=info.get("headers", {}), timeout=timeout, validate_certs=validate_certs
        )
        model_summary = cluster_plan.summarize(model)
    except (shard_fetch.FetchError, gguf_header.GGUFError, cluster_plan.PlanError, OSError) as exc:
        raise PlanError(f"cannot read the model's GGUF headers: {exc}") from None
    vocabulary = gguf_header.vocabulary(model) or {}
    out = {"changed": False, "model": model_summary, "header_reads": reads, "refusal": None, "reports": {}}
    out["vocabulary"] = {key: vocabulary.get(key) for key in ("count", "sha256", "model")}
    out.update({key: [] for key in ("fetched", "verified", "refetched", "actions")})  # nothing done on any host
    for name, report in reports.items():
        out["reports"][name] = {key: report[key] for key in REPORT_KEYS}
        if report.get("tensor_cache"):
            out["reports"][name]["tensor_cache"] = report["tensor_cache"]
    out["shards"] = [{key: shard.get(key) for key in ("name", "size", "sha256", "url")} for shard in shards]
    try:
        placement, planned = place(shards, reports, request)
    except PlanError as exc:
        # Nothing to place on any host: a loop over place is empty, never undefined (ansible-core 2.21 templates a
        # looped task's delegate_to before its when).
        out["refusal"] = str(exc)
        out["place"] = {}
        return out
    tasks = host_tasks(placement, reports, request, link)
    out.update(summary(placement, planned, reports, request, tasks, info, diff))
    return out
