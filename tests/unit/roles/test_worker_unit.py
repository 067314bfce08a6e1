"""The worker unit: ExecStart keeps its argv with one flag per line, and the tensor cache is verified, then capped,
before every start, in the process that then becomes the RPC server."""

from __future__ import annotations

import worker_unit

BIN = worker_unit.DEFAULTS["llama_cpp_rpc_server_bin"]


def test_exec_start_is_one_flag_per_line_with_the_same_argv():
    text = worker_unit.render()
    [start] = worker_unit.commands(text, "ExecStart")
    assert start[start.index("--exec") + 1 :] == [BIN, "-H", "10.0.0.2", "-p", "50052", "-t", "4", "-c"]
    lines = text[text.index(f"--exec {BIN}") :].splitlines()[:5]
    assert lines == [f"--exec {BIN} \\", "    -H 10.0.0.2 \\", "    -p 50052 \\", "    -t 4 \\", "    -c"]
    lines = worker_unit.render(llama_rpc_worker_cache=False)
    lines = lines[lines.index("ExecStart=") :].splitlines()[:4]
    assert lines == [f"ExecStart={BIN} \\", "    -H 10.0.0.2 \\", "    -p 50052 \\", "    -t 4"]


def test_devices_and_no_cache_keep_the_argv():
    text = worker_unit.render(llama_rpc_worker_cache=False, llama_rpc_worker_devices=["CPU", "Vulkan0"])
    assert worker_unit.commands(text, "ExecStart") == [
        [BIN, "-H", "10.0.0.2", "-p", "50052", "-t", "4", "-d", "CPU", "-d", "Vulkan0"]
    ]
    assert worker_unit.commands(text, "ExecStartPre") == []
    assert "TimeoutStartSec" not in text
    assert ("Type", "simple") in worker_unit.directives(text)


def test_the_cache_is_verified_then_capped_before_every_start_by_the_process_that_becomes_the_rpc_server():
    """One sandboxed process per start (systemd builds a sandbox for each one it starts): the verifier, the pruner
    (its arguments after --), then READY=1 to systemd and the RPC server (after --exec), so `Type=notify`: a start
    (and `systemctl restart`) ends once the cache is clean, and TimeoutStartSec bounds the hashing."""
    text = worker_unit.render()
    assert worker_unit.commands(text, "ExecStartPre") == []
    [start] = worker_unit.commands(text, "ExecStart")
    server = [BIN, "-H", "10.0.0.2", "-p", "50052", "-t", "4", "-c"]
    assert start[-len(server) - 1 :] == ["--exec", *server]
    pre = [start[: -len(server) - 1]]
    verify = ["/usr/bin/python3", worker_unit.DEFAULTS["_llama_rpc_worker_verify"]]
    hasher = ["--hasher", worker_unit.DEFAULTS["_llama_rpc_worker_hasher"]]
    cache = "/var/cache/llamarpc/rpc-worker/rpc"
    prune = ["/usr/bin/python3", worker_unit.DEFAULTS["_llama_rpc_worker_prune"], cache, "21474836480"]
    # The plan's seeded tensors (the coordinator's keep-list) go last.
    prune += ["--keep", "/var/cache/llamarpc/rpc-worker/seeded-tensors"]
    record = ["--record", "/run/llamarpc-rpc-worker/cache-verified.json"]
    # One process: the pruner's arguments after --.
    assert pre == [[*verify, *hasher, *record, cache, "--", *prune[2:]]]
    [slow] = worker_unit.commands(worker_unit.render(llama_rpc_worker_cache_verify_fast=False), "ExecStart")
    assert slow == [*verify, *record, cache, "--", *prune[2:], "--exec", *server]
    directives = worker_unit.directives(text)
    assert ("TimeoutStartSec", "30min") in directives
    assert ("Type", "notify") in directives and ("NotifyAccess", "main") in directives


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
    [start] = worker_unit.commands(worker_unit.render(), "ExecStart")
    assert worker_unit.commands(worker_unit.render("verify.service.j2"), "ExecStart") == [start[: start.index("--")]]
    assert ("Type", "oneshot") in check and ("TimeoutStartSec", "30min") in check
    no_cache = worker_unit.directives(worker_unit.render(llama_rpc_worker_cache=False))
    assert not [key for key, _value in no_cache if key.startswith("RuntimeDirectory")]
