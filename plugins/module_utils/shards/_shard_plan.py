# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure placement planner for split GGUF shards (used by gguf_shard_plan, through _shard_plan_run).

Input: the shards in file order (name, size) and the candidate hosts with the free bytes gathered at their
model directory, the bytes of partial downloads of this model there (resumed or reclaimed by the fetch) and
the shards already complete there (name -> size).

Rules, in order (all deterministic, independent of the order the hosts are given in):

1. A shard already complete on a candidate host stays there (the coordinator wins if several have it, then
   host name order). A rerun therefore never moves a shard.
2. The other shards, in file order, go first-fit over the host order: the coordinator first, then the other
   hosts by usable bytes (descending), ties by name. Consecutive shards land together, so few hosts (and
   few mounts) are involved.
3. If that leaves a shard without a host, the same first-fit is tried with the largest shards first.
4. If that fails too, PlanError explains how many bytes are missing on which host.

Usable bytes of a host = free + its partial bytes - reserve - room for its RPC tensor cache (never below
zero); only shards still to be written count against it (a shard already in place needs no new room, even if
the reserve is now tighter). A complete copy pinned elsewhere (a redundant copy) is never counted: nothing here
deletes a complete shard.

The tensor cache: an RPC worker whose tensor cache lives on the model's filesystem writes tensor files there
as it loads, up to the cap its pruner enforces. The room it may still take is ``cap - cached`` (the bytes already
cached are already missing from ``free``). That keeps a host's usable bytes the same while its cache fills up (a
byte cached is a byte less free and a byte less to keep), so a plan does not change because the worker loaded.
A cache on another filesystem is not given to the planner at all.
"""

from __future__ import annotations

import re

SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class PlanError(ValueError):
    """The shards cannot be placed; the message says what is missing where."""


def human(size):
    """``3.8 GB``-style text for a byte count (decimal units, like the hub shows sizes)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"  # pragma: no cover - the loop always returns


def check_split_names(names):
    """Raise PlanError unless ``names`` (in order) are one unsplit file or a complete split set."""
    if not names:
        raise PlanError("no shard to place")
    if len(set(names)) != len(names):
        raise PlanError(f"shard names must be unique, got {sorted(names)}")
    matches = [SPLIT_RE.match(name) for name in names]
    if not any(matches):
        if len(names) == 1:
            return
        raise PlanError(
            f"{len(names)} files without split names (PREFIX-00001-of-0000N.gguf): {', '.join(names)}; "
            "llama.cpp loads one file or a split set"
        )
    if not all(matches):
        odd = [name for name, match in zip(names, matches, strict=True) if not match]
        raise PlanError(f"not split GGUF names (PREFIX-0000K-of-0000N.gguf): {', '.join(odd)}")
    prefixes = {match.group("prefix") for match in matches}
    counts = {int(match.group("count")) for match in matches}
    if len(prefixes) != 1 or len(counts) != 1:
        raise PlanError(f"the files belong to more than one split set: {', '.join(names)}")
    count = counts.pop()
    numbers = sorted(int(match.group("no")) for match in matches)
    if numbers != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(numbers))
        raise PlanError(
            f"incomplete split set {prefixes.pop()}: {len(numbers)} of {count} shards "
            f"(missing {', '.join(f'{n:05d}' for n in missing)})"
        )


def pin(shards, hosts, coordinator):
    """``{shard name: host}`` for shards already complete (right size) on a candidate host."""
    pinned = {}
    for shard in shards:
        holders = [
            name for name, host in hosts.items() if host.get("complete", {}).get(shard["name"]) == int(shard["size"])
        ]
        if holders:
            pinned[shard["name"]] = min(holders, key=lambda name: (name != coordinator, name))
    return pinned


def cache_room(host):
    """Bytes a host's tensor cache on the model filesystem may still take: its cap - what it holds, >= 0."""
    cache = host.get("tensor_cache")
    if not cache:
        return 0
    return max(0, int(cache["cap"]) - int(cache.get("cached", 0)))


def usable_bytes(host, reserve):
    """Bytes a host can still take for this model: free + its partial downloads - reserve - cache room, >= 0."""
    return max(0, int(host["free"]) + int(host.get("partial_bytes", 0)) - int(reserve) - cache_room(host))


def host_order(usable, coordinator):
    """Host names in placement order: the coordinator, then by usable bytes descending, ties by name."""
    others = sorted((name for name in usable if name != coordinator), key=lambda name: (-usable[name], name))
    return ([coordinator] if coordinator in usable else []) + others


def plan(shards, hosts, coordinator, reserve=0, model_dir="the model directory"):
    """Assign every shard to one host.

    Args:
        shards: list of ``{"name": str, "size": int}`` in file order (other keys are kept).
        hosts: ``{name: {"free": int, "partial_bytes": int, "complete": {shard name: size}, "tensor_cache":
            {"path": str, "cap": int, "cached": int}}}``; ``tensor_cache`` only for a host whose RPC tensor
            cache shares the model directory's filesystem.
        coordinator: the preferred host (it must be a key of ``hosts``).
        reserve: bytes to keep free on every host.
        model_dir: the model directory, for messages.

    Returns:
        ``{"placement": [shard dict + "host", in file order], "hosts": {name: {"usable", "assigned",
        "left"}}, "order": [host names]}``; a host with a tensor cache also has ``tensor_cache`` (the bytes
        kept for it).

    Raises:
        PlanError: bad input, or the model does not fit (the message says how much is missing where).
    """
    if int(reserve) < 0:
        raise PlanError(f"reserve must not be negative, got {reserve}")
    if coordinator not in hosts:
        raise PlanError(f"the coordinator {coordinator!r} is not among the candidate hosts {sorted(hosts)}")
    for shard in shards:
        if int(shard["size"]) < 0:
            raise PlanError(f"shard {shard['name']} has a negative size")
    for name, host in hosts.items():
        cache = host.get("tensor_cache")
        if cache and (int(cache["cap"]) < 0 or int(cache.get("cached", 0)) < 0):
            raise PlanError(f"the tensor cache of {name} has a negative cap or size: {cache}")
    check_split_names([shard["name"] for shard in shards])

    pinned = pin(shards, hosts, coordinator)
    usable = {name: usable_bytes(hosts[name], reserve) for name in hosts}
    order = host_order(usable, coordinator)

    assignment = _first_fit(shards, order, usable, pinned, largest_first=False)
    if assignment is None:
        assignment = _first_fit(shards, order, usable, pinned, largest_first=True)
    if assignment is None:
        raise PlanError(
            _cache_message(shards, hosts, coordinator, reserve, model_dir, usable)
            or _shortage_message(shards, order, usable, pinned, _caches_counted(hosts, order, model_dir))
        )

    assigned = {name: 0 for name in order}
    placement = []
    for shard in shards:
        host = assignment[shard["name"]]
        if shard["name"] not in pinned:
            assigned[host] += int(shard["size"])
        placement.append({**shard, "host": host})
    summary = {
        name: {"usable": usable[name], "assigned": assigned[name], "left": usable[name] - assigned[name]}
        for name in order
    }
    for name in order:
        if hosts[name].get("tensor_cache"):
            summary[name]["tensor_cache"] = cache_room(hosts[name])
    return {"placement": placement, "hosts": summary, "order": order}


def _first_fit(shards, order, usable, pinned, *, largest_first):
    left = dict(usable)
    assignment = dict(pinned)
    todo = [shard for shard in shards if shard["name"] not in assignment]
    if largest_first:
        todo = sorted(todo, key=lambda shard: (-int(shard["size"]), shard["name"]))
    for shard in todo:
        size = int(shard["size"])
        for host in order:
            if left[host] >= size:
                assignment[shard["name"]] = host
                left[host] -= size
                break
        else:
            return None
    return assignment


def _cache_text(host, model_dir):
    """``20.0 GB tensor cache (PATH, same filesystem as MODEL_DIR)`` for a host with a counted tensor cache."""
    cache = host["tensor_cache"]
    cached = int(cache.get("cached", 0))
    held = f"; {human(cached)} of its {human(int(cache['cap']))} cap already cached" if cached else ""
    return f"{human(cache_room(host))} tensor cache ({cache['path']}, same filesystem as {model_dir}{held})"


def _caches_counted(hosts, order, model_dir):
    """The clause naming every tensor cache that took room (empty when none did)."""
    counted = [f"{name}: {_cache_text(hosts[name], model_dir)}" for name in order if cache_room(hosts[name])]
    if not counted:
        return ""
    return (
        f"; counted on the model filesystem: {'; '.join(counted)} - the RPC worker fills its cache up to that "
        "cap as it loads; lower the cap or keep the cache on another filesystem"
    )


def _cache_message(shards, hosts, coordinator, reserve, model_dir, usable):
    """When the model would fit but for the tensor caches: which hosts their caches crowd out, and by how much."""
    if not any(cache_room(host) for host in hosts.values()):
        return None
    without = {name: {**host, "tensor_cache": None} for name, host in hosts.items()}
    try:
        alone = plan(shards, without, coordinator, reserve, model_dir)
    except PlanError:
        return None  # the model does not fit even without the caches: the usual message, caches named
    lines = []
    for name in alone["order"]:
        host = hosts[name]
        needed = alone["hosts"][name]["assigned"]
        if needed and cache_room(host) and needed > usable[name]:
            free = int(host["free"]) + int(host.get("partial_bytes", 0))
            partial = " (with partial downloads of this model)" if int(host.get("partial_bytes", 0)) else ""
            lines.append(
                f"{name}: needs {human(needed)} for shards + {human(int(reserve))} reserve + "
                f"{_cache_text(host, model_dir)}; has {human(free)} free{partial}"
            )
    if not lines:
        return None  # first-fit found another way without the caches; the usual message names them
    return (
        "the model does not fit once the RPC tensor caches on the model filesystem are counted (a worker fills "
        f"its cache up to the cap as it loads): {'; '.join(lines)} - free space there, add a host, lower the "
        "tensor cache cap or keep the cache on another filesystem"
    )


def _shortage_message(shards, order, usable, pinned, caches=""):
    total = sum(int(shard["size"]) for shard in shards if shard["name"] not in pinned)
    capacity = sum(usable.values())
    per_host = ", ".join(f"{name} {human(usable[name])}" for name in order)
    after = "after the reserve and the tensor caches" if caches else "after the reserve"
    if total > capacity:
        return (
            f"the model does not fit: {len(shards)} shards need {human(total)} ({total} bytes), the candidate "
            f"hosts can take {human(capacity)} {after} ({per_host}); {human(total - capacity)} "
            f"({total - capacity} bytes) missing - free space on a host or add a host{caches}"
        )
    # Enough bytes in total but not in one piece: say which shard fits nowhere and by how much it misses.
    left = dict(usable)
    biggest = max((shard for shard in shards if shard["name"] not in pinned), key=lambda shard: int(shard["size"]))
    size = int(biggest["size"])
    short = ", ".join(f"{name} lacks {human(max(0, size - left[name]))}" for name in order)
    return (
        f"the model does not fit: {human(total)} in {len(shards)} shards would fit in the {human(capacity)} "
        f"the hosts can take in total, but not shard by shard: {biggest['name']} ({human(size)}) fits on no "
        f"host after the others ({short}){caches}"
    )
