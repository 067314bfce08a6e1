# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The coordinator's state around a plan: the plan in force, the endpoints serving it, the planner's candidates from
what the llama_coordinator role gathered, and the deployed plan record (plan.json) with whether it must be rewritten.

Standard library only. The candidate logic itself is ``_cluster_plan.candidates`` (called, not repeated here).
"""

from __future__ import annotations

import base64
import json

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan

#: The env file variable that holds llama-server's --rpc list (cluster.env, the supervisor's override.env).
RPC_VARIABLE = "LLAMARPC_RPC"

#: Keys of the plan record compared only in part: the workers by endpoint, the plan by what llama-server is given.
PARTLY_COMPARED = ("workers", "plan")
PLAN_ARGS = ("rpc", "devices", "tensor_split", "args")


def _decoded(entry):
    """The text of one slurp result (base64 ``content``), or None when the file was not read."""
    if not isinstance(entry, dict) or entry.get("content") is None:
        return None
    return base64.b64decode(entry["content"]).decode("utf-8", errors="replace")


def rpc_in_force(env_text):
    """The endpoints of ``LLAMARPC_RPC=`` in an env file's text (the first such line), in order."""
    prefix = RPC_VARIABLE + "="
    for line in env_text.splitlines():
        if line.startswith(prefix):
            return [endpoint for endpoint in line[len(prefix) :].split(",") if endpoint]
    return []


def serving(env_reads, health_status):
    """Endpoints llama-server is connected to now: those of the plan in force (the first env file that was read:
    the supervisor's override, else the deployed cluster.env) when /health answered 200, else none.

    ``env_reads`` are the results of a looped ``ansible.builtin.slurp`` (missing files have no ``content``)."""
    if health_status != 200:
        return []
    for entry in env_reads or ():
        text = _decoded(entry)
        if text is not None:
            return rpc_in_force(text)
    return []


def memory_by_host(results):
    """Each worker's ``llamarpc_memory`` figures from the looped, delegated node_memory_facts results (``item`` is
    the worker's name); a worker it could not reach (or that failed) has none."""
    memory = {}
    for result in results or ():
        figures = ((result or {}).get("ansible_facts") or {}).get("llamarpc_memory")
        if figures is not None:
            memory[result.get("item")] = figures
    return memory


def candidates(names, endpoints, memory_results, probe, serving_endpoints=(), plan_only=False, check_mode=False):
    """The planner's input, one entry per worker (``_cluster_plan.candidates`` on the raw results)."""
    return _cluster_plan.candidates(
        list(names),
        list(endpoints),
        memory_by_host(memory_results),
        list(probe or ()),
        serving=list(serving_endpoints or ()),
        all_ready=bool(plan_only),
        check_mode=bool(check_mode),
    )


def record(deployment, summary, workers, options, plan):
    """The deployed plan record (plan.json, read by the supervisor and the status entry point), as JSON types."""
    doc = dict(deployment)
    doc.update(
        {
            "summary": summary,
            "workers": [{key: value for key, value in worker.items() if key != "state"} for worker in workers],
            "options": options,
            "plan": plan,
        }
    )
    return json.loads(json.dumps(doc))


def read_record(text):
    """A deployed record from its JSON text; {} when there is none (empty, unreadable, not an object)."""
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def deploy_needed(old, new):
    """Whether the record ``new`` must replace ``old``: when anything but the workers' memory figures differs (memory
    moves between runs; the plan it gives llama-server, --rpc/-dev/--tensor-split and its arguments, is compared), so
    that a rerun stays a no-op."""
    if not old:
        return True

    def rest(doc):
        return {key: value for key, value in doc.items() if key not in PARTLY_COMPARED}

    def endpoints(doc):
        return [worker.get("endpoint") for worker in doc.get("workers") or ()]

    def plan_args(doc):
        plan = doc.get("plan") or {}
        return [plan.get(key) for key in PLAN_ARGS]

    return rest(old) != rest(new) or endpoints(old) != endpoints(new) or plan_args(old) != plan_args(new)


def seed_targets(rpc, endpoints, workers, seeding):
    """The planned workers whose tensor caches the coordinator seeds before a load: ``[{"host", "endpoint",
    "seeding"}]`` in the plan's device order. ``endpoints`` and ``workers`` are parallel lists (each worker host's
    endpoint as the coordinator reaches it); ``seeding`` maps a host to what its worker role published
    (``llama_rpc_worker_seeding``: ``cache_dir``, ``keep_file``, ``hasher``), empty or absent where its cache is off.
    A plan with no RPC (fit first) has none."""
    if isinstance(rpc, str):
        rpc = [endpoint for endpoint in rpc.split(",") if endpoint]
    if len(endpoints) != len(workers):
        raise ValueError(f"{len(endpoints)} endpoints for {len(workers)} worker hosts: the lists must be parallel")
    host_of = dict(zip(endpoints, workers, strict=True))
    targets = []
    for endpoint in rpc or ():
        host = host_of.get(endpoint)
        if host is None:
            raise ValueError(f"{endpoint} is in the plan but is no worker host's endpoint ({', '.join(endpoints)})")
        found = seeding.get(host) or {}
        if found.get("cache_dir") and found.get("keep_file"):
            targets.append({"host": host, "endpoint": endpoint, "seeding": dict(found)})
    return targets


def shard_peers(placement, here, addresses, *, user, export_name, identity_file, known_hosts_file):
    """Where a worker reads each shard that is not on the coordinator ``here``: the host the placement put it on,
    over that host's read-only SFTP export (the sshfs_shard_export role's view ``/<export_name>`` of the model
    directory), as tensor_cache_seed's ``peers`` want it - ``{shard file name: {host, user, path, identity_file,
    known_hosts_file}}``. ``placement``: the shard placement's rows (``name``, ``host``); ``addresses``: each holding
    host's address (its mesh address). The coordinator's own shards have no export, so no peer."""
    peers = {}
    for row in placement:
        if row["host"] == here:
            continue
        if row["host"] not in addresses:
            raise ValueError(f"{row['name']} is placed on {row['host']}, whose address is not given")
        peers[row["name"]] = {
            "host": addresses[row["host"]],
            "user": user,
            "path": f"/{export_name}/{row['name']}",
            "identity_file": identity_file,
            "known_hosts_file": known_hosts_file,
        }
    return peers
