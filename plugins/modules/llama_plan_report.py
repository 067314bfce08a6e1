#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_plan_report
short_description: Predict load time and tokens/s of a cluster plan, print it and write it as JSON
version_added: 0.2.0
description:
  - An action that runs on the controller only and never connects to a host. C(playbooks/plan.yml) gives it the
    results of the planners C(site.yml) deploys with (M(llamarpc.cluster.gguf_shard_plan) with C(fetch=false),
    M(llamarpc.cluster.llama_cluster_plan)); it adds predictions of the load time and tokens/s and writes everything
    to O(dest).
  - A link's bandwidth is what O(links) says of the host, else O(link_mbit); its round trip is measured where a worker
    answers already (O(workers)), else O(rtt_ms). The report says which figures are assumed.
  - Fails after writing O(dest) when O(refusals) is not empty (unless O(fail_on_refusal=false)).
notes:
  - How the load time and tokens/s are predicted - C(docs/plan.md).
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Computes and returns the plan; O(dest) is not written.
options:
  model:
    description: The model summary (C(model) of M(llamarpc.cluster.gguf_shard_plan) with C(fetch=false)).
    type: dict
    required: true
  shards:
    description: The model's shards in order, each with C(name) and C(size).
    type: list
    elements: dict
    required: true
  coordinator:
    description: Inventory name of the coordinator.
    type: str
    required: true
  placement:
    description: The shard placement (C(plan) of M(llamarpc.cluster.gguf_shard_plan)); omitted when it was refused.
    type: list
    elements: dict
  disk:
    description: Per host C(usable), C(assigned) and C(left) bytes (C(hosts) of M(llamarpc.cluster.gguf_shard_plan)).
    type: dict
  reports:
    description: Per host what its model directory holds (C(reports) of M(llamarpc.cluster.gguf_shard_plan)); shards
      already complete there are not downloaded again.
    type: dict
    default: {}
  memory:
    description: The memory plan (C(plan) of M(llamarpc.cluster.llama_cluster_plan)); omitted when it was refused.
    type: dict
  probe:
    description: The RPC workers running now (C(rpc_endpoints) of M(llamarpc.cluster.rpc_endpoint_facts)).
    type: list
    elements: dict
    default: []
  header_reads:
    description: How the GGUF headers were read (C(header_reads) of M(llamarpc.cluster.gguf_shard_plan)).
    type: list
    elements: dict
    default: []
  refusals:
    description: Why the model cannot be deployed, one message per planner that refused it.
    type: list
    elements: str
    default: []
  staging:
    description:
      - The model change (C(staging) of M(llamarpc.cluster.gguf_shard_plan)) - the report shows per host the bytes of
        the model served now, of the older ones kept, of the new one and those removed first, and whether staging
        fits.
    type: dict
  links:
    description:
      - Per host, the bandwidth of its link in Mbit/s; null or missing - O(link_mbit).
      - Default - each inventory host's variable C(llamarpc_plan_link_mbit), where it is set.
    type: dict
  workers:
    description: The memory planner's candidate workers (C(name), C(rtt_ms)); a worker's C(rtt_ms) (the TCP connect time
      to an RPC worker already running, measured by M(llamarpc.cluster.rpc_endpoint_facts)) is its measured round
      trip, else O(rtt_ms) is assumed.
    type: list
    elements: dict
    default: []
  link_mbit:
    description: Bandwidth assumed for a host's link, in Mbit/s.
    type: float
    default: 1000.0
  source_mbit:
    description: Download rate assumed from the model's source to each host, in Mbit/s.
    type: float
    default: 100.0
  rtt_ms:
    description: Round trip assumed between the coordinator and a worker, in milliseconds.
    type: float
    default: 1.0
  memory_gbps:
    description: Memory bandwidth assumed of every node, in GB/s (a token reads every weight once).
    type: float
    default: 10.0
  spec_acceptance:
    description:
      - The acceptance rate assumed for the prediction with speculative decoding, when O(memory) has it (its
        C(speculative)) - the probability that a drafted token is accepted when the ones before it were, from 0 to 1.
      - The report gives tokens/s with and without speculation, and says what it assumed.
    type: float
    default: 0.5
  n_vocab:
    description: The model's vocabulary size; the logits of every verified token then count over the last worker's
      link in the prediction with speculative decoding (and in the one without it, to compare). 0 counts none.
    type: int
    default: 0
  dest:
    description: Path of the JSON plan on the controller (a relative path is relative to the working directory).
    type: path
    required: true
  fail_on_refusal:
    description: Fail when O(refusals) is not empty (after writing O(dest)).
    type: bool
    default: true
seealso:
  - module: llamarpc.cluster.gguf_shard_plan
  - module: llamarpc.cluster.llama_cluster_plan
"""

EXAMPLES = r"""
- name: Predict and write the plan
  llamarpc.cluster.llama_plan_report:
    model: "{{ shard_plan.model }}"
    shards: "{{ shard_plan.shards }}"
    coordinator: node1
    placement: "{{ shard_plan.plan }}"
    disk: "{{ shard_plan.hosts }}"
    memory: "{{ cluster_plan.plan }}"
    links:
      node2: 100
    dest: llamarpc-plan.json
  run_once: true
"""

RETURN = r"""
plan:
  description: The plan as written to O(dest) - C(model), C(placement), C(disk), C(memory), C(workers_now), C(links),
    C(assumptions), C(refusals), C(load) (seconds per step and C(total_seconds)), C(speed) (C(tokens_per_second),
    C(compute_seconds), C(network_seconds)), C(speculation) (null without speculative decoding - C(types),
    C(drafted_per_pass), C(acceptance), C(tokens_per_pass), C(with) and C(without) as C(speed), C(speedup)) and
    C(text).
  returned: always
  type: dict
lines:
  description: The plan as text lines.
  returned: always
  type: list
  elements: str
  sample:
    - "Shards per host:"
    - "  node1: 3 shard(s), 13.8 MB (usable 230.1 MB, left 216.3 MB) llamarpc-tiny-seed0-00001-of-00003.gguf, ..."
    - "Predicted generation: 40.2 tokens/s (compute 1.3 ms + network 23.5 ms per token, ...)"
dest:
  description: The absolute path written.
  returned: always
  type: str
"""
