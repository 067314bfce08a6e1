# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A smoke test of a llama.cpp build: llama-server computes a short greedy completion on this host's CPU.

A build that compiles can still die at its first matrix product (an instruction the CPU or the kernel does not
allow: SIGILL), and RPC workers never run the CPU kernels llama-server uses with weight repacking on. So a build is
proven by a real completion of a quantised model, on loopback, with a port of its own; the server is stopped
afterwards whatever happened. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_serving import complete
from ansible_collections.llamarpc.cluster.plugins.module_utils.model._gguf_header import (
    GGUFError,
    read_header,
    split_paths,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._coordinator_state import health_status
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_hashes

PROMPT = "The capital of France is"


def free_port(host="127.0.0.1"):
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def server_argv(server, model, port, *, threads=2, ctx_size=512, extra_args=()):
    """llama-server on loopback, computing on its own CPU only (no GPU, no RPC), with weight repacking as default."""
    return [
        server, "--model", model, "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads),
        "--ctx-size", str(ctx_size), "--n-gpu-layers", "0", "--parallel", "1", "--no-webui", *extra_args,
    ]  # fmt: skip


def describe_exit(code):
    """Words for a server's exit status (negative: killed by a signal)."""
    if code is None:
        return "still running"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        hint = " (an instruction this CPU or kernel does not allow)" if -code == signal.SIGILL else ""
        return f"killed by {name}{hint}"
    return f"exited with status {code}"


def _tail(path, limit=3000):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def smoke(server, model, *, timeout=300, prompt=PROMPT, n_predict=8, threads=2, ctx_size=512, extra_args=(), expect=()):
    """Run llama-server on ``model``, ask for a greedy completion, stop it. Returns a dict with ``ok``.

    ``ok`` holds when the server became healthy, answered the completion with tokens, was still running after it
    and wrote each line of ``expect`` in its log; otherwise ``error`` says what went wrong (with the server's exit
    status) and ``log_tail`` shows its log.
    """
    started = time.monotonic()
    deadline = started + timeout
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    result = {"ok": False, "port": port, "prompt": prompt}
    with tempfile.NamedTemporaryFile(prefix="llamarpc-smoke-", suffix=".log", delete=False) as log:
        log_path = log.name
    try:
        with open(log_path, "wb") as log:
            # A server that keeps running while this module talks to it: run_command would wait for it to end.
            proc = subprocess.Popen(  # noqa: S603 - argv list, no shell  # pylint: disable=ansible-bad-function
                server_argv(server, model, port, threads=threads, ctx_size=ctx_size, extra_args=extra_args),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            result.update(_exercise(proc, base, deadline, prompt, n_predict))
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
        result["seconds"] = round(time.monotonic() - started, 2)
        lacking = [line for line in expect if result["ok"] and line not in _tail(log_path, limit=1 << 20)]
        if lacking:
            result.update(ok=False, error=f"llama-server answered, but its log lacks {lacking[0]!r}")
        if not result["ok"]:
            result["log_tail"] = _tail(log_path)
        return result
    finally:
        with contextlib.suppress(OSError):
            os.unlink(log_path)


def zero_hashes(model):
    """{name: (size, zero hash)} of every tensor of ``model`` (the first file of a split model): names and sizes as
    llama-server matches them, hashes that are never offered without an RPC device."""
    return {
        tensor["name"]: (tensor["bytes"], "0" * 16)
        for path in split_paths(model)
        for tensor in read_header(path)["tensors"]
    }


def hashes_options(module, server, model, scratch):
    """``smoke`` options that exercise ``--rpc-tensor-hashes`` when ``server --help`` names it (a patched build): a
    file in ``scratch`` naming every tensor of ``model``, and the log line that says llama-server took them all.
    Empty for a build without the flag, and for a model whose header the collection cannot read: llama-server's own
    words about it are the smoke's verdict."""
    rc, out, err = module.run_command([server, "--help"], environ_update={"LC_ALL": "C"})
    if rc != 0 or _tensor_hashes.FLAG not in out + err:
        return {}
    try:
        tensors = zero_hashes(model)
    except (OSError, ValueError, GGUFError):
        return {}
    path = os.path.join(scratch, "tensor-hashes.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(_tensor_hashes.text(tensors, {}))
    # The loader's messages are at llama.cpp's level 4 (trace): below llama-server's default threshold.
    extra_args = (_tensor_hashes.FLAG, path, "--log-verbosity", "4")
    return {"extra_args": extra_args, "expect": (f"{len(tensors)} tensor hashes from {path}",)}


def _exercise(proc, base, deadline, prompt, n_predict):
    """Wait for /health, then one completion; the server must still run afterwards."""
    while True:
        if proc.poll() is not None:
            return {"error": f"llama-server {describe_exit(proc.returncode)} before it was ready"}
        if health_status(base, timeout=5) == 200:
            break
        if time.monotonic() >= deadline:
            return {"error": "llama-server was not ready in time"}
        time.sleep(0.5)
    try:
        answer = complete(base, "", prompt, n_predict, timeout=max(5.0, deadline - time.monotonic()))
    except (OSError, ValueError) as err:
        time.sleep(0.5)  # let a crashing server finish dying, so its exit status is known
        return {"error": f"the completion failed ({err}); llama-server {describe_exit(proc.poll())}"}
    if proc.poll() is not None:
        return {"error": f"llama-server {describe_exit(proc.returncode)} after answering"}
    tokens = answer.get("tokens_predicted", 0)
    out = {"content": answer.get("content", ""), "tokens_predicted": tokens}
    out["predicted_per_second"] = (answer.get("timings") or {}).get("predicted_per_second")
    if tokens < 1:
        return {**out, "error": "the completion returned no tokens"}
    return {**out, "ok": True}
