# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The coordinator's supervisor (installed by the llamarpc.cluster.llama_coordinator role).

``wait``  (ExecStartPre of llama-server): block until every RPC worker in $LLAMARPC_RPC answers HELLO, so
          llama-server never starts against a missing worker (it would abort and loop). A local plan (fit first:
          $LLAMARPC_RPC empty) has nothing to wait for: it returns at once, successfully.
``check`` (a timer): find which workers are down; when a worker of the plan in force has been down longer than
          ``replan_after`` seconds, plan again without it (the collection's own planner, the same file the
          llama_cluster_plan module uses) and, if the model still fits, restart llama-server on the new plan
          through a runtime override; when every worker of the deployed plan is back, drop the override.  If the
          model no longer fits, leave things as they are and say why in the state file.  On a deployed local plan
          (no worker, no override) there is nothing to re-plan: it records that and returns at once.
``status``: observe the cluster now, read-only (nothing restarted or written), and print it with the last check.

Slow is not down: a worker that llama-server holds a connection to serves it, whether or not /health answers in time
(a probe would only wait in that worker's backlog); a worker counts as down for a re-plan only when it failed
``DOWN_CHECKS`` checks in a row and for ``replan_after`` seconds. An override names the deployed plan it re-plans
(``LLAMARPC_REPLAN_OF``, a digest of plan.json): once another plan is deployed (a new model, fit first going local),
a check drops it and restarts llama-server on the deployed plan. An unexpected error is written into the state
(verdict ``error``) and the journal as one line, never a traceback.

Files: the deployed plan (``plan.json``, written by the role), the runtime override (an EnvironmentFile under
/run, so a reboot returns to the deployed plan) and the state (JSON under /run), read by the status playbook. Both
are written whole by the collection's ``_atomic.py``, copied beside this file like the protocol and the planner.
With ``--metrics FILE`` each check also writes what it found for node exporter's textfile collector (the collection's
``_textfile.py``, copied beside this file too): each worker's state and protocol, the plan in force, the re-plans,
and the last load's seconds and kind - ``local``, ``seeded``, ``warm`` or ``cold`` (``load_kind``), read from the plan
in force and the role's record of the workers' last tensor cache seeding (``seeded.json`` beside plan.json).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import importlib
import json
import os
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
rpc = importlib.import_module("_rpc_protocol")
planner = importlib.import_module("_cluster_plan")
atomic = importlib.import_module("_atomic")
textfile = importlib.import_module("_textfile")

UP_STATES = ("ready", "busy")
#: Checks in a row that must find a worker down before a re-plan leaves it out (besides ``replan_after`` seconds): one
#: check that came late on a loaded machine, or one probe lost in a backlog, is not an outage.
DOWN_CHECKS = 3
LOCAL = "serving locally: the model fits on the coordinator, llama-server computes it with no RPC worker (fit first)"


def probe_all(endpoints, timeout, protocols=None):
    """State of each endpoint (probed concurrently); ``protocols``, a dict when given, gets the RPC protocol version
    each endpoint that answered HELLO announced."""

    def one(endpoint):
        host, port = rpc.parse_endpoint(endpoint)
        return rpc.probe(host, port, timeout=timeout, connect_timeout=timeout)

    with ThreadPoolExecutor(max_workers=max(len(endpoints), 1)) as pool:
        results = dict(zip(endpoints, pool.map(one, endpoints), strict=True))
    if protocols is not None:
        protocols.update({endpoint: result.protocol for endpoint, result in results.items() if result.protocol})
    return {endpoint: result.state for endpoint, result in results.items()}


def established_peers(tables=("/proc/net/tcp", "/proc/net/tcp6")):
    """``host:port`` of every peer this host has an ESTABLISHED TCP connection to (IPv4 peers) that acknowledges what
    is sent to it: a connection in retransmission timeouts (``retrnsmt`` > 0: a host that lost power sends no FIN, and
    the connection stays ESTABLISHED for many minutes) does not count."""
    peers = set()
    for table in tables:
        try:
            with open(table, encoding="ascii") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 7 or fields[3] != "01" or int(fields[6], 16) != 0:
                continue
            address, port = fields[2].split(":")
            if len(address) == 32:  # IPv6 table: only IPv4-mapped peers (::ffff:a.b.c.d) are ours
                if not address.startswith("0000000000000000FFFF0000"):
                    continue
                address = address[24:]
            octets = bytes.fromhex(address)[::-1]
            peers.add(f"{'.'.join(str(octet) for octet in octets)}:{int(port, 16)}")
    return peers


def listening(url, timeout=5.0):
    """llama-server's /health status: 200 when it serves, 503 while it loads, 0 when nothing answers. While it loads
    it may not be connected to its workers yet (its HTTP server is up before the model's load connects them); once
    loaded it holds a connection to every worker of its plan (it aborts when one goes away)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:  # noqa: S310 - http URL of plan.json
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code if exc.code == 503 else 0
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        return 0


def endpoints_of(rpc):
    """The endpoints of an ``--rpc`` list (empty for a local plan)."""
    return [item for item in (rpc or "").split(",") if item]


def cmd_wait(args):
    endpoints = endpoints_of(os.environ.get("LLAMARPC_RPC", ""))
    if not endpoints:
        print("local plan (LLAMARPC_RPC is empty): no RPC worker to wait for", flush=True)
        return 0
    deadline = time.monotonic() + args.timeout
    last = None
    while True:
        states = probe_all(endpoints, args.probe_timeout)
        waiting = sorted(endpoint for endpoint, state in states.items() if state != "ready")
        if not waiting:
            print(f"all {len(endpoints)} RPC workers answer HELLO", flush=True)
            return 0
        line = "waiting for RPC workers: " + ", ".join(f"{e} ({states[e]})" for e in waiting)
        if line != last:
            print(line, flush=True)
            last = line
        if time.monotonic() >= deadline:
            print(f"gave up after {args.timeout:.0f} s: {line}", file=sys.stderr)
            return 1
        time.sleep(args.interval)


def plan_digest(path):
    """Which deployment ``path`` (plan.json) is: the sha256 of its bytes (the role rewrites it only when the plan
    changes), or None when there is none."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def replan_of(override):
    """The deployed plan digest an override was made from ('' for an override that names none)."""
    try:
        with open(override, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("LLAMARPC_REPLAN_OF="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        return None
    return ""


def read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def write_atomic(path, text):
    """Replace ``path`` with ``text`` (the collection's ``_atomic.write_atomic``: fsync, rename, fsync of the
    directory; a reader sees the old file or the new one)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic.write_atomic(path, text, mode=0o644)


def env_text(plan, digest):
    """The override env file: the same variables as the role's cluster.env (the unit expands LLAMARPC_PLAN_ARGS), and
    the deployed plan it re-plans (``digest``), so that a later deployment is never run on it."""
    return (
        "# Written by llamarpc_supervisor: the plan without the workers that stayed down.\n"
        f"LLAMARPC_RPC={plan['rpc']}\nLLAMARPC_PLAN_ARGS={plan['args']}\nLLAMARPC_REPLAN_OF={digest}\n"
    )


def drop_override(args):
    """Remove the override and the plan in force; site.yml's handler may have removed them meanwhile (a deployment
    that ran beside this check)."""
    for path in (args.override, args.plan_in_force):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def speculation_without(options, down):
    """The deployed speculation (None without), without its draft model when the worker that runs it is ``down``:
    the re-plan serves with the draftless types left (none: no speculation) rather than put the draft on the
    coordinator, whose memory the supervisor does not plan."""
    speculative = options.get("speculative")
    if not (speculative and speculative.get("draft") and speculative.get("draft_device") in down):
        return speculative
    types = [kind for kind in speculative.get("types") or [] if kind != planner.DRAFT_TYPE]
    if not types:
        return None
    settings = {
        name: value for name, value in (speculative.get("settings") or {}).items() if not name.startswith("draft-")
    }
    return {"types": types, "settings": settings}


def replan(config, down):
    options = config["options"]
    workers = [dict(worker, state="down" if worker["name"] in down else "ready") for worker in config["workers"]]
    return planner.plan(
        config["summary"],
        workers,
        ctx_size=options["ctx_size"],
        parallel=options["parallel"],
        cache_type_k=options["cache_type_k"],
        cache_type_v=options["cache_type_v"],
        headroom=options["headroom"],
        overhead=options["overhead"],
        strategy=options["strategy"],
        coordinator=options.get("coordinator"),
        fit_first=bool(options.get("fit_first", False)),
        cache_ram=int(options.get("cache_ram", 0)),
        speculative=speculation_without(options, down),
    )


def restart(service):
    subprocess.run(["systemctl", "restart", service], check=False)


def started_at(service):
    """When llama-server's main process started (systemd's monotonic clock, microseconds), None when not running."""
    shown = subprocess.run(
        ["systemctl", "show", "--property=ExecMainStartTimestampMonotonic", "--value", service],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return int(shown.stdout.strip() or 0) or None
    except ValueError:
        return None


def seeding_path(args):
    """The record of the workers' last tensor cache seeding (``seeded.json``, written by the role beside plan.json)."""
    return args.seeding or os.path.join(os.path.dirname(args.plan), "seeded.json")


def split_of(value):
    """A plan's ``tensor_split`` (``"3,3,3"`` or a list) as numbers, to compare two plans' splits."""
    items = value.split(",") if isinstance(value, str) else value or ()
    try:
        return [float(item) for item in items if str(item).strip()]
    except ValueError:
        return None


def load_kind(plan, seeding, start_wall, previous_start_wall):
    """What a load that started at ``start_wall`` (Unix time) on ``plan`` (the plan in force: ``rpc``,
    ``tensor_split``) could take from the workers' tensor caches, from ``seeding`` (the role's record of the last
    seeding: its plan's ``rpc`` and ``tensor_split``, and per worker host tensor_cache_seed's summary - ``written``,
    ``present``, ``finished_at``):

    - ``local``: no RPC worker in the plan (fit first), nothing to send;
    - ``seeded``: the last seeding was for this plan, put or found at least one of its tensors in a worker's cache, and
      ended before this start and after the previous start: the first load since that seeding;
    - ``warm``: that seeding's tensors are in the caches, but an earlier load came since;
    - ``cold``: no tensor of this plan is known to be cached - no seeding for it (a re-plan, seeding off, a cache
      off), or one that cached none (no tensor over 10 MiB, none available).
    """
    if not endpoints_of((plan or {}).get("rpc")):
        return "local"
    seeding = seeding or {}
    if endpoints_of(seeding.get("rpc")) != endpoints_of(plan.get("rpc")):
        return "cold"
    seeded_split = split_of(seeding.get("tensor_split"))
    if not seeded_split or seeded_split != split_of(plan.get("tensor_split")):
        return "cold"
    workers = [item for item in (seeding.get("workers") or {}).values() if isinstance(item, dict)]
    if not sum(int(item.get("written") or 0) + int(item.get("present") or 0) for item in workers):
        return "cold"
    ended = max(float(item.get("finished_at") or 0) for item in workers)
    if ended <= start_wall and (previous_start_wall is None or ended > previous_start_wall):
        return "seeded"
    return "warm"


def last_load(recorded, start, loaded, monotonic, kind_of=None):
    """The last load, as the state keeps it (``start``, ``loading``, ``seconds``, ``finished_at``, ``kind``,
    ``checked``): a start that a check saw loading (/health not 200 yet), or that came after the previous check, gets
    its seconds at the first check that finds it serving - at most one check interval late. A start that came before
    the previous check and was never seen loading (the supervisor was not watching) keeps the last measured load.
    ``kind_of(start_wall, previous_start_wall)`` gives a new start's kind (``load_kind``), decided when the start is
    first seen and kept with the load once it is measured; without a previous start in the state, the boot counts as
    one (a seeding before it was followed by loads the state forgot)."""
    load = dict(recorded.get("load") or {})
    previous_check = load.get("checked")
    load["checked"] = monotonic
    if start is None:
        return load
    if load.get("start") != start:
        watched = previous_check is not None and start / 1e6 >= previous_check
        start_wall = time.time() - max(0.0, monotonic - start / 1e6)
        # The previous start; none known (a new state, after a reboot): the boot, the monotonic clock's zero.
        previous = load.get("start_wall", time.time() - monotonic)
        upcoming = kind_of(start_wall, previous) if kind_of else None
        load.update(start=start, start_wall=start_wall, loading=watched or not loaded, upcoming_kind=upcoming)
    if loaded and load.get("loading"):
        load.update(loading=False, seconds=round(max(0.0, monotonic - start / 1e6), 1), finished_at=time.time())
        load["kind"] = load.get("upcoming_kind")
    return load


def observe(config, args, recorded, now):
    """What runs now, read-only: llama-server listening or not, each worker's state, and since when each worker that
    is down now has been down (from the recorded state; ``now`` for a worker first seen down)."""
    names = {worker["endpoint"]: worker["name"] for worker in config["workers"]}
    override = os.path.exists(args.override)
    in_force = read_json(args.plan_in_force, None) if override else None
    current = endpoints_of((in_force or config["plan"])["rpc"])
    # A worker serves one client at a time: while llama-server runs and holds its connection to a worker of the plan
    # in force, that worker is busy serving it (a probe could only time out in its backlog). Every other worker is
    # probed, including one of the plan whose connection is gone (it died, even if llama-server has not noticed).
    health = listening(config["url"])
    serving = health in (200, 503)
    # Held open by llama-server (a process that dies closes its connections): that worker serves it, even when /health
    # is slow to answer on a loaded machine.
    connected = established_peers()
    to_probe = [endpoint for endpoint in names if not (endpoint in current and endpoint in connected)]
    states = {endpoint: "serving" for endpoint in names if endpoint not in to_probe}
    # A worker not probed now (it serves llama-server) keeps the protocol it announced at its last probe.
    protocols = {
        endpoint: recorded.get("protocols", {}).get(name)
        for endpoint, name in names.items()
        if endpoint not in to_probe
    }
    states.update(probe_all(to_probe, args.probe_timeout, protocols) if to_probe else {})
    down_since = {
        name: recorded.get("down_since", {}).get(name, now)
        for endpoint, name in names.items()
        if states[endpoint] not in UP_STATES + ("serving",)
    }
    down_checks = {name: int(recorded.get("down_checks", {}).get(name, 0)) + 1 for name in down_since}
    return {
        "names": names,
        "override": override,
        "current": current,
        "serving": serving,
        "loaded": health == 200,
        "connected": connected,
        "states": states,
        "down_since": down_since,
        "down_checks": down_checks,
        "protocols": {names[endpoint]: version for endpoint, version in protocols.items() if version},
        "replans": int(recorded.get("replans", 0)),
        "in_force": in_force or config["plan"],
        "current_names": [names.get(endpoint, endpoint) for endpoint in current],
        "deployed_names": [names.get(endpoint, endpoint) for endpoint in endpoints_of(config["plan"]["rpc"])],
    }


def describe_down(down_since, now):
    return "down: " + ", ".join(f"{name} for {now - since:.0f} s" for name, since in sorted(down_since.items()))


def on_replan(seen, verdict, message):
    """While llama-server runs on the supervisor's re-plan, the message says so whatever else is going on."""
    left_out = [name for name in seen["deployed_names"] if name not in seen["current_names"]]
    if seen["override"] and verdict in ("ok", "degraded") and left_out:
        return f"re-planned without {', '.join(left_out)}" + (f"; {message}" if verdict == "degraded" else "")
    return message


def state_record(seen, now, verdict, message):
    return {
        "checked_at": now,
        "verdict": verdict,
        "message": message,
        "down_since": seen["down_since"],
        "down_checks": seen["down_checks"],
        "serving": seen["serving"],
        "workers": {seen["names"][endpoint]: state for endpoint, state in seen["states"].items()},
        "override": seen["override"],
        "protocols": seen["protocols"],
        "replans": seen["replans"],
    }


def bare_record(now, verdict, message, replans=0):
    """A state record of a check that probed nothing (``replans``: the count so far, kept)."""
    return {
        "checked_at": now,
        "verdict": verdict,
        "message": message,
        "down_since": {},
        "down_checks": {},
        "serving": None,
        "workers": {},
        "override": False,
        "replans": replans,
    }


def check_local(args, config, now):
    """The deployed plan is local and no re-plan is in force: no worker to probe, nothing to re-plan or restore."""
    replans = int((read_json(args.state, {}) or {}).get("replans", 0))
    recorded = read_json(args.state, {}) or {}
    record = bare_record(now, "local", "local plan: no RPC worker to watch, nothing to re-plan", replans)
    record["serving"] = listening(config["url"]) == 200
    record["load"] = last_load(
        recorded, started_at(config["service"]), record["serving"], time.monotonic(), lambda *_: "local"
    )
    write_state(args, record, config["plan"])
    return 0


def metric_families(record, plan):
    """What a check found, as metric families for node exporter's textfile collector: each worker's state, since when
    it is down and the RPC protocol it announced; the plan in force (``plan``: workers, layers per worker, local or
    distributed), the re-plans so far and when this check ran."""
    workers = record.get("workers") or {}
    down_since = record.get("down_since") or {}
    rows = (plan or {}).get("workers") or []
    load = record.get("load") or {}
    family = textfile.family
    return [
        family(
            "llamarpc_worker_up",
            "gauge",
            "1 when the RPC worker answers HELLO or serves llama-server, 0 when it is down (the supervisor's check).",
            [({"worker": name}, state in UP_STATES + ("serving",)) for name, state in sorted(workers.items())],
        ),
        family(
            "llamarpc_worker_down_since_timestamp_seconds",
            "gauge",
            "Since when the RPC worker is down (Unix time; only workers that are down).",
            [({"worker": name}, since) for name, since in sorted(down_since.items())],
        ),
        family(
            "llamarpc_worker_rpc_protocol_info",
            "gauge",
            "The RPC protocol version the worker announced in HELLO (value 1).",
            [({"worker": name, "version": v}, 1) for name, v in sorted((record.get("protocols") or {}).items())],
        ),
        family(
            "llamarpc_plan_workers",
            "gauge",
            "RPC workers in the plan in force (0 for a local plan).",
            [({}, len(endpoints_of((plan or {}).get("rpc"))))],
        ),
        family(
            "llamarpc_plan_worker_layers",
            "gauge",
            "Layers each worker of the plan in force holds.",
            [({"worker": row["name"]}, len(row.get("layers") or [])) for row in rows],
        ),
        family(
            "llamarpc_plan_local",
            "gauge",
            "1 when llama-server computes the model alone (fit first), 0 when the plan is distributed.",
            [({}, bool((plan or {}).get("local")))],
        ),
        family(
            "llamarpc_plan_replanned",
            "gauge",
            "1 while the supervisor's re-plan (without a worker that stayed down) is in force.",
            [({}, bool(record.get("override")))],
        ),
        family(
            "llamarpc_replans_total",
            "counter",
            "Re-plans the supervisor made since the coordinator's boot.",
            [({}, int(record.get("replans") or 0))],
        ),
        family(
            "llamarpc_server_loaded",
            "gauge",
            "1 when llama-server's /health answered 200 at the supervisor's last check.",
            [({}, record.get("serving") is True or record.get("loaded") is True)],
        ),
        family(
            "llamarpc_server_load_seconds",
            "gauge",
            "How long llama-server's last load took, from its start to /health 200 (at most one check interval late).",
            [({}, load["seconds"])] if load.get("seconds") is not None else [],
        ),
        family(
            "llamarpc_server_load_info",
            "gauge",
            "The kind of llama-server's last measured load (value 1): local (no RPC worker), seeded (the first load "
            "after a seeding of its plan), warm (the seeded tensors cached, a load since), cold (none known cached).",
            [({"kind": load["kind"]}, 1)] if load.get("seconds") is not None and load.get("kind") else [],
        ),
        family(
            "llamarpc_server_load_finished_timestamp_seconds",
            "gauge",
            "When llama-server's last measured load ended (Unix time).",
            [({}, load["finished_at"])] if load.get("finished_at") is not None else [],
        ),
        family(
            "llamarpc_supervisor_last_check_timestamp_seconds",
            "gauge",
            "When the supervisor's last check ran (Unix time).",
            [({}, record["checked_at"])],
        ),
        family(
            "llamarpc_supervisor_verdict_info",
            "gauge",
            "The verdict of the supervisor's last check (value 1).",
            [({"verdict": record["verdict"]}, 1)],
        ),
    ]


def write_state(args, record, plan=None):
    write_atomic(args.state, json.dumps(record, indent=1, sort_keys=True))
    print(f"{record['verdict']}: {record['message']}")
    if getattr(args, "metrics", None):
        problem = textfile.write_quietly(args.metrics, metric_families(record, plan))
        if problem:
            print(f"warning: {problem}", file=sys.stderr)


def drop_stale_override(args, config, digest, now):
    """An override made from another deployed plan than plan.json's (a re-plan of the plan a deployment replaced,
    e.g. one written while site.yml deployed a local plan): drop it and restart llama-server on the deployed plan."""
    made_from = replan_of(args.override)
    if made_from is None or made_from == digest:
        return False
    drop_override(args)
    restart(config["service"])
    message = "a re-plan of an earlier deployment was in force: dropped it, llama-server restarted on the deployed plan"
    replans = int((read_json(args.state, {}) or {}).get("replans", 0))
    write_state(args, bare_record(now, "restored", message, replans), config["plan"])
    return True


def cmd_check(args):
    config = read_json(args.plan)
    if config is None:
        print(f"no deployed plan at {args.plan}", file=sys.stderr)
        return 2
    digest = plan_digest(args.plan)
    now = time.time()
    if drop_stale_override(args, config, digest, now):
        return 0
    if not endpoints_of(config["plan"]["rpc"]) and not os.path.exists(args.override):
        return check_local(args, config, now)
    recorded = read_json(args.state, {"down_since": {}})
    seen = observe(config, args, recorded, now)
    seeding = read_json(seeding_path(args), None)
    seen["load"] = last_load(
        recorded,
        started_at(config["service"]),
        seen["loaded"],
        time.monotonic(),
        lambda start_wall, previous: load_kind(seen["in_force"], seeding, start_wall, previous),
    )
    names, states, down_since = seen["names"], seen["states"], seen["down_since"]
    override, current, connected = seen["override"], seen["current"], seen["connected"]
    long_down = sorted(
        name
        for name, since in down_since.items()
        if now - since >= config["replan_after"] and seen["down_checks"][name] >= DOWN_CHECKS
    )
    message = "serving on the deployed plan" if not override else "serving on a re-plan"
    verdict = "ok"
    if any(name in seen["current_names"] for name in long_down):
        try:
            new = replan(config, set(down_since))
        except planner.PlanError as exc:
            verdict = "down"
            message = f"worker(s) {', '.join(long_down)} down for over {config['replan_after']} s and {exc}"
        else:
            if plan_digest(args.plan) != digest:
                print("the deployed plan changed during this check: no re-plan of the plan it replaced")
                return 0
            write_atomic(args.override, env_text(new, digest))
            write_atomic(args.plan_in_force, json.dumps(new))
            restart(config["service"])
            seen["replans"] += 1
            seen["in_force"] = new
            verdict = "replanned"
            message = f"re-planned without {', '.join(long_down)}: {planner.describe(new)}"
    elif override and not any(name in down_since for name in seen["deployed_names"]):
        drop_override(args)
        restart(config["service"])
        seen["in_force"] = config["plan"]
        verdict = "restored"
        message = "every worker of the deployed plan is back: restored it"
    elif seen["loaded"] and any(e in current and e not in connected and states[e] == "ready" for e in names):
        # A worker of the plan restarted while llama-server idled: reconnect now rather than fail the next request.
        # Only once the model is loaded: while it loads (503, right after a start) llama-server has not connected to
        # every worker yet, and a restart then would only start the load again.
        restart(config["service"])
        verdict = "reconnected"
        message = "a planned worker restarted while llama-server was idle: restarted llama-server to reconnect"
    elif down_since:
        verdict = "degraded"
        message = describe_down(down_since, now)
    message = on_replan(seen, verdict, message)
    seen["override"] = os.path.exists(args.override)
    record = state_record(seen, now, verdict, message)
    record["loaded"] = seen["loaded"]
    record["load"] = seen["load"]
    write_state(args, record, seen["in_force"])
    return 0


def guarded_check(args):
    """``check``, with any unexpected error written into the state (verdict ``error``) and the journal as one line."""
    try:
        return cmd_check(args)
    except Exception as exc:  # noqa: BLE001 - the reason goes into the state file and the journal, not a traceback
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        reason = f"{type(exc).__name__}: {exc} (at {os.path.basename(frame.filename)}:{frame.lineno})"
        print(f"error: the check failed: {reason}", file=sys.stderr)
        try:
            write_atomic(
                args.state,
                json.dumps({"checked_at": time.time(), "verdict": "error", "message": f"the check failed: {reason}"}),
            )
        except OSError as write_error:
            print(f"error: cannot write {args.state}: {write_error}", file=sys.stderr)
        return 1


def cmd_status(args):
    """The cluster as it is now, observed read-only (no re-plan, no restart, nothing written), beside the last check:
    a status taken just after a reboot must not report workers down that answer by now."""
    config = read_json(args.plan)
    recorded = read_json(args.state, None)
    if config is None:
        print(json.dumps({"verdict": "unknown", "message": f"no deployed plan at {args.plan}", "last_check": recorded}))
        return 0
    now = time.time()
    seen = observe(config, args, recorded or {}, now)
    if not seen["serving"]:
        verdict, message = "down", f"llama-server does not answer {config['url']}/health"
    elif not seen["current"]:
        # A local plan: workers that are down serve nothing now (they are listed, and count when a plan needs them).
        verdict, message = "ok", LOCAL
    elif seen["down_since"]:
        verdict, message = "degraded", describe_down(seen["down_since"], now)
    else:
        verdict, message = "ok", "serving; every worker answers"
    report = state_record(seen, now, verdict, on_replan(seen, verdict, message))
    report["last_check"] = recorded
    print(json.dumps(report, sort_keys=True))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", default="/etc/llamarpc/coordinator/plan.json")
    parser.add_argument("--override", default="/run/llamarpc/coordinator/override.env")
    parser.add_argument("--plan-in-force", default="/run/llamarpc/coordinator/plan-in-force.json")
    parser.add_argument("--state", default="/run/llamarpc/coordinator/supervisor.json")
    parser.add_argument("--probe-timeout", type=float, default=2.0)
    parser.add_argument("--seeding", help="the role's record of the last seeding (default: seeded.json beside --plan)")
    parser.add_argument("--metrics", help="node exporter textfile (*.prom) that each check writes (none: no metrics)")
    commands = parser.add_subparsers(dest="command", required=True)
    wait = commands.add_parser("wait")
    wait.add_argument("--timeout", type=float, default=60.0)
    wait.add_argument("--interval", type=float, default=1.0)
    commands.add_parser("check")
    commands.add_parser("status")
    args = parser.parse_args(argv)
    return {"wait": cmd_wait, "check": guarded_check, "status": cmd_status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
