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
    record = ["--record", "/run/llamarpc-rpc-worker/cache-verified.json"]
    # One process: the pruner's arguments after --.
    assert pre == [[*verify, *hasher, *record, cache, "--", *prune[2:]]]
    slow = worker_unit.commands(worker_unit.render(llama_rpc_worker_cache_verify_fast=False), "ExecStartPre")
    assert slow == [[*verify, *record, cache, "--", *prune[2:]]]
    assert ("TimeoutStartSec", "30min") in worker_unit.directives(worker_unit.render())


def test_the_verifiers_record_outlives_a_restart_and_the_cutovers_check_is_the_same_command():
    """The record lives in the worker's runtime directory, which a stop keeps (the restart reads it) and a boot
    empties (/run); the oneshot check a cutover starts before its window runs the very command of the worker's start,
    as the worker's user, with the same directory."""
    worker = worker_unit.directives(worker_unit.render())
    check = worker_unit.directives(worker_unit.render("verify.service.j2"))
    kept = [("RuntimeDirectory", "llamarpc-rpc-worker"), ("RuntimeDirectoryMode", "0700")]
    kept += [("RuntimeDirectoryPreserve", "yes")]
    for unit in (worker, check):
        assert all(directive in unit for directive in kept), unit
        assert ("User", "llamarpc") in unit
    [pre] = worker_unit.commands(worker_unit.render(), "ExecStartPre")
    assert worker_unit.commands(worker_unit.render("verify.service.j2"), "ExecStart") == [pre[: pre.index("--")]]
    assert ("Type", "oneshot") in check and ("TimeoutStartSec", "30min") in check
    no_cache = worker_unit.directives(worker_unit.render(llama_rpc_worker_cache=False))
    assert not [key for key, _value in no_cache if key.startswith("RuntimeDirectory")]
