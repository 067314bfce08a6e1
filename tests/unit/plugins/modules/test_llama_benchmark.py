# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""llama_benchmark: the server command line, the report mode end to end (files, predictions), check mode."""

from __future__ import annotations

import json

import pytest
import tiny_gguf
import yaml

from ansible_collections.llamarpc.cluster.plugins.module_utils.bench import _bench_run
from ansible_collections.llamarpc.cluster.plugins.module_utils.bench._bench_run import run_summary, server_argv
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._perf_model import (
    RPC_CALL_SECONDS,
    RPC_COMPUTE_FACTOR,
)
from ansible_collections.llamarpc.cluster.plugins.modules import llama_benchmark as mod

RESULTS = [
    {"name": "single", "rpc": [], "split_mode": "none", "summary": {"generation_tps": 10.0, "load_seconds": 1.0}},
    {
        "name": "layer",
        "rpc": ["a:1", "b:1"],
        "split_mode": "layer",
        "proxy_delay_ms": 5,
        "summary": {"generation_tps": 8.0, "load_seconds": 3.0},
    },
]


def _params(**kw):
    base = {
        "server_bin": "/s",
        "model": "/m.gguf",
        "port": 8090,
        "threads": 2,
        "parallel": 1,
        "ctx_size": 256,
        "load_mode": "none",
        "split_mode": "tensor",
        "tensor_split": [],
        "cache_ram": 0,
        "extra_args": [],
    }
    base.update(kw)
    return base


def test_server_argv_single_and_distributed():
    single = server_argv(_params(), [])
    assert single[:3] == ["/s", "--model", "/m.gguf"]
    assert "--device" in single and single[single.index("--device") + 1] == "none"
    dist = server_argv(_params(tensor_split=[2.0, 1.0]), ["127.0.0.1:16000", "127.0.0.1:16001"])
    assert dist[dist.index("--rpc") + 1] == "127.0.0.1:16000,127.0.0.1:16001"
    assert dist[dist.index("--device") + 1] == "RPC0,RPC1"
    assert dist[dist.index("--split-mode") + 1] == "tensor"
    assert dist[dist.index("--tensor-split") + 1] == "2,1"
    for argv in (single, dist):  # no prompt cache, as the coordinator's unit runs by default
        assert argv[argv.index("--cache-ram") + 1] == "0"


def test_report_writes_json_markdown_and_predictions(run_module, tmp_path):
    out = run_module(
        mod,
        {
            "mode": "report",
            "results": RESULTS,
            "results_dir": str(tmp_path / "r"),
            "model_bytes": 1000,
            "ratios": [
                {
                    "name": "layer/single",
                    "metric": "generation_tps",
                    "numerator": "layer",
                    "denominator": "single",
                    "target": 0.95,
                }
            ],
        },
    )
    assert not out.failed, out.result
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    layer = data["results"][1]["summary"]
    # Calibrated on single (10 tok/s): 0.1 s compute, RPC_COMPUTE_FACTOR slower on workers; 2 workers x 1 round trip
    # (counted on the wire) x (10 ms + RPC_CALL_SECONDS).
    assert layer["predicted_tps"] == pytest.approx(1 / (0.1 * RPC_COMPUTE_FACTOR + 2 * (0.01 + RPC_CALL_SECONDS)))
    assert data["ratios"][0]["met"] is False
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "| layer/single | 0.800 | >= 0.95 | NO |" in markdown
    assert out.result["markdown"] == markdown  # what the module returns is the file it wrote


def test_check_mode_writes_nothing(run_module, tmp_path):
    out = run_module(mod, {"mode": "report", "results": RESULTS, "results_dir": str(tmp_path / "r")}, check_mode=True)
    assert out.result["changed"] and not (tmp_path / "r").exists()
    out = run_module(mod, {"mode": "run", "server_bin": "/s", "model": "/m"}, check_mode=True)
    assert out.result["changed"]
    out = run_module(mod, {"mode": "run"})
    assert out.failed and "server_bin" in out.result["msg"]


def test_a_pair_that_cannot_run_beside_its_configuration_fails_before_anything_starts(run_module):
    """A ggml-rpc-server serves one client at a time, and a pair alternates single requests: both refused in check
    mode already, before any unit is started."""
    run = {"mode": "run", "server_bin": "/s", "model": "/m", "name": "A", "rpc": ["10.0.0.2:50052"]}
    out = run_module(mod, {**run, "pair": {"name": "B", "rpc": ["10.0.0.3:50052", "10.0.0.2:50052"]}}, check_mode=True)
    assert out.failed and out.result["msg"] == "A and its pair B share workers ['10.0.0.2:50052']"
    out = run_module(mod, {**run, "parallel": 4, "pair": {"name": "B"}}, check_mode=True)
    assert out.failed and "parallel 1" in out.result["msg"]
    out = run_module(mod, {**run, "pair": {"name": "B", "rpc": ["10.0.0.3:50052"]}}, check_mode=True)
    assert not out.failed and out.result["changed"]


def test_report_lists_links_and_ratios_between_them(run_module, tmp_path):
    links = [
        {"name": "sshfs node2", "kind": "SSHFS", "from": "node2", "to": "node1", "bytes": 8_000_000, "mb_per_s": 9.0},
        {
            "name": "tcp-file node2",
            "kind": "raw TCP",
            "from": "node2",
            "to": "node1",
            "bytes": 8_000_000,
            "mb_per_s": 12.0,
        },
    ]
    ratio = {"name": "sshfs/tcp", "metric": "mb_per_s", "numerator": "sshfs node2", "denominator": "tcp-file node2"}
    out = run_module(
        mod,
        {
            "mode": "report",
            "results": RESULTS,
            "links": links,
            "results_dir": str(tmp_path / "r"),
            "ratios": [{**ratio, "target": 0.8}],
        },
    )
    assert not out.failed, out.result
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    assert data["ratios"][0]["value"] == 0.75 and data["ratios"][0]["met"] is False
    assert data["links"] == links
    report = (tmp_path / "r" / "report.md").read_text()
    assert "| sshfs node2 | SSHFS | node2 -> node1 | 8.0 | 9.00 |" in report
    assert "| sshfs/tcp | 0.750 | >= 0.80 | NO |" in report


def test_profile_mode_reads_the_header_of_every_shard(run_module, tmp_path):
    made = tiny_gguf.generate(tmp_path, preset="tiny", shards=3)
    out = run_module(mod, {"mode": "profile", "model": made["files"][0]["path"]})
    assert not out.failed and out.result["changed"] is False
    got = out.result["profile"]
    assert got["name"] == "llamarpc-tiny-seed0"
    assert got["tensor_count"] == tiny_gguf.PRESETS["tiny"].tensor_count  # all three shards
    assert (got["n_layer"], got["logits_bytes"]) == (8, 1024 * 4)
    (tmp_path / made["files"][2]["name"]).unlink()
    out = run_module(mod, {"mode": "profile", "model": made["files"][0]["path"]})
    assert out.failed and "missing shard" in out.result["msg"]


def test_report_predicts_the_logits_over_the_output_workers_link_and_compares_with_32b(run_module, tmp_path):
    # A Gemma-sized vocabulary: 1 MiB of logits per token; node2's link 12.5 MB/s, node1 is the coordinator itself.
    model = {"name": "gemma", "read_per_token_bytes": 250_000_000, "n_layer": 18, "logits_bytes": 1 << 20,
             "activation_bytes": 2560, "weight_bytes": 250_000_000, "embedding_bytes": 178_000_000,
             "embedding_share": 0.712, "tied_output": True, "small_tensors": 235, "tensor_count": 236,
             "small_bytes": 72_000_000, "small_share": 0.288, "offloaded_bytes": 250_000_000,
             "warm_load_bytes": 72_000_000, "warm_load_share": 0.288}  # fmt: skip
    results = [
        RESULTS[0],
        {"name": "far", "rpc": ["10.0.0.2:50052"], "split_mode": "layer", "summary": {"generation_tps": 5.0}},
        {"name": "near", "rpc": ["10.0.0.1:50052"], "split_mode": "layer", "summary": {"generation_tps": 9.0}},
    ]
    links = [{"name": "tcp node2", "kind": "raw TCP", "from": "node2", "to": "node1", "mb_per_s": 12.5}]
    out = run_module(
        mod,
        {
            "mode": "report",
            "results": results,
            "links": links,
            "model_profile": model,
            "endpoints": {"node1": "10.0.0.1:50052", "node2": "10.0.0.2:50052"},
            "results_dir": str(tmp_path / "r"),
        },
    )
    assert not out.failed, out.result
    by_name = {r["name"]: r["summary"] for r in json.loads((tmp_path / "r" / "results.json").read_text())["results"]}
    # Calibrated on single: 0.1 s per token. node2's link adds the logits (and twice the hidden state) at 12.5 MB/s.
    # Either worker, loopback included, reads at RPC_COMPUTE_FACTOR (1.0) and pays one round trip per token.
    rpc = 0.1 * RPC_COMPUTE_FACTOR + RPC_CALL_SECONDS
    far = rpc + ((1 << 20) + 2 * 2560) / 12.5e6
    assert by_name["far"]["predicted_tps"] == pytest.approx(1 / far)
    assert by_name["near"]["predicted_tps"] == pytest.approx(1 / rpc)
    assert by_name["near"]["predicted_tps"] < 10.0  # its round trip still costs, loopback or not
    report = (tmp_path / "r" / "report.md").read_text()
    assert "## The model's proportions against Qwen2.5-32B-Instruct Q4_K_M" in report
    assert "| token embedding (share of the weights) | 178.0 MB (71.2%) | 437.9 MB (2.2%) |" in report


def test_report_adds_the_rerun_row_and_section(run_module, tmp_path):
    site = {"seconds": 30.0, "changed": 0, "tasks": 12, "kinds": [], "plays": [], "roles": [], "slowest": []}
    out = run_module(
        mod, {"mode": "report", "results": RESULTS, "rerun": {"site": site}, "results_dir": str(tmp_path / "r")}
    )
    assert not out.failed, out.result
    row = out.result["report"]["ratios"][-1]
    assert row == {
        "name": "site.yml no-op rerun, seconds (changed 0)",
        "value": 30.0,
        "target": 45.0,
        "compare": "le",
        "met": True,
    }
    assert "| site.yml no-op rerun, seconds (changed 0) | 30.000 | <= 45.00 | yes |" in out.result["markdown"]
    assert "## site.yml no-op rerun: 30.0 s, changed 0, 12 tasks (budget 45 s: met)" in out.result["markdown"]


def test_profile_mode_counts_the_shards_behind_an_sshfs_mount(run_module, tmp_path, monkeypatch):
    """A shard linked into an SSHFS mount counts as read over the link; one on the local disk does not (the mount's
    directory is an ordinary directory here, mountinfo names it fuse.sshfs)."""
    made = tiny_gguf.generate(tmp_path / "model", preset="tiny", shards=3)
    mount = tmp_path / "mnt" / "node3"
    mount.mkdir(parents=True)
    far = made["files"][2]
    (tmp_path / "model" / far["name"]).rename(mount / far["name"])
    (tmp_path / "model" / far["name"]).symlink_to(mount / far["name"])
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        f"90 22 0:50 / {mount} ro,nosuid,nodev shared:70 - fuse.sshfs llamarpc-shards@10.0.0.3:/shards ro,user_id=0\n"
        f"91 22 0:51 / {tmp_path / 'mnt' / 'node'} ro shared:71 - fuse.sshfs x@10.0.0.4:/shards ro\n"
    )
    monkeypatch.setattr(_bench_run, "MOUNTINFO", str(mountinfo))
    out = run_module(mod, {"mode": "profile", "model": made["files"][0]["path"]})
    assert not out.failed, out.result.get("msg")
    sizes = [f["size"] for f in made["files"]]
    assert (out.result["profile"]["file_bytes"], out.result["profile"]["sshfs_bytes"]) == (sum(sizes), sizes[2])


def test_drop_cache_forgets_the_cached_pages_of_every_shard_before_the_load(tmp_path, monkeypatch):
    made = tiny_gguf.generate(tmp_path, preset="tiny", shards=2)
    told = []
    monkeypatch.setattr(
        _bench_run.os, "posix_fadvise", lambda fd, offset, length, advice: told.append((fd, offset, length, advice))
    )
    _bench_run.drop_cached_pages(made["files"][0]["path"])
    assert [(offset, length, advice) for _fd, offset, length, advice in told] == [
        (0, 0, _bench_run.os.POSIX_FADV_DONTNEED)
    ] * 2


def test_run_summary_takes_medians_spread_and_the_best_aggregate():
    runs = [{"predicted_per_second": v, "prompt_per_second": 2 * v} for v in (8.0, 10.0, 12.0)]
    parallel = [{"aggregate_per_second": 9.0}, {"aggregate_per_second": 15.0}]
    summary = run_summary({"load_seconds": 4.0, "runs": runs, "parallel_runs": parallel})
    assert summary == {
        "load_seconds": 4.0,
        "prompt_tps": 20.0,
        "generation_tps": 10.0,
        "generation_spread": 0.4,
        "generation_min": 8.0,
        "generation_max": 12.0,
        "load_sent_bytes": None,  # no count of the load's bytes
        "load_received_bytes": None,
        "aggregate_tps": 15.0,
    }
    assert "aggregate_tps" not in run_summary({"load_seconds": 4.0, "runs": runs, "parallel_runs": []})
    network = {"sent_bytes": 7, "received_bytes": 11}
    counted = run_summary({"load_seconds": 4.0, "runs": runs, "parallel_runs": [], "load_network": network})
    assert (counted["load_sent_bytes"], counted["load_received_bytes"]) == (7, 11)


def test_counters_mode_reads_the_links_but_loopback(run_module, tmp_path, monkeypatch):
    net_dev = tmp_path / "dev"
    net_dev.write_text(
        "Inter-| Receive | Transmit\n face |bytes packets ...\n"
        "    lo: 500 5 0 0 0 0 0 0 500 5 0 0 0 0 0 0\n  eth0: 1200 9 0 0 0 0 0 0 3400 11 0 0 0 0 0 0\n"
    )
    monkeypatch.setattr(_bench_run, "NET_DEV", str(net_dev))
    out = run_module(mod, {"mode": "counters"})
    assert not out.failed and out.result["counters"] == {"received_bytes": 1200, "sent_bytes": 3400}
    assert out.result["changed"] is False
    monkeypatch.setattr(_bench_run, "NET_DEV", str(tmp_path / "absent"))
    out = run_module(mod, {"mode": "counters"})
    assert out.failed and "absent" in out.result["msg"]


def test_report_compares_greedy_outputs_with_the_single_process_and_shows_the_seeding(run_module, tmp_path):
    def with_runs(result, content):
        run = {"prompt_tokens": 32, "predict_tokens": 16, "repeat": 0, "content": content}
        return {**result, "runs": [run, {**run, "repeat": 1}]}

    seeded = {
        "name": "seeded",
        "rpc": ["b:1"],
        "split_mode": "layer",
        "summary": {"generation_tps": 9.0, "load_seconds": 1.5, "load_sent_bytes": 2_000_000},
        "seeding": {"seconds": 3.0, "workers": {"node2": {"written": 2, "bytes_written": 9e6}}},
    }
    results = [with_runs(RESULTS[0], " Paris"), with_runs(RESULTS[1], " Lyon"), with_runs(seeded, " Paris")]
    ratio = {"name": "sent/model", "metric": "load_sent_bytes", "numerator": "seeded", "denominator_value": 100_000_000}
    out = run_module(
        mod,
        {
            "mode": "report",
            "results": results,
            "results_dir": str(tmp_path / "r"),
            "ratios": [{**ratio, "target": 0.05, "compare": "le"}],
        },
    )
    assert not out.failed, out.result
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    assert [r["summary"]["same_output_as_single"] for r in data["results"]] == [True, False, True]
    assert data["results"][2]["seeding"]["seconds"] == 3.0
    sent, output = data["ratios"]
    assert sent["value"] == 0.02 and sent["met"] is True
    assert output["value"] == 0.5 and output["met"] is False and output["differ"] == ["layer"]
    markdown = out.result["markdown"]
    assert "| seeded | layer | 1 | 1.5 | 2.0 |" in markdown and markdown.rstrip().count("| yes |") >= 2
    assert "## Seeding before seeded: 3.0 s" in markdown
    row = "| greedy output identical to single (share of 2 configurations); differ: layer | 0.500 | >= 1.00 | NO |"
    assert row in markdown


def test_documentation_parses_and_names_every_mode():
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["options"]["mode"]["choices"] == ["run", "profile", "counters", "report"]
    assert "counters" in yaml.safe_load(mod.RETURN) and yaml.safe_load(mod.EXAMPLES)


def test_report_carries_the_seed_on_paper(run_module, tmp_path):
    """make bench passes tools/seed_paper.py's figures (option paper): into report.md and results.json."""
    paper = {
        "model": "Qwen2.5-32B-Instruct Q4_K_M",
        "rows": [
            {
                "plan": "fewest (5)",
                "link_mbit": 1000,
                "cold_s": 340.0,
                "seeded_s": 228.0,
                "warm_s": 180.0,
                "tokens_per_second": 0.51,
            }
        ],  # fmt: skip
        "measured": {"load_minutes": 48, "tokens_per_second": 0.52},
    }
    out = run_module(mod, {"mode": "report", "results": RESULTS, "results_dir": str(tmp_path / "r"), "paper": paper})
    assert not out.failed, out.result
    # A paper without the seeded load with tensor hashes (an older tools/seed_paper.py) shows none.
    assert "| fewest (5) | 1000 Mbit/s | 5.7 min | 3.8 min | - | 3.0 min | 0.51 |" in out.result["markdown"]
    assert json.loads((tmp_path / "r" / "results.json").read_text())["paper"] == paper


def test_predictions_take_the_round_trip_the_proxy_really_held(run_module, tmp_path):
    """Asked 5 ms one way, the proxy held each chunk 7 ms on average (woken late): the model's round trip is 14 ms,
    and the report says both."""
    held = dict(RESULTS[1], name="held", proxy_hold={"chunks": 400, "mean_ms": 7.0, "asked_ms": 5.0})
    out = run_module(
        mod,
        {"mode": "report", "results": [RESULTS[0], RESULTS[1], held], "results_dir": str(tmp_path / "r"),
         "model_bytes": 1000},
    )  # fmt: skip
    assert not out.failed, out.result
    by_name = {r["name"]: r["summary"] for r in json.loads((tmp_path / "r" / "results.json").read_text())["results"]}
    # Calibrated on single: 0.1 s per token; two workers, each one round trip (and its call) per token.
    assert by_name["layer"]["predicted_tps"] == pytest.approx(
        1 / (0.1 * RPC_COMPUTE_FACTOR + 2 * (0.010 + RPC_CALL_SECONDS))
    )
    assert by_name["held"]["predicted_tps"] == pytest.approx(
        1 / (0.1 * RPC_COMPUTE_FACTOR + 2 * (0.014 + RPC_CALL_SECONDS))
    )
    assert "| held | 5.00 | 7.00 | 400 |" in out.result["markdown"]
    assert "| layer | 5.00 |" not in out.result["markdown"]


def test_predictions_charge_only_what_a_token_bucket_holds_back(run_module, tmp_path):
    """The coordinator's link capped by a tbf (burst 125,000 bytes): a worker's per-token hidden state and logits,
    a few kB, cross at the wire's speed, so only its round trip and call are charged; the report's meta names the
    burst. Without the qdiscs every byte waits for the link's rate."""
    results = [RESULTS[0], dict(RESULTS[1], rpc=["10.0.0.2:50052"], proxy_delay_ms=0)]
    base = {"mode": "report", "results": results, "model_bytes": 1000, "endpoints": {"node2": "10.0.0.2:50052"}}
    base["links"] = [{"name": "tcp node2", "kind": "raw TCP", "from": "node2", "mb_per_s": 1.0}]
    base["model_profile"] = {"read_per_token_bytes": 1000, "activation_bytes": 5000, "logits_bytes": 10000}
    base["model_profile"].update(
        name="m", n_layer=1, weight_bytes=1000, embedding_bytes=100, embedding_share=0.1, tied_output=False,
        small_tensors=1, tensor_count=2, small_bytes=100, small_share=0.1, offloaded_bytes=1000,
        warm_load_bytes=100, warm_load_share=0.1,
    )  # fmt: skip
    qdiscs = '[{"kind":"tbf","dev":"eth0","options":{"rate":125000,"burst":125000}}]'
    seen = {}
    for name, extra in (("shaped", {"link_qdiscs": qdiscs}), ("plain", {})):
        out = run_module(mod, {**base, **extra, "results_dir": str(tmp_path / name)})
        assert not out.failed, out.result
        report = json.loads((tmp_path / name / "results.json").read_text())
        seen[name] = report["results"][1]["summary"]["predicted_network_s"], report["meta"]["link_burst_bytes"]
    assert seen["shaped"] == (pytest.approx(RPC_CALL_SECONDS), 125_000)
    # 2 x 5000 bytes of hidden state and 10000 of logits at 1 MB/s: 20 ms more.
    assert seen["plain"] == (pytest.approx(RPC_CALL_SECONDS + 0.020), 0)


def test_a_worker_without_a_layer_takes_no_part_in_a_token():
    """The bench's cache model has 2 layers and the output layer: over six workers evenly, llama.cpp gives the three
    slots to workers 1, 3 and 5 (make bench 20261203T220410Z: A-seed-all-cold generated at 0.97 of the single
    process, where six round trips per token were predicted at 0.83 of what it measured)."""
    six = [f"10.0.0.{i}:50052" for i in range(1, 7)]
    assert _bench_run.worker_shares(six, "layer", [], 2) == [(six[0], 1 / 3), (six[2], 1 / 3), (six[4], 1 / 3)]
    two = six[:2]
    assert _bench_run.worker_shares(two, "layer", [1.0, 3.0], 2) == [(two[0], 1 / 3), (two[1], 2 / 3)]
    assert _bench_run.worker_shares(six, "tensor", [], 2) == [(w, 1 / 6) for w in six]


def test_a_result_records_the_split_its_predictions_take():
    result = _bench_run.new_result(_params(name="x", rpc=["a:1", "b:1"], tensor_split=[2.0, 1.0], proxy_delay_ms=0))
    assert (result["split_mode"], result["tensor_split"]) == ("tensor", [2.0, 1.0])
    assert _bench_run.worker_shares(result["rpc"], "layer", result["tensor_split"], 2) == [
        ("a:1", 2 / 3),
        ("b:1", 1 / 3),
    ]


def _predicted_seconds_per_token(relay_bps, links=()):
    """The prediction for RESULTS' layer configuration (through the proxy, two workers) with the proxy relaying at
    ``relay_bps`` per second of its CPU (None: not measured), 100 kB of logits per token."""
    results = json.loads(json.dumps(RESULTS))
    results[1]["proxy_hold"] = {"chunks": 40, "mean_ms": 5.0, "asked_ms": 5.0, "relay_bps": relay_bps}
    p = {
        "model_profile": {"read_per_token_bytes": 1000, "logits_bytes": 100_000},
        "model_bytes": 1000,
        "calibration": "single",
        "endpoints": {"node2": "a:1", "node3": "b:1"},
        "layers": 2,
        "shared_bandwidth_nodes": 0,
    }
    _bench_run.predictions(p, results, list(links))
    return 1.0 / results[1]["summary"]["predicted_tps"]


def test_a_link_through_the_proxy_is_no_faster_than_the_proxy_relays():
    """The delaying proxy is one Python process: the logits cross it at the bytes it relays per second of its CPU
    (its hold tally), which the prediction charges when the link's own throughput is higher or unknown."""
    unknown = _predicted_seconds_per_token(None)
    assert _predicted_seconds_per_token(1e6) - unknown == pytest.approx(100_000 / 1e6)
    fast_link = [{"kind": "raw TCP", "from": node, "to": "node1", "mb_per_s": 10.0} for node in ("node2", "node3")]
    slow_link = [{"kind": "raw TCP", "from": node, "to": "node1", "mb_per_s": 0.5} for node in ("node2", "node3")]
    assert _predicted_seconds_per_token(1e6, fast_link) - unknown == pytest.approx(100_000 / 1e6)  # the relay's
    assert _predicted_seconds_per_token(1e6, slow_link) - unknown == pytest.approx(100_000 / 0.5e6)  # the link's
