# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""llama_benchmark: the server command line, the report mode end to end (files, predictions), check mode."""

from __future__ import annotations

import json

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
        "extra_args": [],
    }
    base.update(kw)
    return base


def test_server_argv_single_and_distributed():
    single = mod.server_argv(_params(), [])
    assert single[:3] == ["/s", "--model", "/m.gguf"]
    assert "--device" in single and single[single.index("--device") + 1] == "none"
    dist = mod.server_argv(_params(tensor_split=[2.0, 1.0]), ["127.0.0.1:16000", "127.0.0.1:16001"])
    assert dist[dist.index("--rpc") + 1] == "127.0.0.1:16000,127.0.0.1:16001"
    assert dist[dist.index("--device") + 1] == "RPC0,RPC1"
    assert dist[dist.index("--split-mode") + 1] == "tensor"
    assert dist[dist.index("--tensor-split") + 1] == "2,1"


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
    # Calibrated on single (10 tok/s): 0.1 s compute; 2 workers x 2 round trips x 10 ms = 0.04 s.
    assert abs(layer["predicted_tps"] - 1 / 0.14) < 1e-9
    assert data["ratios"][0]["met"] is False
    assert "| layer/single | 0.800 | >= 0.95 | NO |" in (tmp_path / "r" / "report.md").read_text()


def test_check_mode_writes_nothing(run_module, tmp_path):
    out = run_module(mod, {"mode": "report", "results": RESULTS, "results_dir": str(tmp_path / "r")}, check_mode=True)
    assert out.result["changed"] and not (tmp_path / "r").exists()
    out = run_module(mod, {"mode": "run", "server_bin": "/s", "model": "/m"}, check_mode=True)
    assert out.result["changed"]
    out = run_module(mod, {"mode": "run"})
    assert out.failed and "server_bin" in out.result["msg"]
