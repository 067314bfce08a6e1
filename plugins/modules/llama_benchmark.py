# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_benchmark
short_description: Benchmark one llama-server configuration, profile the model, or write the benchmark report
description:
  - With O(mode=run) (on the coordinator) starts C(llama-server) as a transient systemd unit with the given RPC
    workers, split mode, threads and slots, times the model load until C(/health) answers 200, runs greedy
    completions for every prompt and output length (repeated) and, optionally, several clients at once, then stops it.
    It counts the bytes this host's links (every interface but loopback, C(/proc/net/dev)) sent and received during
    the load.
  - With O(proxy_delay_ms) above 0, every RPC worker is reached through a userspace delaying TCP proxy (a second
    transient unit on the same host) that adds twice that delay to each round trip (netem is not in every kernel),
    and RV(result.proxy_hold) says what it really held each chunk while the completions ran.
  - With O(pair), a second C(llama-server) with the pair's workers and split runs beside the first (next port), and
    the completions alternate between the two, request by request (RV(pair_result)). Two configurations are then
    compared at the same moments of a shared machine; a ratio with C(paired) in O(ratios) takes the median of the
    back-to-back completions' ratios.
  - With O(mode=profile) (where the model is) reads the GGUF header of O(model) and returns its proportions (token
    embedding, tensors at or under the RPC tensor cache's 10 MiB threshold, weights read per token, logits per token).
  - With O(mode=counters) returns the bytes this host's links have received and sent so far (as O(mode=run) counts
    them around the load), for a count around something else (a seeding).
  - With O(mode=report) (on the controller) writes C(results.json), C(report.md) and C(chart.png) (matplotlib) into
    O(results_dir), with the ratios between configurations, the performance model's predictions and, given
    O(model_profile), the model's proportions against the seed's Qwen2.5-32B Q4_K_M (computed from its shapes).
  - With O(speculative), llama-server runs with speculative decoding (the planner's arguments, a draft model on this
    host's CPU); the result counts the drafted and accepted tokens (RV(result.summary)) and the report gets a section
    with the acceptance, the tokens per pass and the prediction from them, paired with the plain configuration beside
    it (O(pair) with C(proxied), the same round trip) and whether their greedy outputs agree.
  - The report compares every configuration's greedy outputs with the O(calibration) configuration's (a single
    process) - each result's C(summary.same_output_as_single), and a row in the ratios table (target 1, the share of
    configurations whose outputs are identical, naming those that differ).
  - A result with a C(seeding) record (what a seeding before its load wrote and where the bytes came from, see
    RV(result)) gets a section of its own.
version_added: 0.1.0
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: In check mode nothing is started or written; changed is predicted.
options:
  mode:
    description: C(run) one configuration, C(profile) the model, read this host's network C(counters), or write the
      C(report).
    type: str
    choices: [run, profile, counters, report]
    default: run
  name:
    description: Name of the configuration (O(mode=run)).
    type: str
    default: bench
  server_bin:
    description: Path of C(llama-server) (O(mode=run)).
    type: path
  model:
    description: Shard 1 (or the only file) of the model (O(mode=run) and O(mode=profile)).
    type: path
  rpc:
    description: RPC workers as C(host:port); empty runs a single process (C(--device none -ngl 0)).
    type: list
    elements: str
    default: []
  tensor_split:
    description: C(--tensor-split) proportions, one per worker (empty = even).
    type: list
    elements: float
    default: []
  split_mode:
    description: C(--split-mode) with workers.
    type: str
    choices: [layer, tensor]
    default: layer
  load_mode:
    description: C(--load-mode) of llama-server.
    type: str
    default: auto
  threads:
    description: C(--threads) of llama-server.
    type: int
    default: 1
  parallel:
    description: C(--parallel) slots; above 1 also measures that many clients at once.
    type: int
    default: 1
  ctx_size:
    description: Context per slot.
    type: int
    default: 512
  cache_ram:
    description:
      - llama-server's C(--cache-ram), MiB of prompt cache in the coordinator's RAM; 0 turns it off, as the
        llama_coordinator role runs it by default (over RPC that cache reads each request's context back from the
        workers).
    type: int
    default: 0
  extra_args:
    description: Further llama-server arguments (C(--rpc-tensor-hashes FILE), say).
    type: list
    elements: str
    default: []
  drop_cache:
    description:
      - Before the load, ask the kernel to forget this host's cached pages of every file of O(model) (posix_fadvise
        DONTNEED), so that a shard on an SSHFS mount is read over the link again - as on a coordinator whose memory
        cannot keep the shards cached (the seed's 19.8 GB on 8 GB). RV(result.load_network) then counts those bytes.
    type: bool
    default: false
  speculative:
    description:
      - Speculative decoding for this configuration, as the llama_coordinator role asks it of the planner - C(types)
        (C(--spec-type) values), C(settings) (name to value, C(--spec-NAME VALUE)), C(draft_path) (a draft model on this
        host, run on its CPU, for C(draft-simple)) and C(draft_name) (what the report calls the draft). The planner
        builds and checks the arguments; empty - none.
    type: dict
    default: {}
  local_rpc_server:
    description:
      - A C(ggml-rpc-server) started on this host's loopback for the run (C(bin), its path; C(port)), without a tensor
        cache, so that O(rpc) or the pair's can name C(127.0.0.1:PORT) - a second worker on the coordinator's host, as
        fast to reach as its own.
    type: dict
    suboptions:
      bin:
        description: Path of C(ggml-rpc-server).
        type: path
        required: true
      port:
        description: Its loopback port.
        type: int
        default: 50062
  prompt_text:
    description: The prompt of every completion instead of the synthetic ones of O(prompt_tokens) (then unused).
    type: str
    default: ""
  prompt_name:
    description: What the report calls O(prompt_text).
    type: str
    default: ""
  port:
    description: Loopback port of the benchmark's llama-server (not the cluster's own).
    type: int
    default: 8090
  prompt_tokens:
    description: Prompt lengths (tokens, about).
    type: list
    elements: int
    default: [32, 128]
  predict_tokens:
    description: Output lengths (tokens).
    type: list
    elements: int
    default: [16, 64]
  repeats:
    description: Repetitions of each (prompt, output) pair.
    type: int
    default: 3
  proxy_delay_ms:
    description: One-way delay of the delaying proxy in front of every worker (0 = direct).
    type: float
    default: 0
  proxy_base_port:
    description: First loopback port of the proxy (one per worker).
    type: int
    default: 16000
  pair:
    description:
      - A second configuration run beside this one (O(mode=run)), on O(port) + 1, through the proxy only with
        C(proxied), and with no worker of this one (a C(ggml-rpc-server) serves one client at a time); O(parallel)
        must be 1.
      - Both are loaded, one after the other; then each (prompt, output) pair goes to one and then the other, the
        order swapping from one request to the next. Runs made back to back share a C(pair) key.
    type: dict
    suboptions:
      name:
        description: The pair's configuration name.
        type: str
        required: true
      rpc:
        description: Its RPC workers as C(host:port) (empty - a single process).
        type: list
        elements: str
        default: []
      tensor_split:
        description: Its proportions per worker.
        type: list
        elements: float
        default: []
      split_mode:
        description: Its split mode.
        type: str
        choices: [layer, tensor]
        default: layer
      speculative:
        description: Its speculative decoding, as O(speculative) (empty - none, whatever this configuration's).
        type: dict
        default: {}
      proxied:
        description: Its workers through the same delaying proxy as this configuration's (O(proxy_delay_ms)).
        type: bool
        default: false
  load_timeout:
    description: Seconds to wait for the model load.
    type: int
    default: 1800
  state_dir:
    description: Where the proxy script is written on the host.
    type: path
    default: /run/llamarpc/bench
  results:
    description:
      - Results of O(mode=run), one per configuration (O(mode=report)).
      - A result may carry C(seeding) - C(seconds), C(workers) (per worker host C(written), C(present),
        C(unavailable), C(bytes_written), C(bytes_fetched) as M(llamarpc.cluster.tensor_cache_seed) returns them, and
        the shard file names its bytes came from, C(shards_local) and C(shards_fetched)), C(sources) (shard file name
        to URL) and C(coordinator_network) (O(mode=counters) differences) - for the report's seeding section.
    type: list
    elements: dict
    default: []
  links:
    description:
      - Link figures (O(mode=report)), each C(name), C(kind), C(from), C(to), C(bytes) and C(mb_per_s), as
        M(llamarpc.cluster.link_throughput) measures them. A ratio may name them, with C(metric=mb_per_s).
    type: list
    elements: dict
    default: []
  rerun:
    description:
      - Figures of a no-op C(site.yml) rerun (O(mode=report)), as the C(llamarpc.cluster.timings) callback writes
        them, under C(site); optionally C(floor), the same callback's figures for a playbook of trivial module tasks
        on every host (Ansible's per-task cost there), C(floor_one_host), the same on one host (for an estimate on
        separate machines), and C(budget_seconds) (default 45).
      - The report gets a section on what the rerun spent its time on and a row in the ratios table (met when the
        rerun took at most C(budget_seconds) and changed nothing).
    type: dict
    default: {}
  ratios:
    description:
      - Ratios to report, each C(name), C(metric) (a key of a result's summary), C(numerator), C(denominator)
        (configuration names), optional C(target), C(compare) (C(ge) or C(le)) and C(denominator_metric).
      - With C(paired) true and a completion metric (C(generation_tps), C(prompt_tps)), the value is the median over
        the completions the two configurations made back to back (O(pair)) of their ratio, and the row gets
        C(pairs), their number; without such completions it is the ratio of the medians, with C(pairs) 0.
      - Instead of C(denominator), C(denominator_value) divides by a fixed number (the model's bytes, say).
    type: list
    elements: dict
    default: []
  model_bytes:
    description:
      - Weight bytes read per token for the performance model when O(model_profile) is not given (0 = no predictions).
    type: int
    default: 0
  model_profile:
    description:
      - The model's proportions, as O(mode=profile) returns them (O(mode=report)). The performance model takes the
        weights read per token, the hidden state and the logits per token and the layer count from it, and the report
        compares them with Qwen2.5-32B Q4_K_M.
    type: dict
    default: {}
  paper:
    description:
      - The seed's case on paper (O(mode=report)) - what C(tools/seed_paper.py --json) writes - C(rows) (each
        C(plan), C(link_mbit), C(cold_s), C(seeded_s), C(warm_s) and C(tokens_per_second)), C(measured)
        (C(load_minutes), C(tokens_per_second)), C(assumptions) and C(source).
      - The report gets a section with the predicted load times and tokens/s next to what the seed measured.
    type: dict
    default: {}
  endpoints:
    description:
      - RPC endpoint (C(host:port)) of each inventory host (O(mode=report)). A worker's link throughput for the
        performance model is the O(links) figure of kind C(raw TCP) from that host (none for a worker without one,
        such as the coordinator's own host).
    type: dict
    default: {}
  calibration:
    description: Name of the single-process configuration that calibrates the memory bandwidth.
    type: str
    default: single
  layers:
    description: Layers of the model (performance model, tensor split); 0 takes them from O(model_profile), else 1.
    type: int
    default: 0
  shared_bandwidth_nodes:
    description: Nodes that share one machine's memory bandwidth (the lab; 0 = independent machines).
    type: int
    default: 0
  link_qdiscs:
    description:
      - The coordinator's C(tc -j qdisc show) output (O(mode=report)). The smallest burst of a C(tbf) on its links
        (the lab's bandwidth cap) is what a message crosses at the wire's speed; the predictions charge only the
        bytes per token above it over the link, and the report's meta says it (C(link_burst_bytes)).
      - Empty, or no tbf - every byte at the link's rate, as a real NIC serialises it.
    type: str
    default: ""
  spec_targets:
    description:
      - The least ratio of the best speculative configuration to the plain layer split, per prompt name (O(prompt_name))
        at O(spec_target_rtt_ms) (O(mode=report)). Each speculative configuration run beside its plain pair gets a
        paired ratio row, and each prompt and round trip a row with the best of them.
    type: dict
    default: {}
  spec_target_rtt_ms:
    description: The round trip (ms) the O(spec_targets) apply at.
    type: float
    default: 16.0
  meta:
    description: Free-form facts written into the report (machine load, command).
    type: dict
    default: {}
  results_dir:
    description: Directory of the report files (O(mode=report)).
    type: path
"""

EXAMPLES = r"""
- name: Two workers, layer split, 5 ms added each way
  llamarpc.cluster.llama_benchmark:
    name: layer-10ms
    server_bin: /usr/local/lib/llamarpc/llama.cpp/bin/llama-server
    model: /data/models/m-00001-of-00002.gguf
    rpc: [10.0.0.2:50052, 10.0.0.3:50052]
    proxy_delay_ms: 5
  register: layer_10ms

- name: Proportions of the model (GGUF header only)
  llamarpc.cluster.llama_benchmark:
    mode: profile
    model: /data/models/m-00001-of-00002.gguf
  register: model_profile

- name: Report
  llamarpc.cluster.llama_benchmark:
    mode: report
    model_profile: "{{ model_profile.profile }}"
    results: ["{{ single.result }}", "{{ layer_10ms.result }}"]
    ratios:
      - {name: distributed/single, metric: generation_tps, numerator: layer-10ms, denominator: single, target: 0.95}
    results_dir: benchmarks/results
  delegate_to: localhost
"""

RETURN = r"""
result:
  description: One configuration's measurements (O(mode=run)).
  returned: mode is run
  type: dict
  contains:
    name: {description: Configuration name., type: str}
    rpc: {description: Workers used., type: list, elements: str}
    split_mode: {description: Split mode., type: str}
    load_seconds: {description: Seconds from start to /health 200., type: float}
    load_network:
      description: Bytes this host's links received and sent during the load (C(received_bytes), C(sent_bytes)).
      type: dict
    runs: {description: Every completion's timings., type: list, elements: dict}
    parallel_runs: {description: Aggregate tokens/s with several clients., type: list, elements: dict}
    server_peak_rss_bytes: {description: Peak resident memory of llama-server., type: int}
    proxy_hold:
      description:
        - With O(proxy_delay_ms) - what the proxy really held each chunk while the completions ran, C(chunks),
          C(mean_ms) (one way) and C(asked_ms); the report's predictions take twice C(mean_ms) as the round trip.
        - C(relay_bps) - the bytes the proxy relayed per second of its own CPU meanwhile (null when it used none
          measurably); the predictions take it as the throughput of every link through the proxy when the link's own
          is higher.
        - Null without the proxy.
      type: dict
    summary:
      description: Medians and spread (load_seconds, prompt_tps, generation_tps, generation_spread) and the bytes
        sent and received during the load (load_sent_bytes, load_received_bytes).
      type: dict
    dropped_cache:
      description: Whether the model's cached pages were dropped before the load (O(drop_cache)).
      type: bool
    tensor_split:
      description: The proportions per worker it ran with (O(tensor_split); empty - even).
      type: list
      elements: float
    paired_with: {description: With O(pair) - the other configuration's name., type: str}
    speculative:
      description:
        - With O(speculative) - C(types), C(settings), C(draft_path), C(draft_name) and C(draft_read_bytes) (the draft's
          weights read per drafted token, from its GGUF header); null without.
        - The summary then has C(drafted), C(accepted), C(acceptance) (accepted / drafted), C(drafted_per_pass) and
          C(accepted_per_pass) (over the target's passes, generated - accepted tokens), and beside a pair
          C(same_output_as_pair).
        - O(mode=report) adds C(verify_slope) (what each drafted token adds to a verification pass, as a fraction of
          one token's predicted compute), C(slope_fitted_here) and C(head_share) (the output head's share of the bytes
          a token reads). The slope is fitted on the configurations with speculation and no draft model at the least
          added round trip among them (C(slope_fitted_here) true), and predicts the others.
      type: dict
    prompt_name: {description: O(prompt_name) when given., type: str}
pair_result:
  description: The pair's measurements (O(pair)), as RV(result); its runs carry the same C(pair) keys.
  returned: mode is run and pair is given
  type: dict
counters:
  description: This host's bytes received and sent so far on every interface but loopback (O(mode=counters)).
  returned: mode is counters
  type: dict
  contains:
    received_bytes: {description: Bytes received., type: int}
    sent_bytes: {description: Bytes sent., type: int}
profile:
  description: The model's proportions (O(mode=profile)).
  returned: mode is profile
  type: dict
  contains:
    weight_bytes: {description: Bytes of all weights., type: int}
    embedding_share: {description: Share of the token embedding in the weights., type: float}
    tied_output: {description: Whether the output matrix is the token embedding., type: bool}
    small_tensors: {description: Tensors at or under the RPC tensor cache's threshold (10 MiB)., type: int}
    read_per_token_bytes: {description: Weights read per generated token (what the workers hold)., type: int}
    warm_load_bytes: {description: Workers' weights sent again on a warm load (not cached)., type: int}
    logits_bytes: {description: Logits per generated token (f32)., type: int}
    file_bytes: {description: Bytes of the model's files (every shard)., type: int}
    sshfs_bytes:
      description: Bytes of the model's files that lie on an SSHFS mount here (a shard linked into one counts), read
        over the links to other hosts at a load.
      type: int
  sample: {name: gemma-3-270m-q4_k_m, n_layer: 18, weight_bytes: 246587904, embedding_share: 0.723, tied_output: true,
           small_tensors: 235, tensor_count: 236, logits_bytes: 1048576}
report:
  description: The report (O(mode=report)).
  returned: mode is report
  type: dict
  contains:
    files: {description: Files written., type: list, elements: str}
    ratios: {description: Ratios with their values and whether the targets are met., type: list, elements: dict}
    results: {description: Results with predictions added., type: list, elements: dict}
    models:
      description: The model's proportions and the reference's (Qwen2.5-32B Q4_K_M), or null without O(model_profile).
      type: list
      elements: dict
    paper:
      description: O(paper) as given, or null without it.
      type: dict
    rerun:
      description:
        - The no-op rerun (from O(rerun)) - C(seconds), C(changed), C(met), C(kinds), C(plays), C(roles), the slowest
          tasks and, with a floor, C(floor.seconds_per_task) - or null.
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.bench._bench_run import run_module


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["run", "profile", "counters", "report"], "default": "run"},
            "name": {"type": "str", "default": "bench"},
            "server_bin": {"type": "path"},
            "model": {"type": "path"},
            "rpc": {"type": "list", "elements": "str", "default": []},
            "tensor_split": {"type": "list", "elements": "float", "default": []},
            "split_mode": {"type": "str", "choices": ["layer", "tensor"], "default": "layer"},
            "load_mode": {"type": "str", "default": "auto"},
            "threads": {"type": "int", "default": 1},
            "parallel": {"type": "int", "default": 1},
            "ctx_size": {"type": "int", "default": 512},
            "cache_ram": {"type": "int", "default": 0},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "drop_cache": {"type": "bool", "default": False},
            "port": {"type": "int", "default": 8090},
            "prompt_tokens": {"type": "list", "elements": "int", "default": [32, 128], "no_log": False},
            "predict_tokens": {"type": "list", "elements": "int", "default": [16, 64], "no_log": False},
            "repeats": {"type": "int", "default": 3},
            "proxy_delay_ms": {"type": "float", "default": 0},
            "proxy_base_port": {"type": "int", "default": 16000},
            "pair": {
                "type": "dict",
                "options": {
                    "name": {"type": "str", "required": True},
                    "rpc": {"type": "list", "elements": "str", "default": []},
                    "tensor_split": {"type": "list", "elements": "float", "default": []},
                    "split_mode": {"type": "str", "choices": ["layer", "tensor"], "default": "layer"},
                    "speculative": {"type": "dict", "default": {}},
                    "proxied": {"type": "bool", "default": False},
                },
            },
            "speculative": {"type": "dict", "default": {}},
            "local_rpc_server": {
                "type": "dict",
                "options": {"bin": {"type": "path", "required": True}, "port": {"type": "int", "default": 50062}},
            },
            "prompt_text": {"type": "str", "default": ""},
            "spec_targets": {"type": "dict", "default": {}},
            "spec_target_rtt_ms": {"type": "float", "default": 16.0},
            "prompt_name": {"type": "str", "default": ""},
            "load_timeout": {"type": "int", "default": 1800},
            "state_dir": {"type": "path", "default": "/run/llamarpc/bench"},
            "results": {"type": "list", "elements": "dict", "default": []},
            "ratios": {"type": "list", "elements": "dict", "default": []},
            "links": {"type": "list", "elements": "dict", "default": []},
            "rerun": {"type": "dict", "default": {}},
            "model_bytes": {"type": "int", "default": 0},
            "model_profile": {"type": "dict", "default": {}},
            "paper": {"type": "dict", "default": {}},
            "endpoints": {"type": "dict", "default": {}},
            "calibration": {"type": "str", "default": "single"},
            "layers": {"type": "int", "default": 0},
            "shared_bandwidth_nodes": {"type": "int", "default": 0},
            "link_qdiscs": {"type": "str", "default": ""},
            "meta": {"type": "dict", "default": {}},
            "results_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
