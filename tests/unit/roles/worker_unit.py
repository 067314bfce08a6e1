"""The llama_rpc_worker unit rendered as the template module renders it (Jinja2, trim_blocks) and read as systemd
reads it (backslash continuations, comments, one command per Exec line): shared by the unit and integration tests."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import jinja2

ROLE = Path(__file__).resolve().parents[3] / "roles/llama_rpc_worker"

DEFAULTS = {
    "ansible_managed": "Ansible managed",
    "llama_rpc_worker_user": "llamarpc",
    "llama_rpc_worker_service": "llamarpc-rpc-worker",
    "llama_rpc_worker_firewall": True,
    "llama_rpc_worker_cache": True,
    "llama_rpc_worker_cache_dir": "/var/cache/llamarpc/rpc-worker",
    "llama_rpc_worker_cache_verify_fast": True,
    "llama_rpc_worker_cache_verify_timeout": "30min",
    "llama_rpc_worker_devices": [],
    "llama_rpc_worker_port": 50052,
    "llama_cpp_rpc_server_bin": "/opt/llamarpc/llama.cpp/KEY/bin/ggml-rpc-server",
    "_llama_rpc_worker_bind": "10.0.0.2",
    "_llama_rpc_worker_threads": 4,
    "_llama_rpc_worker_cache_bytes": 21474836480,
    "_llama_rpc_worker_prune": "/usr/local/lib/llamarpc/llamarpc_cache_prune.py",
    "_llama_rpc_worker_verify": "/usr/local/lib/llamarpc/llamarpc_cache_verify.py",
    "_llama_rpc_worker_hasher": "/usr/local/lib/llamarpc/llamarpc-fnv1a",
    "_llama_rpc_worker_keep_file": "/var/cache/llamarpc/rpc-worker/seeded-tensors",
    "_llama_rpc_worker_prune_args": "/var/cache/llamarpc/rpc-worker/rpc 21474836480 "
    "--keep /var/cache/llamarpc/rpc-worker/seeded-tensors",
    "llama_rpc_worker_metrics_dir": "",
    "llama_rpc_worker_metrics_group": "llamarpc-metrics",
}


def prune_args(values):
    """The pruner's arguments as vars/main.yml's _llama_rpc_worker_prune_args makes them from ``values``."""
    metrics = values["llama_rpc_worker_metrics_dir"]
    return (
        f"{values['llama_rpc_worker_cache_dir']}/rpc {values['_llama_rpc_worker_cache_bytes']} "
        f"--keep {values['_llama_rpc_worker_keep_file']}"
        + (f" --metrics {metrics}/llamarpc_tensor_cache.prom" if metrics else "")
    )


def verify_command(values):
    """The verifier's command line as vars/main.yml's _llama_rpc_worker_verify_command makes it from ``values``."""
    hasher = f" --hasher {values['_llama_rpc_worker_hasher']}" if values["llama_rpc_worker_cache_verify_fast"] else ""
    record = f"/run/{values['llama_rpc_worker_service']}/cache-verified.json"
    return (
        f"/usr/bin/python3 {values['_llama_rpc_worker_verify']}{hasher} --record {record}"
        f" {values['llama_rpc_worker_cache_dir']}/rpc"
    )


def render(template="worker.service.j2", **overrides):
    """The role's template with DEFAULTS and ``overrides``; the pruner's arguments and the verifier's command follow
    the cache directory, the cap and the metrics directory given, unless given themselves."""
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    values = {**DEFAULTS, **overrides}
    if "_llama_rpc_worker_prune_args" not in overrides:
        values["_llama_rpc_worker_prune_args"] = prune_args(values)
    if "_llama_rpc_worker_verify_command" not in overrides:
        values["_llama_rpc_worker_verify_command"] = verify_command(values)
    return env.from_string((ROLE / "templates" / template).read_text()).render(values)


def directives(text):
    """[(key, value)] of a unit file: continuation lines joined (systemd replaces backslash-newline by a space)."""
    found, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped[0] in "#;["):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        key, _sep, value = (pending + stripped).partition("=")
        found.append((key.strip(), value.strip()))
        pending = ""
    return found


def commands(text, key):
    """The argv of every ``key`` line (ExecStart, ExecStartPre), in order."""
    return [shlex.split(value) for name, value in directives(text) if name == key]


def build_hasher(out_dir):
    """The verifier's helper compiled as the role compiles it on the host; its path."""
    out = Path(out_dir) / "llamarpc-fnv1a"
    source = ROLE / "files" / "llamarpc_fnv1a.cpp"
    subprocess.run(["g++", "-O2", "-Wall", "-o", str(out), str(source)], check=True, timeout=300)
    return str(out)
