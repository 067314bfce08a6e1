"""The plan before deploy: predictions from the planners' results, and the report's text and JSON."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llamarpc.cluster.plugins.action.llama_plan_report import write_json
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _perf_model as perf
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _plan_report as report

MB = 1000 * 1000
MODEL = {"name": "m", "architecture": "llama", "n_layer": 4, "n_embd": 1000, "weight_bytes": 300 * MB}
MODEL.update(layer_bytes=[60 * MB] * 4, output_bytes=60 * MB)
#: The output head's share of the bytes a token reads: 60 of 300 MB.
HEAD_SHARE = 0.2
SHARDS = [{"name": f"m-0000{i}-of-00003.gguf", "size": 100 * MB} for i in (1, 2, 3)]
PLACEMENT = [{**SHARDS[0], "host": "c"}, {**SHARDS[1], "host": "c"}, {**SHARDS[2], "host": "w2"}]
DISK = {
    "c": {"usable": 250 * MB, "assigned": 200 * MB, "left": 50 * MB},
    "w2": {"usable": 900 * MB, "assigned": 100 * MB, "left": 800 * MB},
}
MEMORY = {
    "strategy": "all",
    "ctx_size": 4096,
    "parallel": 1,
    "kv_bytes_per_layer": 1 << 20,
    "coordinator_bytes": 1 << 27,
    "workers": [
        {"name": "c", "endpoint": "10.0.0.1:50052", "weight_bytes": 100 * MB},
        {"name": "w2", "endpoint": "10.0.0.2:50052", "weight_bytes": 200 * MB},
    ],
    "excluded": [{"name": "w3", "reason": "not reachable (refused)"}],
    "table": ["node  endpoint  layers", "c ...", "w2 ..."],
}


def build(**more):
    args = {
        "model": MODEL,
        "shards": SHARDS,
        "coordinator": "c",
        "placement": PLACEMENT,
        "disk": DISK,
        "memory": MEMORY,
        "links": {"w2": 100.0},
        "default_mbit": 1000.0,
        "source_mbit": 80.0,
        "default_rtt_ms": 2.0,
        "memory_bandwidth": 10e9,
    }
    args.update(more)
    return report.build(**args)


def test_load_time_downloads_each_host_then_reads_over_sshfs_then_sends_the_workers():
    load = build()["load"]
    # c downloads 200 MB at 80 Mbit/s (10 MB/s); w2 100 MB at min(80, 100) Mbit/s.
    assert load["download_seconds"] == pytest.approx({"c": 20.0, "w2": 10.0})
    # Shard 3 is read over SSHFS at w2's 100 Mbit/s (12.5 MB/s); w2 gets its 200 MB of weights the same way.
    assert load["sshfs_read_seconds"] == pytest.approx(8.0)
    assert load["send_seconds"] == pytest.approx({"w2": 16.0})
    assert load["total_seconds"] == pytest.approx(54.0)


def test_shards_already_there_are_not_downloaded_again():
    load = build(reports={"c": {"complete": {SHARDS[0]["name"]: SHARDS[0]["size"]}}})["load"]
    assert load["download_seconds"]["c"] == pytest.approx(10.0)


def test_tokens_per_second_come_from_the_performance_model():
    speed = build()["speed"]
    compute = 300 * MB * perf.RPC_COMPUTE_FACTOR / 10e9  # both nodes are RPC workers
    # One round trip per worker and token (counted on the wire): loopback for the coordinator's own worker, 2 ms
    # assumed for w2, each with the hosts' share of a round trip; one f32 activation vector (4 kB) per hop.
    network = 0.0001 + 0.002 + 2 * perf.RPC_CALL_SECONDS + 4000 / 125e6 + 4000 / 12.5e6
    assert speed["compute_seconds"] == pytest.approx(compute)
    assert speed["network_seconds"] == pytest.approx(network)
    assert speed["tokens_per_second"] == pytest.approx(1 / (compute + network))


def test_a_local_plan_is_one_process_reading_every_weight():
    table = ["node  endpoint  layers", "c  local  0-3+out"]
    local = {**MEMORY, "strategy": "fewest", "local": True, "workers": [], "excluded": [], "table": table}
    doc = build(memory=local)
    assert doc["speed"]["compute_seconds"] == pytest.approx(300 * MB / 10e9)
    assert doc["speed"]["network_seconds"] == 0
    assert doc["load"]["send_seconds"] == {}
    # The report says so in words, not only by an empty worker list.
    head = next(line for line in doc["text"] if line.startswith("Memory plan"))
    assert "local: the whole model fits on c with its headroom" in head and "no RPC worker (fit first" in head
    assert "local" not in next(line for line in build()["text"] if line.startswith("Memory plan"))


def test_a_measured_round_trip_replaces_the_assumed_one_and_says_so():
    doc = build(workers=[{"name": "w2", "rtt_ms": 0.5}, {"name": "c", "rtt_ms": None}])
    assert doc["links"]["w2"] == {"mbit": 100.0, "rtt_ms": 0.5, "measured": ["rtt"]}
    assert doc["links"]["c"] == {"mbit": 1000.0, "rtt_ms": 2.0, "measured": []}
    links = next(line for line in doc["text"] if line.startswith("Links:"))
    assert "w2 100 Mbit/s, rtt 0.5 ms (rtt measured)" in links
    assert "c 1000 Mbit/s, rtt 2 ms (assumed)" in links


def test_text_shows_shards_per_host_memory_and_predictions():
    lines = build(header_reads=[{"name": "x", "requests": 3, "received": 2 * MB}])["text"]
    assert lines[0] == "Model m (llama, 4 layers): 300.0 MB in 3 shard(s); headers read with 3 request(s), 2.0 MB"
    assert (
        "  c: 2 shard(s), 200.0 MB (usable 250.0 MB, left 50.0 MB) m-00001-of-00003.gguf, m-00002-of-00003.gguf"
        in lines
    )
    assert "  left out: w3: not reachable (refused)" in lines
    assert any(line.startswith("Predicted load time: 54.0 s (download: c 20.0 s, w2 10.0 s;") for line in lines)
    assert any(line.startswith("Predicted generation: ") for line in lines)
    assert not any(line.startswith("REFUSED") for line in lines)


def test_a_refused_plan_has_no_predictions_and_names_the_refusals():
    doc = build(placement=None, disk=None, memory=None, refusals=["the model does not fit: 1 GB missing"])
    assert doc["load"] is None and doc["speed"] is None
    assert "  (no placement: see the refusal)" in doc["text"]
    assert "Memory plan: none (see the refusal)" in doc["text"]
    assert doc["text"][-1] == "REFUSED: the model does not fit: 1 GB missing"


def test_the_document_is_json_and_written_once(tmp_path):
    doc = build()
    path = tmp_path / "plan.json"
    assert write_json(str(path), doc) is True
    assert json.loads(path.read_text()) == json.loads(json.dumps(doc))
    assert write_json(str(path), doc) is False


def test_the_rpc_workers_running_now_are_on_one_line():
    doc = build(
        probe=[
            {"endpoint": "10.0.0.1:50052", "state": "ready", "protocol": "3.0.0"},
            {"endpoint": "10.0.0.2:50052", "state": "refused", "protocol": None},
        ]
    )
    assert "RPC workers now: 10.0.0.1:50052 ready (protocol 3.0.0); 10.0.0.2:50052 refused" in doc["text"]


def test_a_failed_write_keeps_the_old_plan_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    assert write_json(str(path), build()) is True
    before = path.read_text()

    def fail(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.replace", fail)
    with pytest.raises(OSError, match="No space left"):
        write_json(str(path), build(source_mbit=40.0))
    assert [entry.name for entry in tmp_path.iterdir()] == ["plan.json"]
    assert path.read_text() == before


# Speculative decoding (issue #36): tokens/s with and without it, at the acceptance assumed, said so.

SPECULATIVE = {
    "types": ["draft-simple"],
    "settings": {"draft-n-max": 4},
    "draft": True,
    "draft_device": "none",
    "draft_host": "c",
    "draft_weight_bytes": 30 * MB,
}


#: Tokens a pass of 4 drafted tokens yields at acceptance 0.7: 1 + 0.7 + 0.49 + 0.343 + 0.2401.
TOKENS = 2.7731


def test_speculation_is_predicted_with_and_without_at_the_assumed_acceptance():
    doc = build(memory={**MEMORY, "speculative": SPECULATIVE}, spec_acceptance=0.7, n_vocab=1000)
    spec = doc["speculation"]
    assert (spec["drafted_per_pass"], spec["acceptance"], spec["tokens_per_pass"]) == (4, 0.7, pytest.approx(TOKENS))
    # Without: the plain prediction plus the logits back from the last worker (w2's 100 Mbit/s link), both ways.
    logits = 4000 / 12.5e6
    assert spec["without"]["seconds_per_token"] == pytest.approx(doc["speed"]["seconds_per_token"] + logits)
    # With: the draft reads 30 MB on the coordinator's CPU 5 times; the pass reads every weight once (each of the 4
    # drafted tokens adds the slope for the model's head share: the layers' batch and the head's logits) and pays each
    # worker's round trip once, with 5 tokens' activations and logits.
    draft = 5 * 30 * MB / 10e9
    assert spec["verify_slope"] == pytest.approx(perf.verify_slope_for(HEAD_SHARE))
    verify = doc["speed"]["compute_seconds"] * (1 + 4 * spec["verify_slope"])
    verify += 0.0001 + 0.002 + 2 * perf.RPC_CALL_SECONDS
    verify += 5 * (4000 / 125e6 + 4000 / 12.5e6) + 5 * logits
    assert spec["with"]["seconds_per_token"] == pytest.approx((draft + verify) / TOKENS)
    assert spec["speedup"] == pytest.approx(spec["with"]["tokens_per_second"] / spec["without"]["tokens_per_second"])
    assert doc["assumptions"]["spec_acceptance"] == 0.7
    line = next(line for line in doc["text"] if line.startswith("Predicted with speculative decoding (draft-simple): "))
    assert (
        f"{spec['with']['tokens_per_second']:.1f} tokens/s against {spec['without']['tokens_per_second']:.1f}" in line
    )
    assert "at an acceptance of 0.70 assumed (per drafted token), 4 tokens drafted and 2.77 yielded per pass" in line
    assert line.endswith("; the logits of every verified token counted")


def test_without_speculation_there_is_no_such_prediction():
    doc = build()
    # The report is what it was without speculative decoding: no key of it at all.
    assert "speculation" not in doc and "spec_acceptance" not in doc["assumptions"]
    assert not any(line.startswith("Predicted with speculative") for line in doc["text"])


def test_a_draft_on_a_worker_pays_its_round_trip_per_drafted_token():
    on_w2 = {**SPECULATIVE, "draft_device": "RPC1", "draft_host": "w2"}
    near = build(memory={**MEMORY, "speculative": SPECULATIVE})["speculation"]
    far = build(memory={**MEMORY, "speculative": on_w2})["speculation"]
    assert far["with"]["draft_seconds"] == pytest.approx(
        near["with"]["draft_seconds"] + 5 * (0.002 + perf.RPC_CALL_SECONDS)
    )


@pytest.mark.parametrize(
    ("types", "settings", "drafted"),
    [
        (["ngram-mod"], {}, 64),  # llama.cpp's own defaults
        (["ngram-mod"], {"ngram-mod-n-max": 16}, 16),
        (["ngram-simple"], {}, 48),
        (["ngram-map-k", "draft-simple"], {"ngram-map-k-size-m": 8, "draft-n-max": 12}, 12),
        (["draft-simple"], {}, 3),
    ],
)
def test_the_tokens_drafted_per_pass_follow_the_types_settings(types, settings, drafted):
    assert report.drafted_per_pass({"types": types, "settings": settings}) == drafted


def staging_of(fits, served=("old",)):
    room = {"serving": 250 * MB, "previous": 0, "reclaim": 0, "reclaim_in_place": 250 * MB, "free": 90 * MB,
            "new": 300 * MB}  # fmt: skip
    change = {"model_id": "new", "served": list(served), "replace": "staged", "fits": fits,
              "footprints": {"c": room}}  # fmt: skip
    if not fits:
        change["downtime"] = "llama-server stops first and stays down while 300.0 MB of shards are placed"
    return change


def test_a_model_change_shows_both_footprints_per_host_and_whether_staging_fits():
    staged = "\n".join(build(staging=staging_of(True))["text"])
    assert "Model change old -> new: staged beside the model served now" in staged
    assert "c: served now 250.0 MB, older kept 0 B, new 300.0 MB, removed first 0 B, free 90.0 MB" in staged
    in_place = "\n".join(build(staging=staging_of(False))["text"])
    assert "in place - llama-server stops first and stays down" in in_place
    assert "Model change: none served yet" in "\n".join(build(staging=staging_of(True, served=()))["text"])
    assert "Model change" not in "\n".join(build()["text"])
