#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_cluster_plan
short_description: Plan which llama.cpp RPC workers hold a model's layers, and in what proportions
version_added: 0.1.0
description:
  - Reads the model's GGUF headers (every shard of a split model, found from shard 1's name as llama.cpp does) - the
    weight bytes per layer, the layer count, the KV heads and the head sizes.
  - Computes the KV cache from the per-slot context size, the parallel slots and the cache types, and chooses the
    fewest reachable workers whose memory holds the layers (O(strategy=fewest)) or every reachable worker
    (O(strategy=all)), with C(--tensor-split) proportions to their memory; layers are assigned exactly as llama.cpp
    assigns them with C(-ngl all).
  - A worker's memory is the host's C(MemAvailable) (or its cgroup's remaining memory if smaller) minus O(headroom)
    and O(worker_overhead), never the RPC figure (CPU workers report free == total); the worker on the coordinator's
    host also leaves room for llama-server.
  - Fit first (O(fit_first), strategy V(fewest)) - when the whole model (weights, KV cache, one compute buffer) fits on
    the coordinator's host with O(headroom), the plan is local - no worker, RV(plan.rpc) empty, llama-server computes
    on its own CPU with no RPC hop; workers only when it must, the fewest that fit.
  - Fails with what is missing when the model cannot fit. Changes nothing, in check mode too.
  - A real run fails when O(model_path) does not exist; check mode before the first real run plans from
    O(controller_model_path) when given, else returns no RV(plan) and says why in RV(msg).
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
options:
  model_path:
    description:
      - Shard 1 of the model (or its only file) on the host the module runs on.
      - Exactly one of O(model_path) and O(model) is required.
    type: path
  model:
    description:
      - The model as already read from its GGUF headers, instead of O(model_path) - the C(model) that
        M(llamarpc.cluster.gguf_shard_plan) returns with C(fetch=false) (C(playbooks/plan.yml) plans with it before
        any shard is downloaded), or the RV(model) of an earlier run.
    type: dict
  workers:
    description:
      - The candidate workers, in a stable order (the inventory's). Each has C(name), C(endpoint)
        (C(host:port) that llama-server dials), C(mem_available) (bytes), optionally C(mem_total) (bytes),
        C(state) (only C(ready) workers are used, as reported by M(llamarpc.cluster.rpc_endpoint_facts)) and
        C(rtt_ms) (a measured round trip, used only in RV(explanation)).
      - With C(mem_total), C(mem_available) is rounded down to 1/16 of it first, so that a rerun does not re-plan
        on memory noise.
      - Exactly one of O(workers) and O(worker_hosts) is required.
    type: list
    elements: dict
  worker_hosts:
    description:
      - The worker hosts' inventory names, in a stable order (the inventory's), instead of O(workers). The module then
        runs on the coordinator and reads the state it plans on itself - llama-server's C(/health) at O(api_url), the
        plan in force (O(env_files)), the deployed plan (O(plan_file), read once), the coordinator host's memory (for
        O(fit_first), when no worker shares its host) - and probes the workers llama-server is not connected to
        (HELLO, as M(llamarpc.cluster.rpc_endpoint_facts) does); the candidates are RV(candidates).
      - A worker is V(unreachable over SSH) without memory figures; V(ready) when it serves llama-server now
        (RV(serving)), in the plan-only run (O(plan_only)), or in check mode when nothing answers for it yet; else what
        its probe says.
      - Fails before planning, and before any change, when a probed worker speaks another RPC protocol major than
        O(rpc_protocol) (llama-server would refuse it and abort at start).
    type: list
    elements: str
  endpoints:
    description: The endpoints (C(address:port)) of O(worker_hosts), in step with them.
    type: list
    elements: str
    default: []
  memory:
    description:
      - Each worker host's memory figures (the C(llamarpc_memory) fact of M(llamarpc.cluster.node_memory_facts) run on
        it - C(available), C(total)) by inventory name. A host with none (empty or null) was unreachable.
    type: dict
    default: {}
  seeding:
    description:
      - In step with O(worker_hosts), what each worker's role published for seeding its tensor cache
        (C(llama_rpc_worker_seeding) - C(cache_dir), C(keep_file)); empty where the cache is off. Only for
        RV(seed_needed).
    type: list
    elements: dict
    default: []
  api_url:
    description: llama-server's API base URL; its C(/health) says whether it serves now (with O(worker_hosts)).
    type: str
  api_key:
    description: The API key llama-server was given, sent as a bearer token with the C(/health) request.
    type: str
    default: ''
  env_files:
    description:
      - The env files that may hold the plan in force, first readable wins (the supervisor's override, then the
        deployed C(cluster.env)). With C(/health) answering 200, the endpoints of its C(LLAMARPC_RPC) are RV(serving)
        and are not probed (a worker serves one client at a time).
    type: list
    elements: path
    default: []
  plan_file:
    description:
      - The deployed plan record (JSON, as the llama_coordinator role writes it), read once. RV(record) is compared with
        it (RV(deploy_needed)), and its split is kept, with today's memory figures, when it uses as many workers as a
        new plan would, all usable, each still fitting, and the model's layer count is unchanged (memory that moves
        between runs then never re-plans). A missing or unreadable file plans anew.
    type: path
  rpc_protocol:
    description: The RPC protocol version of the coordinator's llama.cpp (C(7.0.0)); empty skips the protocol check.
    type: str
    default: ''
  worker_group:
    description: The inventory group of the workers, named in the protocol refusal.
    type: str
    default: rpc_workers
  controller_model_path:
    description:
      - Shard 1 of the same model on the controller. In check mode, when O(model_path) is not on the coordinator yet
        (before the first real run), the plan comes from the headers of this copy (RV(planned_from) V(controller));
        the action plugin reads them on the controller. Not in the plan-only run (O(plan_only)).
    type: path
  controller_model:
    description: The model read from O(controller_model_path)'s headers by the action plugin (not set by hand).
    type: dict
  plan_only:
    description:
      - The plan-only run (C(playbooks/plan.yml)) - every worker with memory figures counts as ready, and a model that
        cannot fit is returned as RV(refusal) instead of failing.
    type: bool
    default: false
  deployment:
    description:
      - What the deployed plan record holds beside the plan (the llama_coordinator role's C(plan.json)). With it the
        module returns RV(record) and RV(deploy_needed).
    type: dict
    suboptions:
      service:
        description: The llama-server unit's name.
        type: str
        required: true
      url:
        description: The API's base URL.
        type: str
        required: true
      model_path:
        description: Shard 1 of the model on the coordinator.
        type: str
        required: true
      replan_after:
        description: Seconds a worker may stay down before the supervisor re-plans.
        type: int
        required: true
  coordinator:
    description: Inventory name of the coordinator; a worker of that name shares the host with llama-server.
    type: str
  ctx_size:
    description: Context per parallel slot, in tokens. llama-server is started with C(-c ctx_size*parallel).
    type: int
    default: 4096
  parallel:
    description: Parallel slots (llama-server C(-np)).
    type: int
    default: 1
  cache_type_k:
    description: KV cache type of keys.
    type: str
    default: f16
    choices: [f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1]
  cache_type_v:
    description: KV cache type of values.
    type: str
    default: f16
    choices: [f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1]
  headroom:
    description: Memory left free on every worker (bytes, or with K, M, G, T).
    type: str
    default: 512M
  worker_overhead:
    description: Compute buffer and bookkeeping per worker (bytes, or with K, M, G, T).
    type: str
    default: 128M
  cache_ram:
    description:
      - MiB of llama-server's prompt cache (its C(--cache-ram)), held in the coordinator host's memory. A local plan
        needs them beside the model, and a worker on the coordinator's host gives them up. 0 when llama-server runs
        with C(--cache-ram 0) (no prompt cache). The unbounded C(-1) cannot be planned for and is refused.
    type: int
    default: 0
  strategy:
    description: C(fewest) workers that fit (fewer hops, faster tokens), or C(all) reachable workers.
    type: str
    default: fewest
    choices: [fewest, all]
  fit_first:
    description:
      - With O(strategy=fewest), serve the model on the coordinator alone (a local plan, no RPC worker) when it fits
        there with O(headroom). The coordinator's memory is the figure of the worker named O(coordinator) (same host),
        else O(coordinator_memory); without either the plan uses workers.
    type: bool
    default: true
  coordinator_memory:
    description:
      - The coordinator host's memory figures for O(fit_first) when the coordinator is not one of the workers - the
        C(llamarpc_memory) fact of M(llamarpc.cluster.node_memory_facts), C(available) and optionally C(total).
        Rounded like the workers' figures. With O(worker_hosts) and without this option, the module reads them on the
        host it runs on (the coordinator).
    type: dict
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on
      the controller.
    support: full
    details: In check mode it reads O(controller_model_path)'s headers on the controller, then runs the module.
  check_mode:
    details: Reads and plans as without check mode; a worker that nothing answers for yet counts as ready (this run
      would start it).
seealso:
  - module: llamarpc.cluster.rpc_endpoint_facts
  - module: llamarpc.cluster.node_memory_facts
"""

EXAMPLES = r"""
- name: Plan the cluster
  llamarpc.cluster.llama_cluster_plan:
    model_path: /data/models/qwen2.5-32b-instruct-q4_k_m-00001-of-00005.gguf
    coordinator: node1
    workers:
      - {name: node1, endpoint: "100.64.0.1:50052", mem_available: 7516192768, state: ready}
      - {name: node2, endpoint: "100.64.0.2:50052", mem_available: 7516192768, state: ready}
    ctx_size: 4096
  register: cluster_plan

- name: Show it
  ansible.builtin.debug:
    msg: "{{ cluster_plan.plan.table }}"
"""

RETURN = r"""
plan:
  description: The plan.
  returned: success
  type: dict
  contains:
    local:
      description: The model is served on the coordinator alone (fit first) - no worker, C(rpc) and C(tensor_split)
        empty, C(devices) V(none).
      type: bool
    rpc:
      description: The C(--rpc) value, the chosen workers in order (empty for a local plan).
      type: str
      sample: 10.213.0.11:50052,10.213.0.12:50052
    args:
      description: llama-server's plan arguments as one line of words (C(--rpc), C(--device), C(--tensor-split),
        C(--n-gpu-layers); C(--device none --n-gpu-layers 0) for a local plan).
      type: str
      sample: --rpc 10.213.0.11:50052 --device RPC0 --tensor-split 17 --n-gpu-layers all
    devices:
      description: The C(-dev) value (the RPC devices, in C(--rpc) order).
      type: str
      sample: RPC0,RPC1
    tensor_split:
      description: The C(--tensor-split) value.
      type: str
      sample: 0.5,0.5
    workers:
      description: Per chosen worker, C(name), C(endpoint), C(layers), C(output_layer), C(weight_bytes), C(kv_bytes),
        C(bytes), C(capacity), C(headroom), C(share).
      type: list
      elements: dict
    excluded:
      description: Workers left out, with the reason (unreachable, no memory to spare).
      type: list
      elements: dict
    table:
      description: The plan as text lines (node, endpoint, layers, bytes, share, predicted headroom).
      type: list
      elements: str
explanation:
  description: Why this many workers, in the performance model's terms (network crossings per generated token, and
    the network time per token when the workers carry C(rtt_ms)). Not part of RV(plan), since round trips vary.
  returned: success
  type: str
  sample: "2 of 6 usable worker(s) (fewest): the layer split crosses the network 4 times per generated token"
workers:
  description: The candidate workers as planned (memory rounded, C(mem_total) dropped).
  returned: success
  type: list
  elements: dict
model:
  description: What was read from the GGUF headers (layer count, weight bytes per layer, KV shape).
  returned: success
  type: dict
  sample: {"architecture": "llama", "n_layer": 16, "weight_bytes": 440401920}
candidates:
  description: With O(worker_hosts), the planner's input before rounding, one entry per worker (C(name), C(endpoint),
    C(state), C(mem_available), C(mem_total), C(rtt_ms)); also returned when the model cannot fit.
  returned: when O(worker_hosts) is given
  type: list
  elements: dict
serving:
  description: The endpoints llama-server is connected to now (the plan in force, when C(/health) answered 200).
  returned: when O(worker_hosts) is given
  type: list
  elements: str
  sample: ["10.213.0.11:50052"]
probe:
  description: What each probed worker (every worker llama-server is not connected to) answered - the C(rpc_endpoints)
    items of M(llamarpc.cluster.rpc_endpoint_facts).
  returned: when O(worker_hosts) is given
  type: list
  elements: dict
health_status:
  description: The HTTP status llama-server's C(/health) answered (V(0) when nothing answered).
  returned: when O(worker_hosts) is given
  type: int
planned_from:
  description: Where the model was read - V(coordinator) (O(model_path)), V(given) (O(model)), V(controller) (check
    mode, O(controller_model_path)), or null when check mode found nothing to plan yet (RV(msg) says why).
  returned: always
  type: str
seed_needed:
  description: Whether the planned workers' tensor caches should be seeded before the load - a planned worker has a
    cache (O(seeding)), the model is on the coordinator, not the plan-only run, and a load is coming (RV(deploy_needed),
    or llama-server not serving).
  returned: success, when O(worker_hosts) is given
  type: bool
refusal:
  description: With O(plan_only), why the model cannot be planned (empty when it can); the run does not fail.
  returned: when O(plan_only)
  type: str
record:
  description: The deployed plan record (O(deployment), C(summary), C(workers) without C(state), C(options), C(plan)).
  returned: success, when O(deployment) is given
  type: dict
deploy_needed:
  description: Whether RV(record) must replace the deployed one (O(plan_file)) - when anything but the workers' memory
    figures differs (the plan's C(rpc), C(devices) and C(tensor_split) and the workers' endpoints are compared).
  returned: success, when O(deployment) is given
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
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


def _coordinator_available(figures):
    """The coordinator's ``available`` bytes, rounded as the workers' are (None when not given)."""
    if not figures or figures.get("available") is None:
        return None
    entry = {"mem_available": int(figures["available"]), "mem_total": int(figures.get("total") or 0)}
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
    "strategy": {"type": "str", "default": "fewest", "choices": list(planner.STRATEGIES)},
    "fit_first": {"type": "bool", "default": True},
    "coordinator_memory": {"type": "dict"},
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
    health = state.health_status(params["api_url"], params["api_key"]) if params["api_url"] else 0
    serving = state.serving_now(state.env_in_force(params["env_files"]), health)
    try:
        probe = _probe([endpoint for endpoint in endpoints if endpoint not in serving])
    except ValueError as exc:
        module.fail_json(msg=f"invalid endpoint: {exc}")
    refusal = state.protocol_refusal(
        state.foreign_workers(probe, params["rpc_protocol"]),
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
        serving_endpoints=serving,
        plan_only=params["plan_only"],
        check_mode=module.check_mode,
    )
    gathered["candidates"] = found
    return found, gathered


def _coordinator_memory(params):
    """The coordinator host's figures for fit first: given, else read here (the module runs on the coordinator) when
    no worker shares its host; None when not needed or not readable."""
    if params["coordinator_memory"] is not None:
        return params["coordinator_memory"]
    if params["worker_hosts"] is None or not params["fit_first"] or params["coordinator"] in params["worker_hosts"]:
        return None
    try:
        return _node_memory.memory_facts()
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _record(params, deployed, summary, workers, result, headroom, overhead):
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


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("model_path", "model"), ("workers", "worker_hosts")],
        required_one_of=[("model_path", "model"), ("workers", "worker_hosts")],
        supports_check_mode=True,
    )
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
        module.exit_json(changed=False, planned_from=None, msg=_not_here(params, host))

    found, gathered = (params["workers"], {}) if params["worker_hosts"] is None else _observe(module)
    if params["plan_only"]:
        gathered["refusal"] = ""
    for worker in found:
        missing = [key for key in ("name", "endpoint", "mem_available") if worker.get(key) in (None, "")]
        if missing:
            module.fail_json(msg=f"worker {worker.get('name', worker)!r} lacks {', '.join(missing)}", **gathered)
    workers = planner.round_memory(found)
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
        if source == state.FROM_COORDINATOR:
            summary = planner.summarize(gguf.read_model(params["model_path"]))
        else:
            summary = params["model"] if source == state.FROM_GIVEN else params["controller_model"]
        missing = sorted(set(MODEL_KEYS) - set(summary))
        if missing:
            module.fail_json(
                msg=f"model lacks {', '.join(missing)}: pass the model that gguf_shard_plan returns with fetch=false",
                **gathered,
            )
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
            coordinator_available=_coordinator_available(_coordinator_memory(params)),
            cache_ram=params["cache_ram"] << 20,
        )
    except (gguf.GGUFError, planner.PlanError, OSError) as exc:
        if params["plan_only"]:
            gathered["refusal"] = str(exc)
            module.exit_json(changed=False, planned_from=source, msg=str(exc), **gathered)
        module.fail_json(msg=str(exc), planned_from=source, **gathered)
    decided = _record(params, deployed, summary, workers, result, headroom, overhead)
    module.exit_json(
        changed=False,
        plan=result,
        model=summary,
        workers=workers,
        planned_from=source,
        explanation=explain(result, workers, params["coordinator"]),
        **gathered,
        **decided,
        **_seed_needed(params, source, result, gathered, decided),
    )


if __name__ == "__main__":
    main()
