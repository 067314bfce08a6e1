# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``rpc_endpoint_facts``: its options, the endpoints read from them, probed at once, summed up.

The wire protocol and the probe of one endpoint are in ``_rpc_protocol`` (also copied to the coordinator).
"""

from __future__ import annotations

import concurrent.futures

from ansible_collections.llamarpc.cluster.plugins.module_utils import _proc_tcp
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc

FAILABLE_STATES = [state for state in rpc.STATES if state != rpc.STATE_READY]
MAX_PARALLEL_PROBES = 16

ARGUMENT_SPEC = {
    "endpoints": {"type": "list", "elements": "raw", "required": True},
    "default_port": {"type": "int", "default": rpc.DEFAULT_PORT},
    "connect_timeout": {"type": "float", "default": 3.0},
    "timeout": {"type": "float", "default": 3.0},
    "fail_on": {"type": "list", "elements": "str", "default": [], "choices": FAILABLE_STATES},
    "skip_connected": {"type": "bool", "default": False},
}

SERVING_ERROR = "serving a client (an established connection to its port on this host): not probed"

_ENDPOINT_KEYS = frozenset(("host", "port", "name"))


def _port(value, default_port, item):
    if value is None:
        return default_port
    if isinstance(value, bool):
        raise ValueError(f"endpoint {item!r}: port must be an integer")
    try:
        port = int(str(value).strip())
    except ValueError:
        raise ValueError(f"endpoint {item!r}: port {value!r} is not an integer") from None
    if not 1 <= port <= 65535:
        raise ValueError(f"endpoint {item!r}: port {port} is out of range 1-65535")
    return port


def normalize_endpoint(item, default_port):
    """One O(endpoints) item as ``(name, host, port)``; ValueError with a readable message."""
    if isinstance(item, dict):
        unknown = sorted(set(item) - _ENDPOINT_KEYS)
        if unknown:
            raise ValueError(f"endpoint {item!r}: unknown keys {', '.join(unknown)} (known: host, port, name)")
        host = item.get("host")
        if not isinstance(host, str) or not host.strip():
            raise ValueError(f"endpoint {item!r}: 'host' must be a non-empty string")
        host = host.strip()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        port = _port(item.get("port"), default_port, item)
        name = item.get("name")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"endpoint {item!r}: 'name' must be a string")
        return name or rpc.format_endpoint(host, port), host, port
    if isinstance(item, str):
        host, port = rpc.parse_endpoint(item, default_port)
        return rpc.format_endpoint(host, port), host, port
    raise ValueError(f"endpoint {item!r}: expected a 'host:port' string or a dict with host, port, name")


def probe_all(targets, timeout, connect_timeout):
    """Probe each distinct (host, port) once, concurrently; returns {(host, port): ProbeResult}."""
    unique = list(dict.fromkeys((host, port) for _name, host, port in targets))
    if not unique:
        return {}
    workers = min(MAX_PARALLEL_PROBES, len(unique))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(rpc.probe, key[0], key[1], timeout, connect_timeout) for key in unique}
        return {key: future.result() for key, future in futures.items()}


def established_ports(proc="/proc"):
    """The local ports of this host's established TCP connections (``ss state established``)."""
    return {sock.port for sock in _proc_tcp.read(proc) if sock.state == _proc_tcp.ESTABLISHED}


def serving(host, port):
    """What a worker on this host that serves a client is reported as, without a connection: busy."""
    return rpc.ProbeResult(host=host, port=port, state=rpc.STATE_BUSY, error=SERVING_ERROR)


def probe_endpoints(targets, timeout, connect_timeout, connected=frozenset()):
    """One fact per normalized target ``(name, host, port)``, in order (rpc_endpoint_facts' ``rpc_endpoints``); a
    target whose port is in ``connected`` (this host's established connections) is reported serving, not probed."""
    results = {(host, port): serving(host, port) for _name, host, port in targets if port in connected}
    results.update(probe_all([t for t in targets if t[2] not in connected], timeout, connect_timeout))
    facts = []
    for name, host, port in targets:
        item = {"name": name}
        item.update(results[(host, port)].as_dict())
        facts.append(item)
    return facts


def summarize(facts):
    summary = {"total": len(facts)}
    summary.update((state, 0) for state in rpc.STATES)
    for item in facts:
        summary[item["state"]] += 1
    counts = ", ".join(f"{summary[state]} {state}" for state in rpc.STATES if summary[state])
    noun = "endpoint" if len(facts) == 1 else "endpoints"
    parts = [f"{len(facts)} {noun}" + (f": {counts}" if counts else "")]
    parts.extend(f"{item['name']} {item['state']}: {item['error']}" for item in facts if item["error"])
    return summary, "; ".join(parts)


def run_module(module):
    """The module's result (facts, summary, msg); fails through ``module`` on bad input or a state in fail_on."""
    params = module.params
    for option in ("timeout", "connect_timeout"):
        if params[option] <= 0:
            module.fail_json(msg=f"{option} must be greater than 0, got {params[option]}")
    if not 1 <= params["default_port"] <= 65535:
        module.fail_json(msg=f"default_port must be within 1-65535, got {params['default_port']}")

    targets = []
    for item in params["endpoints"]:
        try:
            targets.append(normalize_endpoint(item, params["default_port"]))
        except ValueError as exc:
            module.fail_json(msg=f"invalid endpoint: {exc}")

    # A worker serves one client at a time, and a probe left in its backlog of one makes the next connects time out:
    # with skip_connected an endpoint whose port has an established connection on this host is not connected to.
    connected = established_ports() if params["skip_connected"] else frozenset()
    facts = probe_endpoints(targets, params["timeout"], params["connect_timeout"], connected)
    summary, msg = summarize(facts)
    result = {
        "changed": False,
        "ansible_facts": {"rpc_endpoints": facts},
        "summary": summary,
        "msg": msg,
    }
    failing = [item for item in facts if item["state"] in params["fail_on"]]
    if failing:
        names = ", ".join(f"{item['name']} ({item['state']})" for item in failing)
        result["msg"] = f"{len(failing)} of {len(facts)} endpoints in a state listed in fail_on: {names}. {msg}"
        module.fail_json(**result)
    return result
