# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""Speculative decoding in the benchmark: the server's arguments from the planner, the acceptance counted from the
completions' timings, the prediction from what was counted, a pair through the same proxy, and the report's section."""

from __future__ import annotations

import json

import pytest
import tiny_gguf

from ansible_collections.llamarpc.cluster.plugins.module_utils.bench import _bench, _bench_run, _bench_spec
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _perf_model as perf
from ansible_collections.llamarpc.cluster.plugins.modules import llama_benchmark as mod

NGRAM = {"types": ["ngram-simple"], "settings": {"ngram-simple-size-n": 3, "ngram-simple-size-m": 6}}


def run(predicted, drafted=None, accepted=None, tps=10.0, pair=None, content="x"):
    out = {"predicted_n": predicted, "draft_n": drafted, "draft_n_accepted": accepted, "predicted_per_second": tps}
    out.update(prompt_per_second=50.0, content=content)
    if pair:
        out["pair"] = pair
    return out


def test_the_acceptance_and_the_tokens_per_pass_are_counted_from_the_timings():
    """96 tokens with 60 drafted and 48 accepted: 48 target passes; 80 and 40 of 96: 56 passes."""
    got = _bench_spec.spec_summary([run(96, 60, 48), run(96, 80, 40)])
    assert (got["drafted"], got["accepted"]) == (140, 88)
    assert got["acceptance"] == pytest.approx(88 / 140)
    assert got["drafted_per_pass"] == pytest.approx(140 / 104)
    assert got["accepted_per_pass"] == pytest.approx(88 / 104)
    # Without speculation llama-server reports no draft counts: nothing to add.
    assert _bench_spec.spec_summary([run(96), run(48)]) == {}
    # A speculation that never drafted (free text, n-gram): acceptance 0, one token per pass.
    assert _bench_spec.spec_summary([run(96, 0, 0)])["accepted_per_pass"] == 0.0
    # completion_summary carries them, so merged repeats recount them over every run.
    assert _bench.completion_summary([run(96, 60, 48)])["acceptance"] == 0.8


def test_the_servers_arguments_are_the_planners():
    assert _bench_spec.server_args({}) == []
    words = _bench_spec.server_args(NGRAM)
    assert words[:2] == ["--spec-type", "ngram-simple"]
    assert "--spec-ngram-simple-size-m" in words and words[words.index("--spec-ngram-simple-size-m") + 1] == "6"
    with pytest.raises(_bench_spec.cluster_plan.PlanError, match="needs a draft model"):
        _bench_spec.server_args({"types": ["draft-simple"]})
    with pytest.raises(_bench_spec.cluster_plan.PlanError, match="unknown speculative setting"):
        _bench_spec.server_args({"types": ["ngram-simple"], "settings": {"draft-max": 4}})


def test_a_draft_is_read_for_its_summary_and_runs_on_the_coordinators_cpu(tmp_path):
    made = tiny_gguf.generate(tmp_path, preset="tiny", shards=1)
    path = made["files"][0]["path"]
    spec = {"types": ["draft-simple"], "settings": {"draft-n-max": 4}, "draft_path": path, "draft_name": "tiny"}
    record, words = _bench_run.speculation({"speculative": spec})
    assert words[words.index("--spec-draft-model") + 1] == path
    assert words[words.index("--spec-draft-device") + 1] == "none"
    assert record["draft_name"] == "tiny" and record["draft_read_bytes"] > 0
    assert _bench_run.speculation({"speculative": {}}) == (None, [])
    with pytest.raises(ValueError, match="cannot read the draft model"):
        _bench_run.speculation({"speculative": {**spec, "draft_path": str(tmp_path / "missing.gguf")}})
    argv = _bench_run.server_argv(
        {"server_bin": "/s", "model": "/m", "port": 1, "threads": 1, "parallel": 1, "ctx_size": 64,
         "load_mode": "none", "cache_ram": 0, "split_mode": "layer", "tensor_split": [], "extra_args": ["--x"],
         "spec_args": words},
        ["127.0.0.1:16000"],
    )  # fmt: skip
    assert argv[-len(words) - 1 :] == ["--x", *words]


def test_greedy_outputs_are_compared_with_the_pairs_back_to_back_completion():
    mine = [run(8, 4, 2, pair="p/0", content="a"), run(8, 4, 2, pair="p/1", content="b")]
    assert _bench_spec.same_as_pair(mine, [run(8, pair="p/0", content="a"), run(8, pair="p/1", content="b")])
    assert not _bench_spec.same_as_pair(mine, [run(8, pair="p/0", content="a"), run(8, pair="p/1", content="c")])
    assert _bench_spec.same_as_pair(mine, []) is None


def spec_result(name, delay, drafted, accepted, tps, **extra):
    """A speculative result of 16 tokens on two workers ``delay`` ms away (each way), its summary counted."""
    spec = {**NGRAM, "draft_read_bytes": 0, **extra}
    result = {"name": name, "rpc": ["a:1", "b:1"], "split_mode": "layer", "proxy_delay_ms": delay}
    result.update(speculative=spec, prompt_name="code", runs=[run(16, drafted, accepted, tps=tps, pair=f"{name}/0")])
    result["summary"] = _bench.completion_summary(result["runs"])
    return result


def test_the_verify_slope_is_fitted_on_the_ngram_configurations_at_the_least_round_trip():
    """One worker, one token's compute 0.1 s, no added round trip (one RPC call per pass): passes that drafted 4 and
    1 tokens took 0.18 and 0.12 s; the slope is the least-squares fit of what they took beyond one token over 0.1 s x
    the drafted tokens. A configuration at a longer round trip, or with a draft model, is not fitted on while a nearer
    n-gram one ran; a fit below zero is zero; nothing to fit on gives the constant."""
    nodes = [{"name": "w", "bytes": 100.0, "bandwidth": 1000.0, "rtt": 0.0}]
    plain = {"compute_seconds": 0.1}
    four = spec_result("four", 0, 16, 12, tps=4 / 0.18)  # 4 passes, each 4 drafted and 3 accepted: 4 tokens
    one = spec_result("one", 0, 8, 8, tps=2 / 0.12)  # 8 passes, each 1 drafted and accepted: 2 tokens
    far = spec_result("far", 8, 16, 12, tps=100.0)  # faster than one token: below zero
    drafted = spec_result("drafted", 0, 16, 12, tps=1.0, draft_path="/d.gguf", draft_read_bytes=10)
    staged = [(r, nodes, {}, plain) for r in (four, one, far, drafted)]
    call = perf.RPC_CALL_SECONDS
    slope, names = _bench_spec.calibrated_slope(staged, 1000.0)
    assert names == ["four", "one"]
    points = [(0.4, 0.18 - 0.1 - call), (0.1, 0.12 - 0.1 - call)]
    assert slope == pytest.approx(sum(x * y for x, y in points) / sum(x * x for x, _y in points))
    assert 0.19 < slope < 0.2
    assert _bench_spec.calibrated_slope([(far, nodes, {}, plain)], 1000.0) == (0.0, ["far"])
    assert _bench_spec.calibrated_slope([(drafted, nodes, {}, plain)], 1000.0) == (perf.VERIFY_BODY_SLOPE, [])
    assert _bench_spec.calibrated_slope([], 1000.0, 0.5) == (perf.verify_slope_for(0.5), [])


def test_the_report_predicts_a_speculative_pass_from_what_was_counted(run_module, tmp_path):
    """Calibrated on single (10 tok/s: a token's compute is 0.1 s): two workers; the n-gram configuration at 0 ms
    drafted 4 and accepted 3 tokens per pass (4 passes of 16 tokens) at 20 tok/s, which fits the slope; the same at 16
    ms of round trip is predicted with it, its pair without speculation."""
    single = {"name": "single", "rpc": [], "split_mode": "none", "summary": {}, "runs": [run(16)]}
    single["summary"] = _bench.completion_summary(single["runs"])
    near = spec_result("spec-near", 0, 16, 12, tps=20.0)
    spec = spec_result("spec-ngram", 8, 16, 12, tps=12.0)
    spec["paired_with"] = "spec-plain"
    plain = {"rpc": ["a:1", "b:1"], "split_mode": "layer", "proxy_delay_ms": 8, "name": "spec-plain"}
    plain.update(speculative=None, paired_with_speculation=True, runs=[run(16, tps=8.0, pair="spec-ngram/0")])
    plain["summary"] = _bench.completion_summary(plain["runs"])
    out = run_module(
        mod,
        {"mode": "report", "results": [single, near, spec, plain], "results_dir": str(tmp_path / "r"),
         "model_bytes": 1000, "spec_targets": {"code": 2.0}},
    )  # fmt: skip
    assert not out.failed, out.result
    by_name = {r["name"]: r["summary"] for r in json.loads((tmp_path / "r" / "results.json").read_text())["results"]}
    call = perf.RPC_CALL_SECONDS
    # At 0 ms a pass took 4 / 20 = 0.2 s: one token's compute (0.1 s), 2 calls, and 4 drafted tokens' share.
    slope = (0.2 - 0.1 - 2 * call) / 0.4
    assert by_name["spec-near"]["verify_slope"] == pytest.approx(slope)
    assert by_name["spec-near"]["slope_fitted_here"] and not by_name["spec-ngram"]["slope_fitted_here"]
    assert by_name["spec-near"]["predicted_over_measured"] == pytest.approx(1.0)
    rtt = 0.016 + call
    assert by_name["spec-ngram"]["predicted_tps"] == pytest.approx(4 / (0.1 * (1 + 4 * slope) + 2 * rtt))
    assert by_name["spec-plain"]["predicted_tps"] == pytest.approx(1 / (0.1 + 2 * rtt))
    markdown = out.result["markdown"]
    assert "## Speculative decoding" in markdown
    assert "| spec-ngram | ngram-simple | code | 16 | 0.75 | 4.00 | 3.00 | 12.00 |" in markdown
    assert f"| {slope:.2f} *fit* | - |" in markdown.split("| spec-near | ngram-simple")[1].splitlines()[0]
    assert f"| {slope:.2f} | - |" in markdown.split("| spec-ngram | ngram-simple")[1].splitlines()[0]
    # Each speculative configuration's paired ratio to its plain pair, and the best one's against the target.
    assert "| spec-ngram / spec-plain (generation) (median of 1 paired completions) | 1.500 | - | - |" in markdown
    best = "| best speculative / plain, code, rtt 16 ms (spec-ngram) (median of 1 paired completions) | 1.500 | >= 2.00"
    assert best + " | NO |" in markdown


def test_the_best_row_takes_the_target_only_at_its_round_trip():
    rows = [
        {"numerator": "a", "value": 1.5, "prompt": "free", "rtt_ms": 16.0, "pairs": 3},
        {"numerator": "b", "value": 1.1, "prompt": "free", "rtt_ms": 16.0, "pairs": 3},
        {"numerator": "c", "value": 1.2, "prompt": "free", "rtt_ms": 4.0, "pairs": 3},
        {"numerator": "d", "value": None, "prompt": "code", "rtt_ms": 16.0},
        {"name": "another ratio", "value": 9.0},
    ]
    best = _bench_spec.best_rows(rows, {"free": 1.3})
    assert [(row["value"], row["target"], row["met"]) for row in best] == [(1.5, 1.3, True), (1.2, None, None)]
    assert best[0]["name"] == "best speculative / plain, free, rtt 16 ms (a)"


class FakeModule:
    """What Bench needs of an AnsibleModule for its units: the commands it ran."""

    def __init__(self, params):
        self.params = params
        self.commands = []

    def run_command(self, argv):
        self.commands.append(argv)
        return 0, "", ""


def test_a_proxied_pair_goes_through_the_same_proxy_after_this_configurations_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(_bench_run.time, "sleep", lambda _s: None)
    params = {"proxy_delay_ms": 8.0, "proxy_base_port": 16000, "state_dir": str(tmp_path), "threads": 1}
    params["local_rpc_server"] = {"bin": "/b/ggml-rpc-server", "port": 50062}
    bench = _bench_run.Bench(FakeModule(params))
    servers = [{"rpc": ["10.0.0.2:50052", "10.0.0.1:50052"]}, {"rpc": ["10.0.0.3:50052", "127.0.0.1:50062"]}]
    assert bench.proxied(servers) == [["127.0.0.1:16000", "127.0.0.1:16001"], servers[1]["rpc"]]
    proxied = bench.proxied([servers[0], {**servers[1], "proxied": True}])
    assert proxied[1] == ["127.0.0.1:16002", "127.0.0.1:16003"]
    routes = bench.module.commands[-1][-4:]
    assert routes == ["16000=10.0.0.2:50052", "16001=10.0.0.1:50052", "16002=10.0.0.3:50052", "16003=127.0.0.1:50062"]
    bench.start_local_rpc()
    assert bench.module.commands[-1][-7:] == ["/b/ggml-rpc-server", "-H", "127.0.0.1", "-p", "50062", "-t", "1"]
    # Without a delay nothing is proxied, a proxied pair neither.
    bench.params["proxy_delay_ms"] = 0
    assert bench.proxied([servers[0], {**servers[1], "proxied": True}]) == [s["rpc"] for s in servers]


def test_a_completion_sends_a_prompts_text_and_keeps_the_draft_counts(monkeypatch):
    sent = {}

    def fake(url, body=None, timeout=600.0, headers=None):
        sent.update(body)
        timings = {"prompt_n": 40, "predicted_n": 8, "predicted_per_second": 9.0, "draft_n": 6, "draft_n_accepted": 5}
        return 200, {"timings": timings, "content": "y"}

    monkeypatch.setattr(_bench, "http_json", fake)
    got = _bench.completion("http://x", "def f():\n", 8)
    assert sent["prompt"] == "def f():\n" and (got["draft_n"], got["draft_n_accepted"]) == (6, 5)
    runs = _bench.alternated_runs(["http://x"], ["def f():\n"], [8], 1)
    assert runs[0][0]["prompt_tokens"] == 40  # a text prompt is keyed by its token count
    _bench.completion("http://x", 3, 8)
    assert sent["prompt"] == "the the the"
