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
  - Speculative decoding (O(speculative)) - its llama-server arguments are part of RV(plan.args); a draft model's
    weights, KV cache and compute buffer count on the host that runs it (the coordinator's CPU, or a worker, which is
    then in every plan).
  - Fails with what is missing when the model cannot fit. Changes nothing, in check mode too.
  - A real run fails when O(model_path) does not exist; check mode before the first real run plans from
    O(controller_model_path) when given, else returns no RV(plan) and says why in its C(msg).
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
      - Fails before planning, and before any change, when a probed worker speaks an RPC protocol that llama-server of
        O(rpc_protocol) refuses (and aborts at start) - another major, or a newer minor.
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
  switching:
    description:
      - In step with O(worker_hosts) - whether that worker switches llama.cpp in this run (it runs its old binaries
        until the coordinator's cutover restarts it on the new ones; the C(switch) that
        P(llamarpc.cluster.llama_rpc_worker#role) registers).
      - Such a worker is not probed (its answer would be the build it leaves); it counts as ready, and O(rpc_protocol)
        is checked against its entry of O(worker_protocols), before any change.
    type: list
    elements: bool
    default: []
  worker_protocols:
    description: In step with O(worker_hosts) - the RPC protocol of the llama.cpp installed for each worker in this
      run (empty - not known), for the workers that switch (O(switching)).
    type: list
    elements: str
    default: []
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
    choices: [bf16, f16, f32, iq4_nl, q4_0, q4_1, q5_0, q5_1, q8_0]
  cache_type_v:
    description: KV cache type of values.
    type: str
    default: f16
    choices: [bf16, f16, f32, iq4_nl, q4_0, q4_1, q5_0, q5_1, q8_0]
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
  reserve:
    description:
      - Bytes of memory that other services of the collection may take on a host (Prometheus and node exporter, their
        units' C(MemoryMax)), by inventory name. Each worker's and the coordinator's available memory is planned
        without them.
    type: dict
    default: {}
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
  speculative:
    description:
      - Speculative decoding. Off (no argument, nothing counted) while O(speculative.types) is empty.
    type: dict
    suboptions:
      types:
        description:
          - llama-server's C(--spec-type) values - V(ngram-simple), V(ngram-map-k), V(ngram-map-k4v), V(ngram-mod),
            V(ngram-cache) (drafts from the text already seen, no memory), V(draft-simple) (a draft model,
            O(speculative.draft_path)).
        type: list
        elements: str
        default: []
      draft_path:
        description:
          - Shard 1 of the draft model on the host the module runs on; its GGUF header is read for its memory.
          - In check mode before it is there, no plan is returned (the result's C(msg) says why).
        type: path
      draft_model:
        description: The draft as already read from its GGUF headers (the plan-only run), instead of reading
          O(speculative.draft_path).
        type: dict
      draft_device:
        description: Where the draft runs - V(cpu) (the coordinator's CPU, C(--spec-draft-device none)) or the name of a
          worker (its RPC device; that worker is then in every plan and there is no local plan).
        type: str
        default: cpu
      draft_max:
        description: C(--spec-draft-n-max), tokens drafted per pass by the draft model (with V(draft-simple) only).
        type: int
      draft_min:
        description: C(--spec-draft-n-min), the fewest drafted tokens used (with V(draft-simple) only).
        type: int
      settings:
        description:
          - The types' own settings, each passed as C(--spec-NAME VALUE) - V(ngram-mod-n-min), V(ngram-mod-n-max),
            V(ngram-mod-n-match), V(ngram-simple-size-n), V(ngram-simple-size-m), V(ngram-simple-min-hits), the same
            three of V(ngram-map-k) and V(ngram-map-k4v), V(draft-p-min), V(draft-p-split), V(draft-threads),
            V(draft-type-k), V(draft-type-v), V(draft-n-max), V(draft-n-min).
        type: dict
        default: {}
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
        C(--n-gpu-layers); C(--device none --n-gpu-layers 0) for a local plan), then the speculative ones
        (C(--spec-type), C(--spec-draft-model), C(--spec-draft-device), C(--spec-NAME VALUE)).
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
      description: The plan as text lines (node, endpoint, layers, bytes, share, predicted headroom), and the draft
        model's line.
      type: list
      elements: str
    speculative:
      description: With O(speculative) on, C(types), C(settings), C(draft) (a draft model or not), C(draft_path),
        C(draft_device) (V(none) or V(RPCn)), C(draft_host), C(draft_weight_bytes), C(draft_kv_bytes), C(draft_bytes)
        (on its host, with its compute buffer) and C(flags) (every flag of its arguments).
      type: dict
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
    mode, O(controller_model_path)), or null when check mode found nothing to plan yet (the result's C(msg) says why).
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _plan_run


def main():
    module = AnsibleModule(
        argument_spec=_plan_run.ARGUMENT_SPEC,
        mutually_exclusive=_plan_run.MUTUALLY_EXCLUSIVE,
        required_one_of=_plan_run.REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    module.exit_json(**_plan_run.run_module(module))


if __name__ == "__main__":
    main()
