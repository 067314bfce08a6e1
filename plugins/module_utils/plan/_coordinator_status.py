# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The coordinator's status record (llama_coordinator_status): the deployed plan, llama-server's /health, the
supervisor's verdict, every SSHFS mount of shards answering a bounded listing or not, and each worker's memory.

The pure parts (the mounts from mountinfo, an exit code as a mount state, the record) are separate from the reads,
which take what they run through as arguments.
"""

from __future__ import annotations

import json
import re
import urllib.error

from ansible.module_utils.common.text.formatters import bytes_to_human
from ansible.module_utils.urls import open_url

#: Seconds a mount's listing may take (a hung SSHFS - a stopped or deadlocked sshfs, the serving host gone - blocks it).
LISTING_SECONDS = 5
MOUNT_OK = "ok"
MOUNT_HUNG = f"HUNG (no answer within {LISTING_SECONDS} s)"
MOUNT_ERROR = "ERROR"
#: Exit codes of ``timeout --signal=KILL`` when the listing was killed (124: timed out; 137 and -9: killed).
HUNG_CODES = (124, 137, -9)
HEALTH_TIMEOUT = 10


def mount_state(rc):
    """A mount's state from its bounded listing's exit code: ok, HUNG, or ERROR (any other failure)."""
    if rc == 0:
        return MOUNT_OK
    if rc in HUNG_CODES:
        return MOUNT_HUNG
    return MOUNT_ERROR


def _unescape(field):
    """A mountinfo path field with its octal escapes (``\\040`` for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def sshfs_mounts(mountinfo, root):
    """The mount points of fuse.sshfs mounts at or below ``root``, in mountinfo's order, read from the text of
    /proc/self/mountinfo (reading it touches no mount)."""
    prefix = root.rstrip("/")
    targets = []
    for line in mountinfo.splitlines():
        fields, _sep, rest = line.partition(" - ")
        parts, after = fields.split(), rest.split()
        if len(parts) < 5 or not after or after[0] != "fuse.sshfs":
            continue
        target = _unescape(parts[4])
        if target == prefix or target.startswith(prefix + "/"):
            targets.append(target)
    return targets


def health_text(status, body):
    """``/health`` as the record shows it: the HTTP status and llama-server's word (``200 ok``, ``503 Loading
    model``), or ``no answer: `` and why (``status`` is then the reason, a string)."""
    if not isinstance(status, int):
        return f"no answer: {status}"
    try:
        doc = json.loads(body or "{}")
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    error = doc.get("error") if isinstance(doc.get("error"), dict) else {}
    return f"{status} {doc.get('status') or error.get('message') or ''}"


def read_health(url, timeout=HEALTH_TIMEOUT):
    """(status, body) of ``url``/health; (reason, None) when nothing answered."""
    try:
        with open_url(url.rstrip("/") + "/health", timeout=timeout, use_proxy=False) as reply:
            return int(reply.getcode()), reply.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", errors="replace")
    except Exception as exc:  # noqa: BLE001 - refused, timed out, no route: the record says so
        return str(getattr(exc, "reason", exc)), None


def memory_available(workers, memory):
    """Each worker's available memory as ``host: 4.00 GB``; a worker without figures (it did not answer: its sshd
    down, the host gone) is listed after the others as ``host: no answer``."""
    answered = [name for name in workers if (memory.get(name) or {}).get("available") is not None]
    return [f"{name}: {bytes_to_human(int(memory[name]['available']))}" for name in answered] + [
        f"{name}: no answer" for name in workers if name not in answered
    ]


def record(deployed, health, supervisor, mounts, workers, memory):
    """The status record: ``api``, ``health``, ``supervisor`` (its verdict, with its last timer check), ``plan`` (the
    table), ``mounts`` (``target: state``), ``workers`` (the supervisor's per-worker state) and ``memory_available``."""
    return {
        "api": deployed.get("url"),
        "health": health,
        "supervisor": supervisor,
        "plan": (deployed.get("plan") or {}).get("table", []),
        "mounts": [f"{target}: {state}" for target, state in mounts],
        "workers": supervisor.get("workers") or {},
        "memory_available": memory_available(workers, memory),
    }
