# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``llama_cluster_plan``: its options, where the model is read from, what the coordinator reads
itself (``_coordinator_state``: /health, the plan in force, plan.json once, its own memory; the probes of
``rpc/_rpc_endpoints``), the plan (``_cluster_plan``) and the decisions returned with it (the deployed record,
whether it must be rewritten, whether to seed).
"""

from __future__ import annotations

import os

from ansible.module_utils.common.text.formatters import human_to_bytes

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as planner
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_state as state
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _node_memory
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _perf_model as perf
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_endpoints as rpc_endpoints

# What the planner reads of a model summary (_cluster_plan.summarize).
MODEL_KEYS = (
    "n_layer",
    "n_head_kv",
    "head_k",
    "head_v",
    "layer_bytes",
    "output_bytes",
    "embedding_bytes",
    "weight_bytes",
)

# Seconds a worker's probe may take to connect and to answer HELLO (rpc_endpoint_facts' defaults).
PROBE_TIMEOUT = 3.0


def _size(module, name):
    try:
        value = human_to_bytes(module.params[name])
    except (TypeError, ValueError):
        module.fail_json(msg=f"{name} must be a size in bytes or with K, M, G or T, not {module.params[name]!r}")
    if value < 0:
        module.fail_json(msg=f"{name} must not be negative")
    return value


def explain(result, workers, coordinator=None):
    """Why this many workers, in the performance model's terms: in the layer split every generated token crosses
    the network LAYER_ROUND_TRIPS times per worker, so fewer workers mean fewer round trips. With measured round
    trips (a worker's ``rtt_ms``, from rpc_endpoint_facts' connect time) the network time per token is given too.
    Kept out of the plan itself: round-trip times vary from run to run, the plan must not."""
    usable = [w for w in workers if w.get("state", "ready") == "ready"]
    if result.get("local"):
        return (
            f"local: the whole model fits on {coordinator or 'the coordinator'} with its headroom, so llama-server "
            f"serves it there with no RPC worker and no network crossing per token (fit first; {len(usable)} usable "
            "worker(s) stay idle)"
        )
    chosen = {row["name"] for row in result["workers"]}
    rtts = {w["name"]: float(w["rtt_ms"]) / 1000 for w in usable if w.get("rtt_ms") is not None}

    def network(names):
        if not names or any(name not in rtts for name in names):
            return None
        nodes = [{"name": name, "bytes": 0, "bandwidth": 1, "rtt": rtts[name]} for name in names]
        return perf.predict(nodes, "layer")["network_seconds"]

    trips = perf.round_trips_per_token(len(chosen), "layer")
    text = (
        f"{len(chosen)} of {len(usable)} usable worker(s) ({result['strategy']}): the layer split crosses the network "
        f"{trips} time{'' if trips == 1 else 's'} per generated token"
    )
    if len(chosen) < len(usable):
        text += f" ({perf.round_trips_per_token(len(usable), 'layer')} with all of them)"
    mine, every = network(sorted(chosen)), network([w["name"] for w in usable])
    if mine is not None:
        text += f"; at the measured round trips that is {mine * 1000:.1f} ms of network time per token"
        if every is not None and len(chosen) < len(usable):
            text += f" ({every * 1000:.1f} ms with all)"
    return text


def reserved(workers, reserve):
    """``workers`` with each host's O(reserve) (bytes other services on that host may take: Prometheus, node
    exporter) taken from its ``mem_available``, never below 0."""
    return [
        dict(worker, mem_available=max(0, int(worker["mem_available"]) - int(reserve.get(worker["name"], 0))))
        if reserve.get(worker["name"])
        else worker
        for worker in workers
    ]


def _coordinator_available(figures, reserve=0):
    """The coordinator's ``available`` bytes less its O(reserve), rounded as the workers' are (None when not given)."""
    if not figures or figures.get("available") is None:
        return None
    available = max(0, int(figures["available"]) - int(reserve))
    entry = {"mem_available": available, "mem_total": int(figures.get("total") or 0)}
    return planner.round_memory([entry])[0]["mem_available"]


ARGUMENT_SPEC = {
    "model_path": {"type": "path"},
    "model": {"type": "dict"},
    "workers": {"type": "list", "elements": "dict"},
    "worker_hosts": {"type": "list", "elements": "str"},
    "endpoints": {"type": "list", "elements": "str", "default": []},
    "memory": {"type": "dict", "default": {}},
    "seeding": {"type": "list", "elements": "dict", "default": []},
    "api_url": {"type": "str"},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "env_files": {"type": "list", "elements": "path", "default": []},
    "plan_file": {"type": "path"},
    "rpc_protocol": {"type": "str", "default": ""},
    "switching": {"type": "list", "elements": "bool", "default": []},
    "worker_protocols": {"type": "list", "elements": "str", "default": []},
    "worker_group": {"type": "str", "default": "rpc_workers"},
    "controller_model_path": {"type": "path"},
    "controller_model": {"type": "dict"},
    "plan_only": {"type": "bool", "default": False},
    "coordinator": {"type": "str"},
    "ctx_size": {"type": "int", "default": 4096},
    "parallel": {"type": "int", "default": 1},
    "cache_type_k": {"type": "str", "default": "f16", "choices": sorted(planner.CACHE_TYPE_BYTES)},
    "cache_type_v": {"type": "str", "default": "f16", "choices": sorted(planner.CACHE_TYPE_BYTES)},
    "headroom": {"type": "str", "default": "512M"},
    "worker_overhead": {"type": "str", "default": "128M"},
    "cache_ram": {"type": "int", "default": 0},
    "reserve": {"type": "dict", "default": {}},
    "strategy": {"type": "str", "default": "fewest", "choices": list(planner.STRATEGIES)},
    "fit_first": {"type": "bool", "default": True},
    "coordinator_memory": {"type": "dict"},
    "speculative": {
        "type": "dict",
        "options": {
            "types": {"type": "list", "elements": "str", "default": []},
            "draft_path": {"type": "path"},
            "draft_model": {"type": "dict"},
            "draft_device": {"type": "str", "default": planner.DRAFT_ON_CPU},
            "draft_max": {"type": "int"},
            "draft_min": {"type": "int"},
            "settings": {"type": "dict", "default": {}},
        },
    },
    "deployment": {
        "type": "dict",
        "options": {
            "service": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "model_path": {"type": "str", "required": True},
            "replan_after": {"type": "int", "required": True},
        },
    },
}


def _probe(endpoints):
    """rpc_endpoint_facts' answer for each endpoint (HELLO and the devices, probed at once, closed abortively)."""
    targets = [rpc_endpoints.normalize_endpoint(endpoint, 50052) for endpoint in endpoints]
    return rpc_endpoints.probe_endpoints(targets, PROBE_TIMEOUT, PROBE_TIMEOUT)


def _observe(module):
    """With O(worker_hosts): the coordinator's own view - /health, the plan in force, the probes of the workers
    llama-server is not connected to - and the candidates built from it. Fails on a worker of another protocol
    major. Returns (candidates, what is returned with them)."""
    params = module.params
    hosts, endpoints = params["worker_hosts"], params["endpoints"]
    if len(endpoints) != len(hosts):
        module.fail_json(msg="endpoints must be given in step with worker_hosts (one each)")
    if params["seeding"] and len(params["seeding"]) != len(hosts):
        module.fail_json(msg="seeding must be given in step with worker_hosts (one each, {} where there is none)")
    for name in ("switching", "worker_protocols"):
        if params[name] and len(params[name]) != len(hosts):
            module.fail_json(msg=f"{name} must be given in step with worker_hosts (one each)")
    health = state.health_status(params["api_url"], params["api_key"]) if params["api_url"] else 0
    serving = state.serving_now(state.env_in_force(params["env_files"]), health)
    # A worker that switches llama.cpp is checked by the build it switches to, and counts as ready: it runs, and the
    # cutover restarts it before llama-server starts.
    switching = state.switching_workers(endpoints, params["switching"], params["worker_protocols"])
    ready = list(serving) + [entry["endpoint"] for entry in switching if entry["endpoint"] not in serving]
    try:
        probe = _probe([endpoint for endpoint in endpoints if endpoint not in ready])
    except ValueError as exc:
        module.fail_json(msg=f"invalid endpoint: {exc}")
    refusal = state.protocol_refusal(
        state.foreign_workers(probe + switching, params["rpc_protocol"]),
        params["rpc_protocol"],
        params["coordinator"] or "the coordinator",
        params["worker_group"],
    )
    gathered = {"serving": serving, "probe": probe, "health_status": health}
    if refusal:
        module.fail_json(msg=refusal, **gathered)
    found = state.candidates(
        hosts,
        endpoints,
        params["memory"],
        probe,
        serving_endpoints=ready,
        plan_only=params["plan_only"],
        check_mode=module.check_mode,
    )
    gathered["candidates"] = found
    return found, gathered


def _coordinator_memory(params):
    """The coordinator host's figures for fit first and for a draft model (speculative decoding): given, else read
    here (the module runs on the coordinator) when no worker shares its host; None when not needed or not readable."""
    if params["coordinator_memory"] is not None:
        return params["coordinator_memory"]
    drafting = planner.DRAFT_TYPE in ((params["speculative"] or {}).get("types") or [])
    needed = params["fit_first"] or drafting
    if params["worker_hosts"] is None or not needed or params["coordinator"] in params["worker_hosts"]:
        return None
    try:
        return _node_memory.memory_facts()
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _speculative(params, check_mode, model=None):
    """The planner's speculation request (``_cluster_plan.check_speculative``'s input), or None when it is off; the
    draft model read from its GGUF header here (O(speculative.draft_path)) or given (O(speculative.draft_model)).
    A draft read here whose vocabulary cannot draft for the model's (``model``: as ``_gguf_header.read_model`` read it
    here too, else None) is refused, as llama.cpp would refuse it at load time.
    Returns (request, why there is no plan yet: check mode before the draft is on this host). Raises GGUFError and
    PlanError (a draft that a real run does not find is one)."""
    options = params["speculative"] or {}
    if not options.get("types"):
        return None, None
    settings = dict(options.get("settings") or {})
    if planner.DRAFT_TYPE in options["types"]:
        for option, name in (("draft_max", "draft-n-max"), ("draft_min", "draft-n-min")):
            if options.get(option) is not None:
                settings.setdefault(name, options[option])
    path, draft = options.get("draft_path") or "", options.get("draft_model")
    if path and not draft:
        if os.path.exists(path):
            read = gguf.read_model(path)
            problem = gguf.vocabulary_problem(gguf.vocabulary(model), gguf.vocabulary(read)) if model else ""
            if problem:
                raise planner.PlanError(f"the draft model {path} cannot draft for the model: {problem}")
            draft = planner.summarize(read)
        elif check_mode:
            return None, f"the draft model {path} is not on this host yet: check mode plans nothing before it is placed"
        else:
            raise planner.PlanError(f"the draft model {path} does not exist on this host")
    request = {
        "types": list(options["types"]),
        "settings": settings,
        "draft": draft,
        "draft_path": path,
        "draft_device": options.get("draft_device") or planner.DRAFT_ON_CPU,
    }
    return planner.check_speculative(request), None


def _record(params, deployed, summary, workers, result, headroom, overhead, speculative=None):
    """The deployed plan record and whether it must be rewritten ({} without O(deployment))."""
    if params["deployment"] is None:
        return {}
    options = {
        "ctx_size": params["ctx_size"],
        "parallel": params["parallel"],
        "cache_type_k": params["cache_type_k"],
        "cache_type_v": params["cache_type_v"],
        "headroom": headroom,
        "overhead": overhead,
        "strategy": params["strategy"],
        "coordinator": params["coordinator"],
        "fit_first": params["fit_first"],
        "cache_ram": params["cache_ram"] << 20,  # bytes, as headroom and overhead: the supervisor plans with these
    }
    if speculative:  # only when on: a deployment without speculation keeps the record it had
        options["speculative"] = speculative
    doc = state.record(params["deployment"], summary, workers, options, result)
    return {"record": doc, "deploy_needed": state.deploy_needed(deployed, doc)}


def _seed_needed(params, source, result, gathered, decided):
    """RV(seed_needed) with O(worker_hosts) ({} without)."""
    if params["worker_hosts"] is None:
        return {}
    seeding = dict(zip(params["worker_hosts"], params["seeding"] or [{}] * len(params["worker_hosts"]), strict=True))
    targets = state.seed_targets(result["rpc"], params["endpoints"], params["worker_hosts"], seeding)
    needed = state.seed_needed(
        targets,
        plan_only=params["plan_only"],
        source=source,
        deploy_needed=decided.get("deploy_needed", False),
        health=gathered["health_status"],
    )
    return {"seed_needed": needed}


def _not_here(params, host):
    return (
        f"{params['model_path']} is not on {host} yet, and its headers are not on the controller (llama_model_files): "
        "check mode shows the shard placement only. The playbook llamarpc.cluster.plan reads the headers from the "
        "source without downloading and shows the memory plan."
    )


#: The module's option rules beside ARGUMENT_SPEC.
MUTUALLY_EXCLUSIVE = [("model_path", "model"), ("workers", "worker_hosts")]
REQUIRED_ONE_OF = [("model_path", "model"), ("workers", "worker_hosts")]


def run_module(module):
    """The module's result: the state read, the plan and the decisions; fails through ``module`` with what is wrong."""
    params = module.params
    host = params["coordinator"] or "this host"
    try:
        source = state.plan_source(
            bool(params["model"]),
            bool(params["model_path"]) and os.path.exists(params["model_path"]),
            params["controller_model"],
            module.check_mode,
            params["plan_only"],
        )
    except FileNotFoundError:
        module.fail_json(msg=f"{params['model_path']} does not exist on {host}.")
    if source is None:
        return {"changed": False, "planned_from": None, "msg": _not_here(params, host)}

    found, gathered = (params["workers"], {}) if params["worker_hosts"] is None else _observe(module)
    if params["plan_only"]:
        gathered["refusal"] = ""
    for worker in found:
        missing = [key for key in ("name", "endpoint", "mem_available") if worker.get(key) in (None, "")]
        if missing:
            module.fail_json(msg=f"worker {worker.get('name', worker)!r} lacks {', '.join(missing)}", **gathered)
    try:
        reserve = {str(host): int(size) for host, size in params["reserve"].items()}
    except (TypeError, ValueError):
        module.fail_json(msg=f"reserve maps host names to bytes (integers), got {params['reserve']!r}", **gathered)
    workers = planner.round_memory(reserved(found, reserve))
    headroom, overhead = _size(module, "headroom"), _size(module, "worker_overhead")
    if params["cache_ram"] < 0:
        module.fail_json(
            msg=f"cache_ram must be 0 or more MiB, got {params['cache_ram']}: an unbounded prompt cache (-1) cannot "
            "be planned for on the coordinator's host",
            **gathered,
        )
    # The deployed plan, read once: the split to keep, and the record this run compares with.
    deployed = state.read_record(state.read_text(params["plan_file"]) if params["plan_file"] else None)
    try:
        read = None
        if source == state.FROM_COORDINATOR:
            read = gguf.read_model(params["model_path"])
            summary = planner.summarize(read)
        else:
            summary = params["model"] if source == state.FROM_GIVEN else params["controller_model"]
        missing = sorted(set(MODEL_KEYS) - set(summary))
        if missing:
            module.fail_json(
                msg=f"model lacks {', '.join(missing)}: pass the model that gguf_shard_plan returns with fetch=false",
                **gathered,
            )
        speculative, not_yet = _speculative(params, module.check_mode, read)
        if not_yet:
            return {"changed": False, "planned_from": None, "msg": not_yet, **gathered}
        result = planner.plan(
            summary,
            workers,
            ctx_size=params["ctx_size"],
            parallel=params["parallel"],
            cache_type_k=params["cache_type_k"],
            cache_type_v=params["cache_type_v"],
            headroom=headroom,
            overhead=overhead,
            strategy=params["strategy"],
            coordinator=params["coordinator"],
            keep=state.kept_plan(deployed),
            fit_first=params["fit_first"],
            coordinator_available=_coordinator_available(
                _coordinator_memory(params), reserve.get(params["coordinator"] or "", 0)
            ),
            cache_ram=params["cache_ram"] << 20,
            speculative=speculative,
        )
    except (gguf.GGUFError, planner.PlanError, OSError) as exc:
        if params["plan_only"]:
            gathered["refusal"] = str(exc)
            return {"changed": False, "planned_from": source, "msg": str(exc), **gathered}
        module.fail_json(msg=str(exc), planned_from=source, **gathered)
    decided = _record(params, deployed, summary, workers, result, headroom, overhead, speculative)
    return {
        "changed": False,
        "plan": result,
        "model": summary,
        "workers": workers,
        "planned_from": source,
        "explanation": explain(result, workers, params["coordinator"]),
        **gathered,
        **decided,
        **_seed_needed(params, source, result, gathered, decided),
    }
