"""The worker unit: ExecStart keeps its argv with one flag per line, and the tensor cache is verified, then capped,
before every start."""

from __future__ import annotations

import worker_unit

BIN = worker_unit.DEFAULTS["llama_cpp_rpc_server_bin"]


def test_exec_start_is_one_flag_per_line_with_the_same_argv():
    text = worker_unit.render()
    assert worker_unit.commands(text, "ExecStart") == [[BIN, "-H", "10.0.0.2", "-p", "50052", "-t", "4", "-c"]]
    start = text.index("ExecStart=")
    lines = text[start:].splitlines()[:5]
    assert lines == [f"ExecStart={BIN} \\", "    -H 10.0.0.2 \\", "    -p 50052 \\", "    -t 4 \\", "    -c"]


def test_devices_and_no_cache_keep_the_argv():
    text = worker_unit.render(llama_rpc_worker_cache=False, llama_rpc_worker_devices=["CPU", "Vulkan0"])
    assert worker_unit.commands(text, "ExecStart") == [
        [BIN, "-H", "10.0.0.2", "-p", "50052", "-t", "4", "-d", "CPU", "-d", "Vulkan0"]
    ]
    assert worker_unit.commands(text, "ExecStartPre") == []
    assert "TimeoutStartSec" not in text


def test_the_cache_is_verified_then_capped_before_every_start():
    pre = worker_unit.commands(worker_unit.render(), "ExecStartPre")
    verify = ["/usr/bin/python3", worker_unit.DEFAULTS["_llama_rpc_worker_verify"]]
    hasher = ["--hasher", worker_unit.DEFAULTS["_llama_rpc_worker_hasher"]]
    cache = "/var/cache/llamarpc/rpc-worker/rpc"
    prune = ["/usr/bin/python3", worker_unit.DEFAULTS["_llama_rpc_worker_prune"], cache, "21474836480"]
    # The plan's seeded tensors (the coordinator's keep-list) go last.
    prune += ["--keep", "/var/cache/llamarpc/rpc-worker/seeded-tensors"]
    assert pre == [[*verify, *hasher, cache], prune]
    slow = worker_unit.commands(worker_unit.render(llama_rpc_worker_cache_verify_fast=False), "ExecStartPre")
    assert slow == [[*verify, cache], prune]
    assert ("TimeoutStartSec", "30min") in worker_unit.directives(worker_unit.render())
