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


def test_the_verify_slope_is_what_each_token_of_a_timed_batch_added_over_one_tokens_compute():
    """Batches of 1, 2, 3 tokens in 100, 110, 120 ms: 10 ms per token beyond the first, 0.2 of a 50 ms token."""
    costs = [{"tokens": 1, "ms": 100.0}, {"tokens": 2, "ms": 110.0}, {"tokens": 3, "ms": 120.0}]
    assert _bench_spec.verify_slope(costs, 0.05) == pytest.approx(0.2)
    # A least-squares fit through the origin: (1, 5) and (2, 20) give (5 + 40) / 5 = 9 ms per token.
    uneven = [{"tokens": 1, "ms": 100.0}, {"tokens": 2, "ms": 105.0}, {"tokens": 3, "ms": 120.0}]
    assert _bench_spec.verify_slope(uneven, 0.09) == pytest.approx(0.1)
    assert _bench_spec.verify_slope([{"tokens": 1, "ms": 100.0}, {"tokens": 2, "ms": 90.0}], 0.05) == 0.0
    for nothing in (None, [], [{"tokens": 2, "ms": 110.0}], [{"tokens": 1, "ms": 100.0}]):
        assert _bench_spec.verify_slope(nothing, 0.05) == perf.VERIFY_TOKEN_SLOPE
    assert _bench_spec.verify_slope(costs, 0.0) == perf.VERIFY_TOKEN_SLOPE


def test_a_batch_is_timed_from_the_servers_own_prompt_timings():
    """batch_costs sends the first n token ids of a tokenized prompt without the prompt cache, n = 1 .. largest, one
    untimed round first and then the sizes in turn, and takes the median prompt_ms; a server that computed another
    number of tokens is an error, not a figure."""
    sent = []
    # Per round: the untimed one slow (a new batch size builds its graph), then 0, 5 and 1 ms of noise.
    noise = [500.0, 0.0, 5.0, 1.0]

    def server(url, body):
        sent.append((url.rsplit("/", 1)[1], body))
        if url.endswith("/tokenize"):
            return 200, {"tokens": list(range(100, 120))}
        n = len(body["prompt"])
        return 200, {"timings": {"prompt_n": n, "prompt_ms": 50.0 + 10 * n + noise[(len(sent) - 2) // 3]}}

    costs = _bench.batch_costs("http://x", 3, 3, post=server)
    assert costs == [{"tokens": 1, "ms": 61.0}, {"tokens": 2, "ms": 71.0}, {"tokens": 3, "ms": 81.0}]
    completions = [body for kind, body in sent if kind == "completion"]
    assert len(completions) == 12 and all(b["cache_prompt"] is False and b["n_predict"] == 1 for b in completions)
    assert [b["prompt"] for b in completions[:4]] == [[100], [100, 101], [100, 101, 102], [100]]

    def cached(url, body):
        if url.endswith("/tokenize"):
            return 200, {"tokens": list(range(10))}
        return 200, {"timings": {"prompt_n": 1, "prompt_ms": 5.0}}

    with pytest.raises(RuntimeError, match="a batch of 2 tokens: HTTP 200, 1 tokens computed"):
        _bench.batch_costs("http://x", 3, 1, post=cached)
    with pytest.raises(RuntimeError, match="/tokenize gave 2 tokens"):
        _bench.batch_costs("http://x", 3, 1, post=lambda url, body: (200, {"tokens": [1, 2]}))


def test_the_report_predicts_a_speculative_pass_from_what_was_counted(run_module, tmp_path):
    """Calibrated on single (10 tok/s: a token's compute is 0.1 s): two workers 16 ms away; the n-gram configuration
    drafted 4 and accepted 3 tokens per pass (4 passes of 16 tokens), its pair none; batches on the pair took 5 ms more
    per token (0.05 of a token's compute)."""
    single = {"name": "single", "rpc": [], "split_mode": "none", "summary": {}, "runs": [run(16)]}
    common = {"rpc": ["a:1", "b:1"], "split_mode": "layer", "proxy_delay_ms": 8}
    spec = {**common, "name": "spec-ngram", "speculative": dict(NGRAM, draft_read_bytes=0), "prompt_name": "code"}
    spec.update(runs=[run(16, 16, 12, tps=20.0, pair="p/0")], paired_with="spec-plain")
    spec["batch_costs"] = [{"tokens": n, "ms": 100.0 + 5 * (n - 1)} for n in (1, 2, 3)]
    plain = {**common, "name": "spec-plain", "speculative": None, "paired_with_speculation": True}
    plain["runs"] = [run(16, tps=8.0, pair="p/0")]
    for result in (single, spec, plain):
        result["summary"] = _bench.completion_summary(result["runs"])
    out = run_module(
        mod,
        {"mode": "report", "results": [single, spec, plain], "results_dir": str(tmp_path / "r"), "model_bytes": 1000,
         "spec_targets": {"code": 2.0}},
    )  # fmt: skip
    assert not out.failed, out.result
    by_name = {r["name"]: r["summary"] for r in json.loads((tmp_path / "r" / "results.json").read_text())["results"]}
    rtt = 0.016 + perf.RPC_CALL_SECONDS
    # A pass: 5 tokens verified, one token's compute (0.1 s) and 4 x 0.05 of it, 2 round trips; it yields 1 + 3 tokens.
    assert by_name["spec-ngram"]["verify_slope"] == pytest.approx(0.05)
    assert by_name["spec-ngram"]["predicted_tps"] == pytest.approx(4 / (0.1 * 1.2 + 2 * rtt))
    assert by_name["spec-plain"]["predicted_tps"] == pytest.approx(1 / (0.1 + 2 * rtt))
    markdown = out.result["markdown"]
    assert "## Speculative decoding" in markdown
    assert "| spec-ngram | ngram-simple | code | 16 | 0.75 | 4.00 | 3.00 | 20.00 |" in markdown
    assert "| 0.05 | - |" in markdown.split("| spec-ngram | ngram-simple")[1].splitlines()[0]
    # Each speculative configuration's paired ratio to its plain pair, and the best one's against the target.
    assert "| spec-ngram / spec-plain (generation) (median of 1 paired completions) | 2.500 | - | - |" in markdown
    best = "| best speculative / plain, code, rtt 16 ms (spec-ngram) (median of 1 paired completions) | 2.500 | >= 2.00"
    assert best + " | yes |" in markdown


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
