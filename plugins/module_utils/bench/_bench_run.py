# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``llama_benchmark``: run one configuration, profile the model, write the report.

The measurements, statistics and report text are in ``_bench``; this file starts and stops the transient units
and writes the files, through the ``AnsibleModule`` it is given (``run_command``, ``fail_json``, ``warn``).
"""

from __future__ import annotations

import inspect
import json
import os
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.bench import _bench_spec
from ansible_collections.llamarpc.cluster.plugins.module_utils.bench._bench import (
    alternated_runs,
    bytes_between,
    completion,
    completion_summary,
    hold_between,
    interface_bytes,
    markdown_report,
    merge_repeats,
    output_row,
    parallel_completions,
    ratio_rows,
    rerun_summary,
    same_output,
    sshfs_bytes,
    tbf_burst,
    wait_healthy,
    write_chart,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.model._gguf_header import (
    SPLIT_NAME,
    GGUFError,
    read_model,
    split_paths,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.model._model_profile import profile, reference_profile
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._cluster_plan import (
    LOCAL_ARGS,
    PlanError,
    assign_layers,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._cluster_plan import summarize as model_summary
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._perf_model import (
    effective_bandwidth,
    head_share,
    predict,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _delay_proxy, _rpc_protocol, _rpc_wire
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._sshfs import parse_mountinfo
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import Systemctl

SERVER_UNIT = "llamarpc-bench-server"
#: The second llama-server of a paired run (option ``pair``), on the next port.
PAIR_UNIT = "llamarpc-bench-server-pair"
PROXY_UNIT = "llamarpc-bench-proxy"
#: A ggml-rpc-server on the coordinator's host for the run (option ``local_rpc_server``), on loopback.
LOCAL_RPC_UNIT = "llamarpc-bench-rpc-local"
NET_DEV = "/proc/net/dev"
MOUNTINFO = "/proc/self/mountinfo"


def network_counters(path=None):
    """This host's bytes received and sent so far on its links (every interface but loopback)."""
    with open(path or NET_DEV, encoding="ascii") as handle:
        return interface_bytes(handle.read())


def model_sshfs_bytes(model, mountinfo=None):
    """(bytes of the model's files, of them on SSHFS mounts): a shard's link into a mount counts as on the mount."""
    sizes = {os.path.realpath(path): os.path.getsize(path) for path in split_paths(model)}
    with open(mountinfo or MOUNTINFO, encoding="utf-8") as handle:
        mounts = [e["mount_point"] for e in parse_mountinfo(handle.read()) if e["fstype"] == "fuse.sshfs"]
    return sum(sizes.values()), sshfs_bytes(sizes, mounts)


def drop_cached_pages(model):
    """Ask the kernel to forget this host's cached pages of every file of the model (posix_fadvise DONTNEED), so that
    a load reads a shard on an SSHFS mount over the link again, as a coordinator that cannot keep the shards in its
    page cache does."""
    for path in split_paths(model):
        with open(path, "rb", buffering=0) as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def server_argv(p, rpc):
    """llama-server's command line for one configuration."""
    argv = [p["server_bin"], "--model", p["model"], "--host", "127.0.0.1", "--port", str(p["port"])]
    argv += ["--threads", str(p["threads"]), "--parallel", str(p["parallel"])]
    argv += ["--ctx-size", str(p["ctx_size"] * p["parallel"]), "--load-mode", p["load_mode"], "--no-webui"]
    argv += ["--cache-ram", str(p["cache_ram"])]  # as the coordinator's unit runs it (llama_coordinator_cache_ram)
    if rpc:
        devices = ",".join(f"RPC{i}" for i in range(len(rpc)))
        argv += ["--rpc", ",".join(rpc), "--device", devices, "--split-mode", p["split_mode"]]
        argv += ["--n-gpu-layers", "all", "--fit", "off"]
        if p["tensor_split"]:
            argv += ["--tensor-split", ",".join(f"{x:g}" for x in p["tensor_split"])]
    else:  # the single process: what a local plan (fit first) runs too
        argv += list(LOCAL_ARGS)
    return argv + list(p["extra_args"]) + list(p.get("spec_args") or ())


def speculation(p):
    """A configuration's speculation as its result records it and llama-server's arguments for it: (``{types,
    settings, draft_path, draft_name, draft_read_bytes}`` or None, words). The draft's GGUF header gives the planner
    its summary and the performance model the bytes it reads per drafted token. Raises ValueError."""
    spec = p.get("speculative") or {}
    if not spec.get("types"):
        return None, []
    record = {key: spec.get(key) for key in ("types", "settings", "draft_path", "draft_name")}
    summary = None
    if spec.get("draft_path"):
        try:
            tensors = read_model(spec["draft_path"])
            summary = model_summary(tensors)
            record["draft_read_bytes"] = profile(tensors["tensors"], "draft")["read_per_token_bytes"]
        except (GGUFError, OSError) as exc:
            raise ValueError(f"cannot read the draft model {spec['draft_path']}: {exc}") from exc
    try:
        return record, _bench_spec.server_args(spec, summary)
    except PlanError as exc:
        raise ValueError(f"speculative settings: {exc}") from exc


def write_proxy(directory):
    """The delaying proxy as a script in ``directory`` (``delay_proxy.py``) with the modules it imports beside it
    (its ``--rpc-stats`` reads the RPC stream with ``_rpc_wire``, which uses ``_rpc_protocol``); returns its path."""
    os.makedirs(directory, exist_ok=True)
    files = {"delay_proxy.py": _delay_proxy, "_rpc_wire.py": _rpc_wire, "_rpc_protocol.py": _rpc_protocol}
    for name, module in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as handle:
            handle.write(inspect.getsource(module))
    return os.path.join(directory, "delay_proxy.py")


def measure(bases, p, results, pair_id=""):
    """A warm-up on each server, then every (prompt, output) pair ``repeats`` times, alternating request by request
    between the servers when there are two (``alternated_runs``), and, with slots, several clients at once on the
    first."""
    for base in bases:
        completion(base, 8, 4)  # warm-up (first-token allocations)
    prompts = [p["prompt_text"]] if p.get("prompt_text") else p["prompt_tokens"]
    runs = alternated_runs(bases, prompts, p["predict_tokens"], p["repeats"], pair_id)
    for result, own in zip(results, runs, strict=True):
        result["runs"] = own
        result["parallel_runs"] = []
    if p["parallel"] > 1:
        for clients in sorted({1, p["parallel"]}):
            results[0]["parallel_runs"].append(
                parallel_completions(bases[0], clients, min(p["prompt_tokens"]), max(p["predict_tokens"]))
            )


def new_result(p):
    """A configuration's result before its load: name, workers, split and settings."""
    result = {"name": p["name"], "rpc": list(p["rpc"]), "split_mode": p["split_mode"] if p["rpc"] else "none"}
    result.update(threads=p["threads"], parallel=p["parallel"], proxy_delay_ms=p["proxy_delay_ms"])
    if p.get("prompt_name"):
        result["prompt_name"] = p["prompt_name"]
    result["tensor_split"] = list(p["tensor_split"])
    return result


def run_summary(result):
    """A configuration's ``summary``: medians and spread of its runs."""
    summary = {
        "load_seconds": result["load_seconds"],
        **completion_summary(result["runs"]),
        # What this host's links sent during the load (the weights that crossed them to the workers) and received
        # (the shards read over SSHFS from other hosts).
        "load_sent_bytes": (result.get("load_network") or {}).get("sent_bytes"),
        "load_received_bytes": (result.get("load_network") or {}).get("received_bytes"),
    }
    if result["parallel_runs"]:
        summary["aggregate_tps"] = max(r["aggregate_per_second"] for r in result["parallel_runs"])
    return summary


def worker_shares(workers, split_mode, tensor_split, layers):
    """(worker, share of the weights) of the workers that hold weights, in their order. In the layer split, llama.cpp
    gives the ``layers + 1`` slots (the last one the output layer) to the devices by their ``tensor_split`` (even when
    empty) as ``_cluster_plan.assign_layers`` does: with more workers than slots, some get none, and a worker with no
    layer takes no part in a token (no round trip). In the tensor split every worker holds an even slice."""
    if split_mode != "layer":
        return [(w, 1.0 / len(workers)) for w in workers]
    devices = assign_layers(int(layers), list(tensor_split or ()) or [1.0] * len(workers))
    return [(w, devices.count(i) / len(devices)) for i, w in enumerate(workers) if i in devices]


def predictions(p, results, links, burst=0):
    """Add the performance model's prediction to each result's summary (calibrated on ``p['calibration']``);
    ``burst``: the bytes the coordinator's shaped link passes at once (``tbf_burst``)."""
    prof = p["model_profile"]
    read_bytes = prof.get("read_per_token_bytes") or p["model_bytes"]
    calib = {r["name"]: r for r in results}.get(p["calibration"])
    if not read_bytes or not calib or not calib.get("summary", {}).get("generation_tps"):
        return
    bandwidth = effective_bandwidth(read_bytes, calib["summary"]["generation_tps"])
    hosts = {endpoint: host for host, endpoint in p["endpoints"].items()}
    throughput = {}
    for link in links:  # the first raw TCP figure from each host (to the coordinator)
        if link.get("kind") == "raw TCP":
            throughput.setdefault(link.get("from"), float(link.get("mb_per_s") or 0) * 1e6)
    layers = p["layers"] or prof.get("n_layer") or 1
    staged = []
    for r in results:
        workers = r.get("rpc") or []
        # The emulated round trip: twice what the proxy really held each chunk while the completions ran (its timer
        # may wake late on a busy machine), else twice the delay asked.
        one_way_ms = (r.get("proxy_hold") or {}).get("mean_ms") or r.get("proxy_delay_ms") or 0
        rtt = 2 * float(one_way_ms) / 1000.0 + float(r.get("link_rtt") or 0)
        if workers:
            nodes = [
                {"name": w, "bytes": read_bytes * share, "bandwidth": bandwidth, "rtt": rtt}
                for w, share in worker_shares(workers, r.get("split_mode", "layer"), r.get("tensor_split"), layers)
            ]
            # Through the delaying proxy, a link is no faster than the proxy relays: bytes per second of its CPU.
            relay = (r.get("proxy_hold") or {}).get("relay_bps")
            for node in nodes:
                link = throughput.get(hosts.get(node["name"]))
                node["throughput"] = min((x for x in (link, relay) if x), default=link)
                node["burst"] = burst
        else:
            nodes = [{"name": "single", "bytes": read_bytes, "bandwidth": bandwidth}]
        terms = {
            "shared_bandwidth": bandwidth if p["shared_bandwidth_nodes"] else 0.0,
            # The hidden state goes to each worker and comes back; the logits come from the output layer's.
            "activation_bytes": 2 * prof.get("activation_bytes", 0),
            "logits_bytes": prof.get("logits_bytes", 0),
        }
        staged.append((r, nodes, terms, predict(nodes, r.get("split_mode", "layer"), layers=layers, **terms)))
    # Speculation: per pass, from the drafted and accepted tokens it counted (the draft on the coordinator's CPU),
    # each drafted token adding the slope fitted on the n-gram configurations at the least round trip.
    share = head_share(prof.get("head_bytes", 0), read_bytes)
    slope, fitted = _bench_spec.calibrated_slope(staged, bandwidth, share)
    for r, nodes, terms, plain in staged:
        model = _bench_spec.predict(nodes, r, bandwidth, slope, **terms) or plain
        s = r.setdefault("summary", {})
        if r.get("speculative"):
            s["verify_slope"] = slope
            s["slope_fitted_here"] = r["name"] in fitted
            s["head_share"] = share
        s["predicted_tps"] = model["tokens_per_second"]
        s["predicted_compute_s"] = model["compute_seconds"]
        s["predicted_network_s"] = model["network_seconds"]
        s["predicted_over_measured"] = (
            model["tokens_per_second"] / s["generation_tps"] if s.get("generation_tps") else None
        )


def rerun_row(rerun):
    """The ratios table's row for a no-op rerun."""
    return {
        "name": f"site.yml no-op rerun, seconds (changed {rerun['changed']})",
        "value": rerun["seconds"],
        "target": rerun["budget_seconds"],
        "compare": "le",
        "met": rerun["met"],
    }


class Bench:
    """One call of the module: ``result()`` is what it returns (or it fails through ``module``)."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.systemctl = None  # only mode=run needs systemd

    def stop_units(self):
        for unit in (SERVER_UNIT, PAIR_UNIT, PROXY_UNIT, LOCAL_RPC_UNIT):
            self.systemctl.run("stop", unit)
            self.systemctl.run("reset-failed", unit)

    def start_unit(self, unit, argv):
        rc, out, err = self.module.run_command(["systemd-run", "--unit", unit, "--collect", "--quiet", "--"] + argv)
        if rc != 0:
            self.module.fail_json(msg=f"systemd-run {unit} failed: {err or out}", argv=argv)

    def alive(self, unit):
        return self.systemctl.run("is-active", "--quiet", unit)[0] == 0

    def peak_rss(self, unit):
        _rc, out, _err = self.systemctl.run("show", "-p", "MainPID", "--value", unit)
        try:
            with open(f"/proc/{int(out.strip())}/status", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            pass
        return None

    def proxied(self, servers):
        """Each server's RPC addresses (``servers``: their parameters, the first this configuration's): with a delay,
        every worker of the first, and of a pair with ``proxied``, through one delaying proxy (one route each)."""
        addresses = [list(q["rpc"]) for q in servers]
        through = [i for i, q in enumerate(servers) if i == 0 or q.get("proxied")]
        if self.params["proxy_delay_ms"] <= 0 or not any(addresses[i] for i in through):
            return addresses
        script = write_proxy(self.params["state_dir"])
        routes, port = [], self.params["proxy_base_port"]
        for i in through:
            for n, target in enumerate(addresses[i]):
                routes.append(f"{port}={target}")
                addresses[i][n] = f"127.0.0.1:{port}"
                port += 1
        argv = ["/usr/bin/python3", script, "--delay-ms", str(self.params["proxy_delay_ms"])]
        self.start_unit(PROXY_UNIT, argv + ["--hold-file", self.hold_path()] + routes)
        time.sleep(1.0)
        return addresses

    def start_local_rpc(self):
        """The ggml-rpc-server of option ``local_rpc_server`` on loopback, for the run (no tensor cache)."""
        local = self.params["local_rpc_server"]
        if not local:
            return
        argv = [local["bin"], "-H", "127.0.0.1", "-p", str(local["port"]), "-t", str(self.params["threads"])]
        self.start_unit(LOCAL_RPC_UNIT, argv)
        time.sleep(1.0)

    def hold_path(self):
        return os.path.join(self.params["state_dir"], "proxy-hold.json")

    def read_hold(self):
        """The proxy's hold tally once it has written what crossed it so far (None without a proxy)."""
        if self.params["proxy_delay_ms"] <= 0 or not self.params["rpc"]:
            return None
        time.sleep(2 * _delay_proxy.HOLD_FILE_SECONDS)
        try:
            with open(self.hold_path(), encoding="ascii") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    def load(self, base, argv, unit, name):
        """Start llama-server as ``unit`` (configuration ``name``) and wait for its model load: the seconds it took."""
        self.start_unit(unit, argv)
        try:
            return wait_healthy(base, self.params["load_timeout"], lambda: self.alive(unit))
        except (TimeoutError, RuntimeError) as exc:
            _rc, log, _err = self.module.run_command(["journalctl", "-u", unit, "-n", "30", "--no-pager"])
            self.module.fail_json(msg=f"{name}: {exc}", log=log, argv=argv)

    def pair_params(self):
        """The second server's parameters (option ``pair``): this configuration's, with the pair's name, workers,
        split and the next port; None without a pair. It is never proxied, and shares no worker with the first (a
        ggml-rpc-server serves one client at a time)."""
        p, pair = self.params, self.params["pair"]
        if not pair:
            return None
        shared = set(pair["rpc"]) & set(p["rpc"])
        if shared:
            self.module.fail_json(msg=f"{p['name']} and its pair {pair['name']} share workers {sorted(shared)}")
        if p["parallel"] > 1:
            self.module.fail_json(msg=f"{p['name']}: a pair runs one client at a time (parallel 1)")
        delay = p["proxy_delay_ms"] if pair["proxied"] else 0
        return {**p, **pair, "port": p["port"] + 1, "proxy_delay_ms": delay}

    def run(self):
        p = self.params
        for key in ("server_bin", "model"):
            if not p[key]:
                self.module.fail_json(msg=f"mode=run needs {key}")
        pair = self.pair_params()
        servers = [(p, SERVER_UNIT)] + ([(pair, PAIR_UNIT)] if pair else [])
        results = [new_result(q) for q, _unit in servers]
        for (q, _unit), result in zip(servers, results, strict=True):
            try:
                result["speculative"], q["spec_args"] = speculation(q)
            except ValueError as exc:
                self.module.fail_json(msg=f"{q['name']}: {exc}")
        if self.module.check_mode:
            return {"changed": True, "result": {"name": p["name"]}}
        self.systemctl = Systemctl(self.module, required=True)
        self.stop_units()
        bases = [f"http://127.0.0.1:{q['port']}" for q, _unit in servers]
        try:
            self.start_local_rpc()
            addresses = self.proxied([q for q, _unit in servers])
            for (q, unit), result, base, rpc in zip(servers, results, bases, addresses, strict=True):
                argv = server_argv(q, rpc)
                result["argv"] = argv
                if q["drop_cache"]:
                    drop_cached_pages(q["model"])
                result["dropped_cache"] = bool(q["drop_cache"])
                before = network_counters()
                result["load_seconds"] = self.load(base, argv, unit, q["name"])
                result["load_network"] = bytes_between(before, network_counters())
            held = self.read_hold()
            measure(bases, p, results, f"{p['name']}@{time.time():.3f}")
            results[0]["proxy_hold"] = hold_between(held, self.read_hold())
            if pair and pair["proxied"]:
                results[1]["proxy_hold"] = results[0]["proxy_hold"]
            for (_q, unit), result in zip(servers, results, strict=True):
                result["server_peak_rss_bytes"] = self.peak_rss(unit)
        except RuntimeError as exc:
            self.module.fail_json(msg=f"{p['name']}: {exc}", result=results[0])
        finally:
            self.stop_units()
        for result in results:
            result["summary"] = run_summary(result)
        answer = {"changed": True, "result": results[0]}
        if pair:
            results[0]["paired_with"], results[1]["paired_with"] = pair["name"], p["name"]
            if results[0]["speculative"] or results[1]["speculative"]:
                same = _bench_spec.same_as_pair(results[0]["runs"], results[1]["runs"])
                for result in results:
                    result["summary"]["same_output_as_pair"] = same
                    result["paired_with_speculation"] = True
            answer["pair_result"] = results[1]
        return answer

    def profile(self):
        if not self.params["model"]:
            self.module.fail_json(msg="mode=profile needs model")
        name = os.path.basename(self.params["model"])
        match = SPLIT_NAME.match(name)
        try:
            tensors = read_model(self.params["model"])["tensors"]
            result = profile(tensors, match.group("prefix") if match else name.removesuffix(".gguf"))
            result["file_bytes"], result["sshfs_bytes"] = model_sshfs_bytes(self.params["model"])
        except (GGUFError, OSError, ValueError) as exc:
            self.module.fail_json(msg=f"cannot profile {self.params['model']}: {exc}")
        return {"changed": False, "profile": result}

    def report(self):
        p = self.params
        if not p["results_dir"]:
            self.module.fail_json(msg="mode=report needs results_dir")
        results = merge_repeats([dict(r) for r in p["results"]])
        links = [dict(link) for link in p["links"]]
        burst = tbf_burst(p["link_qdiscs"])
        predictions(p, results, links, burst)
        verdicts = same_output(results, p["calibration"])
        for r in results:
            r["summary"] = {**r.get("summary", {}), "same_output_as_single": verdicts[r["name"]]}
        models = (p["model_profile"], reference_profile()) if p["model_profile"] else None
        ratios = ratio_rows(
            results + [{"name": x["name"], "summary": {"mb_per_s": x["mb_per_s"]}} for x in links],
            p["ratios"] + _bench_spec.ratio_specs(results),
        )
        ratios += _bench_spec.best_rows(ratios, p["spec_targets"], p["spec_target_rtt_ms"])
        ratios.append(output_row(verdicts, p["calibration"]))
        rerun = None
        if p["rerun"].get("site"):
            rerun = rerun_summary(
                p["rerun"]["site"],
                p["rerun"].get("floor"),
                p["rerun"].get("budget_seconds", 45.0),
                p["rerun"].get("floor_one_host"),
            )
            ratios.append(rerun_row(rerun))
        paths = [os.path.join(p["results_dir"], n) for n in ("results.json", "report.md", "chart.png")]
        report = {"files": paths, "ratios": ratios, "results": results, "links": links, "rerun": rerun}
        report["models"] = models
        report["paper"] = p["paper"] or None
        if self.module.check_mode:
            return {"changed": True, "report": report}
        return {"changed": True, "report": report, "markdown": self.write_report(report, paths, burst)}

    def write_report(self, report, paths, burst=0):
        """results.json, report.md and (with matplotlib) chart.png; drops the chart from ``paths`` without it. The
        meta gets ``link_burst_bytes``, the ``burst`` the predictions took."""
        meta = {**self.params["meta"], "link_burst_bytes": burst}
        os.makedirs(self.params["results_dir"], exist_ok=True)
        with open(paths[0], "w", encoding="utf-8") as handle:
            json.dump(
                {"meta": meta, **{key: value for key, value in report.items() if key != "files"}},
                handle,
                indent=2,
                sort_keys=True,
            )
        markdown = markdown_report(
            report["results"],
            report["ratios"],
            meta,
            report["links"],
            report["rerun"],
            report["models"],
            report["paper"],
        )
        with open(paths[1], "w", encoding="utf-8") as handle:
            handle.write(markdown)
        if not write_chart(report["results"], paths[2]):
            paths.pop()
            self.module.warn("matplotlib is not installed on the controller: no chart.png")
        return markdown


def run_module(module):
    """The module's result for its ``mode``; fails through ``module``."""
    if module.params["mode"] == "counters":
        try:
            return {"changed": False, "counters": network_counters()}
        except (OSError, ValueError, IndexError) as exc:
            module.fail_json(msg=f"cannot read {NET_DEV}: {exc}")
    bench = Bench(module)
    if module.params["mode"] == "report":
        return bench.report()
    if module.params["mode"] == "profile":
        return bench.profile()
    return bench.run()
