"""The cluster serves like a single process would, with the weights on the workers and the shards intact."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from clusterlib import API_KEY, MANIFEST, api, deployed_plan, greedy, held_shards, inventory_vars
from faultreport import record
from labtest import http_command, inventory_hosts, lab, wait_for

SINGLE_PORT = 18080
EXPORT_ROOT = "/srv/llamarpc/export"  # the llama_model role's llama_model_export_root


def test_plan_spreads_the_layers_over_every_worker():
    plan = deployed_plan()["plan"]
    names = [row["name"] for row in plan["workers"]]
    assert names == [f"node{i}" for i in range(1, 7)]  # strategy all, like the seed
    assert plan["devices"] == "RPC0,RPC1,RPC2,RPC3,RPC4,RPC5"
    placed = sorted(layer for row in plan["workers"] for layer in row["layers"])
    assert placed == list(range(len(placed))) and placed


def test_chat_completions_answer():
    status, body = api(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0},
    )
    assert status == 200, body
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] > 0


def test_completion_answers_with_timings():
    status, body = api("/completion", greedy("The capital of France is", 16))
    assert status == 200, body
    assert body["tokens_predicted"] == 16
    print(
        f"\ncluster: prompt {body['timings']['prompt_per_second']:.1f} tok/s, "
        f"generation {body['timings']['predicted_per_second']:.1f} tok/s"
    )


@pytest.mark.fault(10)
def test_api_key_is_required():
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    status, body = api("/v1/chat/completions", chat, key=None)
    wrong, wrong_body = api("/v1/chat/completions", chat, key="wrong")
    health = api("/health", key=None)[0]
    record(
        10,
        f"no key -> {status}, wrong key -> {wrong}, /health without key -> {health}",
        ok=status == 401 and wrong == 401 and health == 200,
        key="10 api-key",
        detail="llama-server API without the key",
    )
    assert status == 401, body
    assert wrong == 401, wrong_body
    assert health == 200


@pytest.fixture
def single_process():
    """llama-server alone on node1 (CPU, no RPC) on the same model files, on loopback; removed afterwards."""
    node1 = lab("node1")
    config = deployed_plan()
    server = re.search(r"ExecStart=(\S+)", node1.file("/etc/systemd/system/llamarpc-server.service").content_string)
    command = (
        f"systemd-run --unit=llamarpc-single --property=User=llamarpc-server {server.group(1)} "
        # --no-repack: the RPC workers never repack weights, so the reference computes with their kernels (measured
        # with repacking on: Gemma 3 270M Q4_K_M's greedy ids parted from the cluster's at tokens 8 and 18).
        f"--model {config['model_path']} --device none --n-gpu-layers 0 --fit off --load-mode none --no-repack "
        f"--ctx-size 4096 --parallel 1 --threads 2 --host 127.0.0.1 --port {SINGLE_PORT} --no-webui"
    )
    node1.run_expect([0], command)
    try:
        wait_for(lambda: node1.run(http_command(f"http://127.0.0.1:{SINGLE_PORT}/health")).rc == 0)
        yield node1
    finally:
        node1.run("systemctl stop llamarpc-single; systemctl reset-failed llamarpc-single")


@pytest.mark.parametrize("prompt", ["The capital of France is", "Six small machines"])
def test_greedy_output_matches_a_single_process(single_process, prompt):
    """Token by token: the same ids from the cluster as from one process on the same files (text can hide a
    difference in tokenisation; ids cannot)."""
    request = {**greedy(prompt, 32), "return_tokens": True}
    body = json.dumps(request)
    alone = json.loads(
        single_process.run_expect([0], http_command(f"http://127.0.0.1:{SINGLE_PORT}/completion", body)).stdout
    )
    status, cluster = api("/completion", request)
    assert status == 200, cluster
    assert len(cluster["tokens"]) == 32 and cluster["tokens_predicted"] == 32
    assert alone["tokens"] == cluster["tokens"]
    assert alone["content"] == cluster["content"]


def _buffers(log):
    """Model buffer sizes by device from llama-server's log (--log-verbosity 4), in MiB, of the last load."""
    starts = [m.start() for m in re.finditer(r"load_model: loading model", log)]
    tail = log[starts[-1] :] if starts else log
    pattern = r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB"
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, tail)}


def test_coordinator_holds_no_layer_weights():
    config = deployed_plan()
    log = lab("node1").run_expect([0], "journalctl -u llamarpc-server --no-pager -o cat").stdout
    buffers = _buffers(log)
    cpu = sum(size for device, size in buffers.items() if device.startswith("CPU"))
    rpc = sum(size for device, size in buffers.items() if device.startswith("RPC"))
    summary = config["summary"]
    mib = 1024 * 1024
    print(f"\nmodel buffers (MiB): {buffers}")
    # The coordinator's CPU keeps the token embeddings only (llama.cpp never offloads the input layer).
    assert cpu <= summary["embedding_bytes"] / mib + 0.05
    # Every repeating layer and the output layer are on the RPC workers.
    layers_and_output = (sum(summary["layer_bytes"]) + summary["output_bytes"]) / mib
    assert rpc == pytest.approx(layers_and_output, rel=0.02)
    assert len([d for d in buffers if d.startswith("RPC")]) == 6


def test_every_shard_reads_back_with_its_checksum_through_the_model_dir():
    manifest = json.loads(MANIFEST.read_text())
    node1 = lab("node1")
    model_dir = deployed_plan()["model_path"].rsplit("/", 1)[0]
    remote = 0
    for shard in manifest["files"]:
        path = f"{model_dir}/{shard['name']}"
        digest = node1.run_expect([0], f"sha256sum {path}").stdout.split()[0]
        assert digest == shard["sha256"]
        remote += node1.file(path).is_symlink
    # node1's /data (12M) cannot hold all three: at least one shard is read over SSHFS.
    assert remote >= 1
    assert hashlib.sha256(b"").hexdigest() not in [s["sha256"] for s in manifest["files"]]


def test_lsyncd_with_delete_is_neutralised():
    """pool's lsyncd, as systemd itself reports it (a systemctl that fails fails the test): stopped and masked."""
    node1 = lab("node1")
    out = node1.run_expect([0], "systemctl --user -M pool@ show -p ActiveState,LoadState lsyncd.service").stdout
    state = dict(line.split("=", 1) for line in out.split())
    assert state["LoadState"] == "masked" and state["ActiveState"] in ("inactive", "failed"), state


def test_the_deployed_plan_holds_no_api_key():
    assert API_KEY not in lab("node1").file("/etc/llamarpc/coordinator/plan.json").content_string


def test_the_seed_layout_pools_directory_stays_pools_and_is_exported_read_only():
    """Shards in pool's own directory (the seed's layout): the directory and every shard stay pool's on every host
    (never made root's behind its back), and each host that serves shards to node1 shows it through a read-only
    bind mount in a root-owned chroot, which node1 mounts."""
    model_dir = inventory_vars()["llama_model_dir"]
    held = held_shards(sorted(inventory_hosts()))
    mounts = lab("node1").run_expect([0], "findmnt --raw --noheadings --types fuse.sshfs -o SOURCE,TARGET").stdout
    serving_hosts = sorted(
        line.split()[1].rsplit("/", 1)[1] for line in mounts.splitlines() if line.split()[0].endswith(":/shards")
    )
    assert serving_hosts and all(held[name] for name in serving_hosts), (mounts, held)
    for name, files in sorted(held.items()):
        host = lab(name)
        owners = host.run_expect([0], f"cd {model_dir} && stat -c '%U %n' . {' '.join(sorted(files))}").stdout
        assert {line.split()[0] for line in owners.splitlines()} == {"pool"}, (name, owners)
    for name in serving_hosts:
        host = lab(name)
        options = host.run_expect([0], f"findmnt -n -o OPTIONS --mountpoint {EXPORT_ROOT}/shards").stdout
        assert "ro" in options.strip().split(","), (name, options)
        same = host.run_expect([0], f"stat -c %d:%i {model_dir} {EXPORT_ROOT}/shards").stdout.split()
        assert same[0] == same[1], (name, same)  # the view is pool's directory itself
        assert host.file(EXPORT_ROOT).user == "root"
