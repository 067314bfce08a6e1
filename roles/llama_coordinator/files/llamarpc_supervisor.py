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

UP_STATES = ("ready", "busy")
#: Checks in a row that must find a worker down before a re-plan leaves it out (besides ``replan_after`` seconds): one
#: check that came late on a loaded machine, or one probe lost in a backlog, is not an outage.
DOWN_CHECKS = 3
LOCAL = "serving locally: the model fits on the coordinator, llama-server computes it with no RPC worker (fit first)"


def probe_all(endpoints, timeout):
    """State of each endpoint (probed concurrently)."""

    def one(endpoint):
        host, port = rpc.parse_endpoint(endpoint)
        return rpc.probe(host, port, timeout=timeout, connect_timeout=timeout).state

    with ThreadPoolExecutor(max_workers=max(len(endpoints), 1)) as pool:
        return dict(zip(endpoints, pool.map(one, endpoints), strict=True))


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
    states.update(probe_all(to_probe, args.probe_timeout) if to_probe else {})
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
    }


def bare_record(now, verdict, message):
    """A state record of a check that probed nothing."""
    return {
        "checked_at": now,
        "verdict": verdict,
        "message": message,
        "down_since": {},
        "down_checks": {},
        "serving": None,
        "workers": {},
        "override": False,
    }


def check_local(args, now):
    """The deployed plan is local and no re-plan is in force: no worker to probe, nothing to re-plan or restore."""
    write_state(args, bare_record(now, "local", "local plan: no RPC worker to watch, nothing to re-plan"))
    return 0


def write_state(args, record):
    write_atomic(args.state, json.dumps(record, indent=1, sort_keys=True))
    print(f"{record['verdict']}: {record['message']}")


def drop_stale_override(args, config, digest, now):
    """An override made from another deployed plan than plan.json's (a re-plan of the plan a deployment replaced,
    e.g. one written while site.yml deployed a local plan): drop it and restart llama-server on the deployed plan."""
    made_from = replan_of(args.override)
    if made_from is None or made_from == digest:
        return False
    drop_override(args)
    restart(config["service"])
    message = "a re-plan of an earlier deployment was in force: dropped it, llama-server restarted on the deployed plan"
    write_state(args, bare_record(now, "restored", message))
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
        return check_local(args, now)
    seen = observe(config, args, read_json(args.state, {"down_since": {}}), now)
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
            verdict = "replanned"
            message = f"re-planned without {', '.join(long_down)}: {planner.describe(new)}"
    elif override and not any(name in down_since for name in seen["deployed_names"]):
        drop_override(args)
        restart(config["service"])
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
    write_state(args, state_record(seen, now, verdict, message))
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
