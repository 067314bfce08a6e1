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
  - With O(proxy_delay_ms) above 0, every RPC worker is reached through a userspace delaying TCP proxy (a second
    transient unit on the same host) that adds twice that delay to each round trip (netem is not in every kernel).
  - With O(mode=profile) (where the model is) reads the GGUF header of O(model) and returns its proportions (token
    embedding, tensors at or under the RPC tensor cache's 10 MiB threshold, weights read per token, logits per token).
  - With O(mode=report) (on the controller) writes C(results.json), C(report.md) and C(chart.png) (matplotlib) into
    O(results_dir), with the ratios between configurations, the performance model's predictions and, given
    O(model_profile), the model's proportions against the seed's Qwen2.5-32B Q4_K_M (computed from its shapes).
version_added: 0.1.0
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: In check mode nothing is started or written; changed is predicted.
options:
  mode:
    description: C(run) one configuration, C(profile) the model, or write the C(report).
    type: str
    choices: [run, profile, report]
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
  extra_args:
    description: Further llama-server arguments.
    type: list
    elements: str
    default: []
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
  load_timeout:
    description: Seconds to wait for the model load.
    type: int
    default: 1800
  state_dir:
    description: Where the proxy script is written on the host.
    type: path
    default: /run/llamarpc/bench
  results:
    description: Results of O(mode=run), one per configuration (O(mode=report)).
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
    runs: {description: Every completion's timings., type: list, elements: dict}
    parallel_runs: {description: Aggregate tokens/s with several clients., type: list, elements: dict}
    server_peak_rss_bytes: {description: Peak resident memory of llama-server., type: int}
    summary:
      description: Medians and spread (load_seconds, prompt_tps, generation_tps, generation_spread).
      type: dict
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
    rerun:
      description:
        - The no-op rerun (from O(rerun)) - C(seconds), C(changed), C(met), C(kinds), C(plays), C(roles), the slowest
          tasks and, with a floor, C(floor.seconds_per_task) - or null.
      type: dict
"""

import inspect
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils import _delay_proxy
from ansible_collections.llamarpc.cluster.plugins.module_utils._bench import (
    completion,
    markdown_report,
    parallel_completions,
    ratio_rows,
    rerun_summary,
    summarize,
    wait_healthy,
    write_chart,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils._gguf_header import SPLIT_NAME, GGUFError, read_model
from ansible_collections.llamarpc.cluster.plugins.module_utils._model_profile import profile, reference_profile
from ansible_collections.llamarpc.cluster.plugins.module_utils._perf_model import effective_bandwidth, predict
from ansible_collections.llamarpc.cluster.plugins.module_utils._systemd import Systemctl

SERVER_UNIT = "llamarpc-bench-server"
PROXY_UNIT = "llamarpc-bench-proxy"


def server_argv(p, rpc):
    """llama-server's command line for one configuration."""
    argv = [p["server_bin"], "--model", p["model"], "--host", "127.0.0.1", "--port", str(p["port"])]
    argv += ["--threads", str(p["threads"]), "--parallel", str(p["parallel"])]
    argv += ["--ctx-size", str(p["ctx_size"] * p["parallel"]), "--load-mode", p["load_mode"], "--no-webui"]
    if rpc:
        devices = ",".join(f"RPC{i}" for i in range(len(rpc)))
        argv += ["--rpc", ",".join(rpc), "--device", devices, "--split-mode", p["split_mode"]]
        argv += ["--n-gpu-layers", "all", "--fit", "off"]
        if p["tensor_split"]:
            argv += ["--tensor-split", ",".join(f"{x:g}" for x in p["tensor_split"])]
    else:
        argv += ["--device", "none", "--n-gpu-layers", "0"]
    return argv + list(p["extra_args"])


class Bench:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.systemctl = None  # only mode=run needs systemd

    def stop_units(self):
        for unit in (SERVER_UNIT, PROXY_UNIT):
            self.systemctl.run("stop", unit)
            self.systemctl.run("reset-failed", unit)

    def start_unit(self, unit, argv):
        rc, out, err = self.module.run_command(["systemd-run", "--unit", unit, "--collect", "--quiet", "--"] + argv)
        if rc != 0:
            self.module.fail_json(msg=f"systemd-run {unit} failed: {err or out}", argv=argv)

    def alive(self):
        return self.systemctl.run("is-active", "--quiet", SERVER_UNIT)[0] == 0

    def peak_rss(self):
        _rc, out, _err = self.systemctl.run("show", "-p", "MainPID", "--value", SERVER_UNIT)
        try:
            with open(f"/proc/{int(out.strip())}/status", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            pass
        return None

    def proxied(self):
        rpc = list(self.params["rpc"])
        if self.params["proxy_delay_ms"] <= 0 or not rpc:
            return rpc
        os.makedirs(self.params["state_dir"], exist_ok=True)
        script = os.path.join(self.params["state_dir"], "delay_proxy.py")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(inspect.getsource(_delay_proxy))
        routes, local = [], []
        for i, target in enumerate(rpc):
            port = self.params["proxy_base_port"] + i
            routes.append(f"{port}={target}")
            local.append(f"127.0.0.1:{port}")
        self.start_unit(
            PROXY_UNIT, ["/usr/bin/python3", script, "--delay-ms", str(self.params["proxy_delay_ms"])] + routes
        )
        time.sleep(1.0)
        return local

    def run(self):
        p = self.params
        for key in ("server_bin", "model"):
            if not p[key]:
                self.module.fail_json(msg=f"mode=run needs {key}")
        if self.module.check_mode:
            self.module.exit_json(changed=True, result={"name": p["name"]})
        self.systemctl = Systemctl(self.module, required=True)
        self.stop_units()
        base = f"http://127.0.0.1:{p['port']}"
        result = {"name": p["name"], "rpc": list(p["rpc"]), "split_mode": p["split_mode"] if p["rpc"] else "none"}
        result.update(threads=p["threads"], parallel=p["parallel"], proxy_delay_ms=p["proxy_delay_ms"])
        try:
            rpc = self.proxied()
            argv = server_argv(p, rpc)
            result["argv"] = argv
            self.start_unit(SERVER_UNIT, argv)
            try:
                result["load_seconds"] = wait_healthy(base, p["load_timeout"], self.alive)
            except (TimeoutError, RuntimeError) as exc:
                rc, log, _err = self.module.run_command(["journalctl", "-u", SERVER_UNIT, "-n", "30", "--no-pager"])
                self.module.fail_json(msg=f"{p['name']}: {exc}", log=log, argv=argv)
            completion(base, 8, 4)  # warm-up (first-token allocations)
            runs = []
            for prompt in p["prompt_tokens"]:
                for predict_n in p["predict_tokens"]:
                    for rep in range(p["repeats"]):
                        run = completion(base, prompt, predict_n)
                        run.update(prompt_tokens=prompt, predict_tokens=predict_n, repeat=rep)
                        runs.append(run)
            result["runs"] = runs
            result["parallel_runs"] = []
            if p["parallel"] > 1:
                for clients in sorted({1, p["parallel"]}):
                    result["parallel_runs"].append(
                        parallel_completions(base, clients, min(p["prompt_tokens"]), max(p["predict_tokens"]))
                    )
            result["server_peak_rss_bytes"] = self.peak_rss()
        except RuntimeError as exc:
            self.module.fail_json(msg=f"{p['name']}: {exc}", result=result)
        finally:
            self.stop_units()
        gen = summarize(r["predicted_per_second"] for r in result["runs"])
        result["summary"] = {
            "load_seconds": result["load_seconds"],
            "prompt_tps": summarize(r["prompt_per_second"] for r in result["runs"])["median"],
            "generation_tps": gen["median"],
            "generation_spread": gen["spread"],
            "generation_min": gen["min"],
            "generation_max": gen["max"],
        }
        if result["parallel_runs"]:
            result["summary"]["aggregate_tps"] = max(r["aggregate_per_second"] for r in result["parallel_runs"])
        self.module.exit_json(changed=True, result=result)

    def profile(self):
        if not self.params["model"]:
            self.module.fail_json(msg="mode=profile needs model")
        name = os.path.basename(self.params["model"])
        match = SPLIT_NAME.match(name)
        try:
            tensors = read_model(self.params["model"])["tensors"]
            result = profile(tensors, match.group("prefix") if match else name.removesuffix(".gguf"))
        except (GGUFError, OSError, ValueError) as exc:
            self.module.fail_json(msg=f"cannot profile {self.params['model']}: {exc}")
        self.module.exit_json(changed=False, profile=result)

    def add_predictions(self, results, links):
        p = self.params
        prof = p["model_profile"]
        read_bytes = prof.get("read_per_token_bytes") or p["model_bytes"]
        by_name = {r["name"]: r for r in results}
        calib = by_name.get(p["calibration"])
        if not read_bytes or not calib or not calib.get("summary", {}).get("generation_tps"):
            return
        bandwidth = effective_bandwidth(read_bytes, calib["summary"]["generation_tps"])
        hosts = {endpoint: host for host, endpoint in p["endpoints"].items()}
        throughput = {}
        for link in links:  # the first raw TCP figure from each host (to the coordinator)
            if link.get("kind") == "raw TCP":
                throughput.setdefault(link.get("from"), float(link.get("mb_per_s") or 0) * 1e6)
        layers = p["layers"] or prof.get("n_layer") or 1
        for r in results:
            workers = r.get("rpc") or []
            rtt = 2 * float(r.get("proxy_delay_ms") or 0) / 1000.0 + float(r.get("link_rtt") or 0)
            if workers:
                share = read_bytes / len(workers)
                nodes = [{"name": w, "bytes": share, "bandwidth": bandwidth, "rtt": rtt} for w in workers]
                for node in nodes:
                    node["throughput"] = throughput.get(hosts.get(node["name"]))
            else:
                nodes = [{"name": "single", "bytes": read_bytes, "bandwidth": bandwidth}]
            shared = bandwidth if p["shared_bandwidth_nodes"] else 0.0
            model = predict(
                nodes,
                r.get("split_mode", "layer"),
                layers=layers,
                shared_bandwidth=shared,
                # The hidden state goes to each worker and comes back; the logits come from the output layer's.
                activation_bytes=2 * prof.get("activation_bytes", 0),
                logits_bytes=prof.get("logits_bytes", 0),
            )
            s = r.setdefault("summary", {})
            s["predicted_tps"] = model["tokens_per_second"]
            s["predicted_compute_s"] = model["compute_seconds"]
            s["predicted_network_s"] = model["network_seconds"]
            s["predicted_over_measured"] = (
                model["tokens_per_second"] / s["generation_tps"] if s.get("generation_tps") else None
            )

    def report(self):
        p = self.params
        if not p["results_dir"]:
            self.module.fail_json(msg="mode=report needs results_dir")
        results = [dict(r) for r in p["results"]]
        links = [dict(link) for link in p["links"]]
        self.add_predictions(results, links)
        models = (p["model_profile"], reference_profile()) if p["model_profile"] else None
        ratios = ratio_rows(
            results + [{"name": x["name"], "summary": {"mb_per_s": x["mb_per_s"]}} for x in links], p["ratios"]
        )
        rerun = None
        if p["rerun"].get("site"):
            rerun = rerun_summary(
                p["rerun"]["site"],
                p["rerun"].get("floor"),
                p["rerun"].get("budget_seconds", 45.0),
                p["rerun"].get("floor_one_host"),
            )
            ratios.append(
                {
                    "name": f"site.yml no-op rerun, seconds (changed {rerun['changed']})",
                    "value": rerun["seconds"],
                    "target": rerun["budget_seconds"],
                    "compare": "le",
                    "met": rerun["met"],
                }
            )
        paths = [os.path.join(p["results_dir"], n) for n in ("results.json", "report.md", "chart.png")]
        report = {
            "files": paths,
            "ratios": ratios,
            "results": results,
            "links": links,
            "rerun": rerun,
            "models": models,
        }
        if self.module.check_mode:
            self.module.exit_json(changed=True, report=report)
        os.makedirs(p["results_dir"], exist_ok=True)
        with open(paths[0], "w", encoding="utf-8") as handle:
            json.dump(
                {"meta": p["meta"], **{key: value for key, value in report.items() if key != "files"}},
                handle,
                indent=2,
                sort_keys=True,
            )
        markdown = markdown_report(results, ratios, p["meta"], links, rerun, models)
        with open(paths[1], "w", encoding="utf-8") as handle:
            handle.write(markdown)
        warnings = []
        if not write_chart(results, paths[2]):
            paths.pop()
            warnings.append("matplotlib is not installed on the controller: no chart.png")
        for w in warnings:
            self.module.warn(w)
        self.module.exit_json(changed=True, report=report, markdown=markdown)


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["run", "profile", "report"], "default": "run"},
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
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "port": {"type": "int", "default": 8090},
            "prompt_tokens": {"type": "list", "elements": "int", "default": [32, 128], "no_log": False},
            "predict_tokens": {"type": "list", "elements": "int", "default": [16, 64], "no_log": False},
            "repeats": {"type": "int", "default": 3},
            "proxy_delay_ms": {"type": "float", "default": 0},
            "proxy_base_port": {"type": "int", "default": 16000},
            "load_timeout": {"type": "int", "default": 1800},
            "state_dir": {"type": "path", "default": "/run/llamarpc/bench"},
            "results": {"type": "list", "elements": "dict", "default": []},
            "ratios": {"type": "list", "elements": "dict", "default": []},
            "links": {"type": "list", "elements": "dict", "default": []},
            "rerun": {"type": "dict", "default": {}},
            "model_bytes": {"type": "int", "default": 0},
            "model_profile": {"type": "dict", "default": {}},
            "endpoints": {"type": "dict", "default": {}},
            "calibration": {"type": "str", "default": "single"},
            "layers": {"type": "int", "default": 0},
            "shared_bandwidth_nodes": {"type": "int", "default": 0},
            "meta": {"type": "dict", "default": {}},
            "results_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    bench = Bench(module)
    if module.params["mode"] == "report":
        bench.report()
    elif module.params["mode"] == "profile":
        bench.profile()
    else:
        bench.run()


if __name__ == "__main__":
    main()
