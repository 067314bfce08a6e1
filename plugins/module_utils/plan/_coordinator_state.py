# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The coordinator's state around a plan, read on the coordinator by llama_cluster_plan: the plan in force (the env
files), the endpoints serving it (with llama-server's /health), the deployed plan record (plan.json, read once) with
whether it must be rewritten, the workers whose RPC protocol llama-server refuses (another major, a newer minor), where
the model is planned from, and whether the planned workers' tensor caches are seeded before the load.

Standard library and ansible.module_utils only. The candidate logic itself is ``_cluster_plan.candidates`` (called,
not repeated here).
"""

from __future__ import annotations

import json
import urllib.error

from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan

#: The env file variable that holds llama-server's --rpc list (cluster.env, the supervisor's override.env).
RPC_VARIABLE = "LLAMARPC_RPC"

#: Keys of the plan record compared only in part: the workers by endpoint, the plan by what llama-server is given.
PARTLY_COMPARED = ("workers", "plan")
PLAN_ARGS = ("rpc", "devices", "tensor_split", "args")


#: The supervisor's run-time plan (written while a planned worker is down), read before the deployed cluster.env.
OVERRIDE_ENV = "/run/llamarpc/coordinator/override.env"

#: Seconds llama-server's /health may take to answer before it counts as not answering.
HEALTH_TIMEOUT = 5

#: Where the model is planned from (plan_source): the file on the coordinator, the summary given by the caller, the
#: controller's copy of its headers (check mode before the shards are in place), or nowhere yet.
FROM_COORDINATOR, FROM_GIVEN, FROM_CONTROLLER = "coordinator", "given", "controller"


def read_text(path):
    """The text of a file, or None when it cannot be read (missing, unreadable, a directory)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def env_in_force(paths):
    """The text of the first env file that can be read (the supervisor's override, else the deployed cluster.env),
    or None when there is none."""
    for path in paths or ():
        text = read_text(path)
        if text is not None:
            return text
    return None


def health_status(url, api_key="", timeout=HEALTH_TIMEOUT):
    """The HTTP status llama-server's ``/health`` at ``url`` (the API's base URL) answers: 200 when it serves, 503 while
    it loads, 0 when nothing answers. The API key, when there is one, goes as a bearer token."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with open_url(url.rstrip("/") + "/health", headers=headers, timeout=timeout, use_proxy=False) as reply:
            return int(reply.getcode())
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except Exception:  # noqa: BLE001 - refused, timed out, no route, a bad URL: nothing answered
        return 0


def serving_now(env_text, health):
    """Endpoints llama-server is connected to now: those of the plan in force when /health answered 200, else none.
    A worker serves one client at a time, so these are not probed (a probe in its backlog would stall later
    connects) and count as ready."""
    if health != 200 or env_text is None:
        return []
    return rpc_in_force(env_text)


def rpc_in_force(env_text):
    """The endpoints of ``LLAMARPC_RPC=`` in an env file's text (the first such line), in order."""
    prefix = RPC_VARIABLE + "="
    for line in env_text.splitlines():
        if line.startswith(prefix):
            return [endpoint for endpoint in line[len(prefix) :].split(",") if endpoint]
    return []


def memory_by_host(memory):
    """Each worker's memory figures (``llamarpc_memory`` of node_memory_facts) by host name; a host whose figures are
    empty or null (unreachable over SSH, or node_memory_facts failed there) has none."""
    return {name: dict(figures) for name, figures in (memory or {}).items() if figures}


def candidates(names, endpoints, memory, probe, serving_endpoints=(), plan_only=False, check_mode=False):
    """The planner's input, one entry per worker (``_cluster_plan.candidates``); ``memory`` by host name."""
    return _cluster_plan.candidates(
        list(names),
        list(endpoints),
        memory_by_host(memory),
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


def kept_plan(record_doc):
    """The ``plan`` of the deployed record (``rpc``, ``tensor_split``) that the planner keeps when it still fits, or
    None when there is none."""
    plan = (record_doc or {}).get("plan")
    return plan if isinstance(plan, dict) else None


def version_of(protocol):
    """(major, minor) of a protocol version such as ``7.0.0`` (minor 0 when it has none); None when it has no major
    (empty, not a number)."""
    parts = str(protocol or "").strip().split(".")
    if not parts[0].isdigit():
        return None
    return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _number(value):
    return isinstance(value, int) and not isinstance(value, bool)


def foreign_workers(probe, protocol):
    """The probed workers that llama-server speaking ``protocol`` refuses (and aborts at start): llama.cpp's RPC
    client accepts a worker of its own major version whose minor is no newer than its own (``ggml-rpc.cpp``); none
    when the coordinator's protocol is not known, nor a worker that gave no version."""
    version = version_of(protocol)
    if version is None:
        return []
    major, minor = version
    return [
        entry
        for entry in probe or ()
        if _number(entry.get("major"))
        and (entry["major"] != major or (_number(entry.get("minor")) and entry["minor"] > minor))
    ]


def switching_workers(endpoints, switching, protocols):
    """The workers that switch llama.cpp in this run (``switching``, in step with ``endpoints``): they run their old
    binaries until the coordinator's cutover restarts them, so their probe would say what they leave. Each as a probe
    entry (``endpoint``, ``protocol``, ``major``, ``minor``) of the build they switch to (``protocols``, in step; a
    protocol not known gives no version, which nothing refuses)."""
    entries = []
    protocols = [*(protocols or ()), *([""] * len(endpoints))]
    for endpoint, moving, protocol in zip(endpoints, switching or (), protocols, strict=False):
        if not moving:
            continue
        version = version_of(protocol)
        entries.append(
            {
                "endpoint": endpoint,
                "protocol": protocol,
                "major": version[0] if version else None,
                "minor": version[1] if version else None,
            }
        )
    return entries


def protocol_refusal(foreign, protocol, coordinator, worker_group):
    """Why the plan stops before any change when a worker speaks a protocol llama-server refuses (empty when none
    does)."""
    if not foreign:
        return ""
    speakers = "; ".join(f"{entry.get('endpoint')} speaks RPC protocol {entry.get('protocol')}" for entry in foreign)
    return (
        f"{speakers}, but llama-server on {coordinator} speaks {protocol} and accepts only a worker of its own major "
        "version with a minor no newer than its own: deploy the same llama.cpp version on every host (run site.yml on "
        f"the workers), or take that worker out of the '{worker_group}' group."
    )


def plan_source(model_given, model_here, controller_model, check_mode, plan_only):
    """Where the model is planned from: ``given`` (a summary read from the shards' headers: the plan-only run), the
    file on the ``coordinator``, else - in check mode before the shards are in place, outside the plan-only run - the
    ``controller``'s copy of its headers when there is one, else None (check mode: nothing to plan yet). A real run
    without the model raises FileNotFoundError."""
    if model_given:
        return FROM_GIVEN
    if model_here:
        return FROM_COORDINATOR
    if check_mode and not plan_only and controller_model:
        return FROM_CONTROLLER
    if check_mode:
        return None
    raise FileNotFoundError


def seed_needed(targets, *, plan_only, source, deploy_needed, health):
    """Whether the planned workers' tensor caches are seeded before llama-server loads: only when a planned worker has
    a cache to seed, on the coordinator's own copy of the model (not the plan-only run, not a check run planning from
    the controller's headers), and a load is coming - a plan to deploy, or llama-server not serving. A rerun that
    changes nothing seeds nothing."""
    return bool(targets) and not plan_only and source == FROM_COORDINATOR and (bool(deploy_needed) or health != 200)


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
