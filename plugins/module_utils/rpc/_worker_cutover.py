# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An RPC worker restarted onto its new llama.cpp the moment its coordinator lets go of it, with no play's task
between the two.

A worker serves one client at a time, and the connections that arrive meanwhile wait in its accept queue, first come
first served. So a connection queued before llama-server restarts is the first one the old worker answers after
llama-server let go of it: its HELLO reply says exactly that. Holding that connection, the old worker answers nobody
else while its service restarts on the new binary, so a HELLO that llama-server's start sends meanwhile waits in the
queue and is reset with the old worker: only the new one can answer it.

``check_unit`` (the worker's tensor-cache check, a oneshot unit) runs first, while the old worker still serves: the
restart's own check (the unit's ExecStartPre) then finds every file recorded as checked, and hashes nothing in the
window.

``armed`` is called once the connection is queued (or, when nothing listens, once that is known). The module writes
it to ``armed_file`` with the play's ``run_id``, then ``done`` or ``failed`` with it (the file stays, one per worker,
rewritten by each cutover): the play waits for ``armed`` or ``done`` before it restarts llama-server, so that the
cutover's window holds no task of the play, and a waiter that could not queue stops the play before anything restarts.
"""

from __future__ import annotations

import os
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd import _systemd
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd_units import tried

ARGUMENT_SPEC = {
    "endpoint": {"type": "str", "required": True},
    "service": {"type": "str", "required": True},
    "timeout": {"type": "int", "default": 600},
    "armed_file": {"type": "path"},
    "run_id": {"type": "str", "default": ""},
    "check_unit": {"type": "str"},
}
#: How many more times a failed restart of the worker's service is tried, 2 s apart.
RESTART_RETRIES = 2
RESTART_DELAY = 2.0
CONNECT_TIMEOUT = 10.0


class NotReleased(Exception):
    """The worker did not answer the queued connection in time: its client still holds it."""


def _queued_hello(host, port, timeout, armed):
    """The connection queued on the worker and the HELLO reply that ends the wait: ``(connection, reply)``, or
    ``(None, None)`` when nothing accepts connections there (the worker does not run).

    Two connections are queued, one right behind the other: the first asks HELLO in the form of protocol 4 and later,
    the second in the empty form of protocols 1-3. A worker of protocol 1-3 closes the first on its 24-byte HELLO and
    takes the second next, before anything queued after it; a later worker answers the first, and the second is
    dropped unanswered."""
    try:
        first = rpc._Connection(host, port, CONNECT_TIMEOUT)
    except rpc._Verdict as verdict:
        if verdict.state == rpc.STATE_REFUSED:
            armed()
            return None, None
        raise
    try:
        second = rpc._Connection(host, port, CONNECT_TIMEOUT)
    except rpc._Verdict:
        first.close()
        raise
    deadline = time.monotonic() + timeout
    held = None
    try:
        armed()
        reply = rpc._hello(first, rpc.encode_hello(), rpc.HELLO_REPLY.size, timeout)
        held = first
        if reply is None:
            first.close()
            remaining = max(deadline - time.monotonic(), 0.1)
            reply = rpc._hello(second, rpc.encode_legacy_hello(), rpc.LEGACY_HELLO_REPLY.size, remaining)
            held = second
            if reply is None:
                raise rpc._Verdict(rpc.STATE_INCOMPATIBLE, "the worker closed the connection on both HELLO forms")
    except rpc._Verdict as verdict:
        first.close()
        second.close()
        if verdict.state == rpc.STATE_BUSY:
            raise NotReleased(
                f"the worker's client (llama-server) did not let go of it within {timeout} s; the worker was not "
                "restarted"
            ) from None
        raise
    (second if held is first else first).close()
    return held, reply


def restart_when_released(endpoint, restart, timeout, armed=lambda: None):
    """Wait until the worker at ``endpoint`` is let go of by its client, then ``restart()`` while holding it.
    Returns ``(seconds waited, the old worker's protocol or None, restart's result)``."""
    host, port = rpc.parse_endpoint(endpoint)
    started = time.monotonic()
    conn, reply = _queued_hello(host, port, timeout, armed)
    waited = time.monotonic() - started
    try:
        result = restart()
    finally:
        if conn is not None:
            conn.close()
    return waited, (reply.version if reply is not None else None), result


def _say(path, word, run_id, detail=""):
    """``WORD RUN_ID[: detail]`` into ``path`` (none: nothing), written whole: a reader never sees half a line."""
    if path:
        with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
            handle.write(f"{word} {run_id}{': ' + detail if detail else ''}\n")
        os.replace(f"{path}.tmp", path)


def run_module(module):
    p = module.params
    service, path, run_id = p["service"], p["armed_file"], p["run_id"]
    if module.check_mode:
        return {"changed": True, "msg": f"would restart {service} once its client lets go of it"}
    systemctl = _systemd.Systemctl(module, required=True)

    def restart():
        return tried(systemctl, "restart", service, RESTART_RETRIES, RESTART_DELAY)

    # ``timeout`` bounds the check and the wait together: the play's async budget is ``timeout`` and a minute, and a
    # job ended by it after ``armed`` would leave the old worker released and not restarted.
    started = time.monotonic()
    if p["check_unit"]:
        rc, _out, err = systemctl.run("start", p["check_unit"])
        if rc != 0:
            msg = f"systemctl start {p['check_unit']} (the worker's cache check) failed: {err.strip()}"
            msg += "; nothing restarted"
            _say(path, "failed", run_id, msg)
            module.fail_json(msg=msg)
    remaining = p["timeout"] - (time.monotonic() - started)
    if remaining <= 0:
        msg = f"the worker's cache check ({p['check_unit']}) took longer than the {p['timeout']} s timeout"
        msg += "; nothing queued or restarted"
        _say(path, "failed", run_id, msg)
        module.fail_json(msg=msg)
    try:
        waited, protocol, (rc, tries, said) = restart_when_released(
            p["endpoint"], restart, remaining, lambda: _say(path, "armed", run_id)
        )
    except (NotReleased, rpc._Verdict, ValueError) as exc:
        _say(path, "failed", run_id, str(exc))
        module.fail_json(msg=f"{p['endpoint']}: {exc}")
    if rc != 0:
        msg = f"systemctl restart {service} failed ({tries + 1} attempts): {said}"
        _say(path, "failed", run_id, msg)
        module.fail_json(msg=msg, waited=round(waited, 3))
    _say(path, "done", run_id)
    return {"changed": True, "waited": round(waited, 3), "protocol": protocol, "tries": tries, "service": service}
