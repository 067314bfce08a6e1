"""tools/seed_paper.py: docs/seed-on-paper.md is what the planner and the performance model say today."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import seed_paper

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _perf_model as perf


def test_the_page_is_current():
    """Fails when the planner, the performance model or the tool changed and the page was not regenerated
    (python tools/seed_paper.py)."""
    assert seed_paper.OUT.read_text(encoding="utf-8") == seed_paper.build()


def test_the_command_line_writes_the_page(tmp_path):
    out = tmp_path / "page.md"
    subprocess.run([sys.executable, str(Path(seed_paper.__file__)), "--out", str(out)], check=True)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# The seed at full scale, on paper\n")
    assert "| seed, measured | (not recorded) | 48 min | - | - | - | 0.52 |" in text


@pytest.fixture(scope="module")
def seed_case(tmp_path_factory):
    out = seed_paper.seed_gguf.write(tmp_path_factory.mktemp("seed"))
    model = seed_paper.gguf_header.read_model(out["files"][0]["path"])
    summary = seed_paper.planner.summarize(model)
    shards = [
        sum(t["bytes"] for t in seed_paper.gguf_header.read_header(entry["path"])["tensors"]) for entry in out["files"]
    ]
    return model, summary, seed_paper.plan(summary, seed_paper.vms(6, 8)), shards


@pytest.mark.parametrize("mbit", seed_paper.LINKS_MBIT)
def test_warm_beats_seeded_beats_cold(seed_case, mbit):
    model, summary, plan, shards = seed_case
    run = seed_paper.figures(model, summary, plan, shards, mbit, seed_paper.BASE)
    assert run["warm"]["total"] < run["seeded"] < run["cold"]["total"]
    # Only the tensors under the cache's 10 MiB threshold still cross the link when the caches are warm.
    assert run["warm"]["send"] < 0.03 * run["cold"]["send"]


def test_with_the_tensor_hashes_a_seeded_load_reads_little_of_the_remote_shards_and_takes_under_5_minutes(seed_case):
    model, summary, plan, shards = seed_case
    local, sshfs = seed_paper.read_with_hashes(model, shards)
    remote = sum(shards[seed_paper.COORDINATOR_SHARDS :])
    assert 0 < sshfs <= 0.1 * remote
    embedding = next(t["bytes"] for t in model["tensors"] if t["name"] == "token_embd.weight")
    assert embedding < local < sum(shards[: seed_paper.COORDINATOR_SHARDS]) * 0.25  # shard 1 holds the embedding
    slow = seed_paper.figures(model, summary, plan, shards, 100, seed_paper.BASE)
    assert slow["seeded_hashes"] < 5 * 60 < slow["seeded"]
    assert slow["hashes"]["hash"] == 0 and slow["hashes"]["send"] == slow["warm"]["send"]
    fast = seed_paper.figures(model, summary, plan, shards, 1000, seed_paper.BASE)
    assert fast["seeded_hashes"] < fast["seeded"]


def test_the_cold_prediction_is_near_the_seeds_48_minutes(seed_case):
    model, summary, plan, shards = seed_case
    cold = seed_paper.figures(model, summary, plan, shards, 100, seed_paper.BASE)["cold"]["total"]
    assert 0.75 < cold / (seed_paper.MEASURED_LOAD_MIN * 60) < 1.1


def test_every_layer_and_the_output_are_placed_once(seed_case):
    model, _summary, plan, _shards = seed_case
    per = seed_paper.placement(model, plan)
    embedding = next(t["bytes"] for t in model["tensors"] if t["name"] == "token_embd.weight")
    assert sum(p["bytes"] for p in per.values()) == sum(t["bytes"] for t in model["tensors"]) - embedding
    assert sum(p["offers"] for p in per.values()) == 64 * 5 + 1  # q, output, gate, up, down per layer; output.weight


def test_the_json_summary_is_the_pages_table(tmp_path):
    """make bench puts these figures into its report (tools/seed_paper.py --json): they must be the page's."""
    out = tmp_path / "paper.json"
    subprocess.run([sys.executable, str(Path(seed_paper.__file__)), "--json", str(out)], check=True)
    paper = json.loads(out.read_text(encoding="utf-8"))
    assert paper["measured"] == {"load_minutes": 48, "tokens_per_second": 0.52}
    assert [(row["plan"], row["link_mbit"]) for row in paper["rows"]] == [
        ("seed (all 6)", 100),
        ("seed (all 6)", 1000),
        ("fewest (5)", 100),
        ("fewest (5)", 1000),
    ]
    page = seed_paper.OUT.read_text(encoding="utf-8")
    for row in paper["rows"]:
        cells = [seed_paper._min(row[key]) for key in ("cold_s", "seeded_s", "seeded_hashes_s", "warm_s")]
        line = f"| {row['plan']} | {row['link_mbit']:g} Mbit/s | {' | '.join(cells)} | {row['tokens_per_second']:.2f} |"
        assert line in page
    assert not (tmp_path / "page.md").exists()


def test_speculation_on_paper_beats_the_plain_split_at_the_default_draft_and_is_in_the_json(tmp_path):
    """The draft on node1's CPU: the planner counts it there; at k = 3 both acceptances beat the plain split, 0.7 more
    than 0.5, and a pass yields the standard formula's tokens (1 + 0.5 + 0.25 + 0.125 at 0.5)."""
    s = seed_paper.speculation()
    assert any(line.startswith("draft model on node1 (CPU): ") for line in s["plan"]["table"])
    assert s["plan"]["speculative"]["draft_device"] == "none"
    rows = {(row["link_mbit"], row["acceptance"]): row for row in s["rows"]}
    assert sorted(rows) == [(100, 0.5), (100, 0.7), (1000, 0.5), (1000, 0.7)]
    for mbit in seed_paper.LINKS_MBIT:
        low, high = rows[(mbit, 0.5)], rows[(mbit, 0.7)]
        assert low["plain_tps"] < low["draft_max"][3]["tokens_per_second"] < high["draft_max"][3]["tokens_per_second"]
        assert low["draft_max"][3]["tokens_per_pass"] == pytest.approx(1.875)
    # The 32B's head is a small share of its bytes (152,064 x 5,120 of 19.4 GB): each drafted token adds little more
    # than the layers' batch.
    assert 0.02 < s["head_share"] < 0.05
    assert s["slope"] == pytest.approx(perf.verify_slope_for(s["head_share"])) and s["slope"] < 0.1
    page = seed_paper.OUT.read_text(encoding="utf-8")
    assert "## Speculative decoding" in page and "| seed, measured | - | 0.52 | - | - | - |" in page
    paper = seed_paper.summary_json()
    assert paper["speculation"]["draft"] == "Qwen2.5-0.5B-Instruct Q4_K_M"
    got = paper["speculation"]["rows"][1]
    assert (got["link_mbit"], got["acceptance"]) == (100, 0.7)
    assert got["draft_max_3_tokens_per_second"] == pytest.approx(rows[(100, 0.7)]["draft_max"][3]["tokens_per_second"])
