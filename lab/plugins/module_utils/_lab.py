# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers for the local lab: validation, address plans, sizes, mount table and command lines.

Everything here is side-effect free (or reads only files it is given) so it can be unit-tested;
the modules ``lab_plan``, ``lab_image``, ``lab_network`` and ``lab_host`` do the work.
"""

from __future__ import annotations

import glob
import hashlib
import ipaddress
import json
import os
import re

from ansible.module_utils.common.text.formatters import human_to_bytes

# Lab hosts are numbered from this offset inside the subnet: .1 is the controller's bridge address,
# a few more are kept free for test fixtures that want an address of their own.
HOST_OFFSET = 10

_NAME_RE = re.compile(r"^[a-z](?:[a-z0-9-]{0,30}[a-z0-9])?$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)\s*$", re.IGNORECASE)
_RATE_FACTORS = {
    "bit": 1,
    "kbit": 1000,
    "mbit": 1000**2,
    "gbit": 1000**3,
    "bps": 8,
    "kbps": 8 * 1000,
    "mbps": 8 * 1000**2,
    "gbps": 8 * 1000**3,
}

# Bump when the way a base image is prepared changes, so cached images are rebuilt.
IMAGE_RECIPE = 4


class LabError(ValueError):
    """Raised for a lab request that cannot succeed; the message is meant for the user."""


def validate_name(name):
    """Return ``name`` if it is a usable host name (RFC 1123 label, lower case, <= 32 chars)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise LabError(
            f"invalid lab host name {name!r}: use 1-32 lower-case letters, digits and '-', "
            "starting with a letter and not ending with '-'"
        )
    return name


def parse_size(value, what="size"):
    """Bytes from ``4096``, ``512M``, ``2G`` or ``2GB`` (Ansible's human_to_bytes); None/0/'' -> 0."""
    if value is None or value in {"", 0}:
        return 0
    if isinstance(value, bool) or (isinstance(value, int) and value < 0):
        raise LabError(f"invalid {what} {value!r}: a size in bytes or with K, M, G or T")
    try:
        return human_to_bytes(value)
    except (TypeError, ValueError):
        raise LabError(f"invalid {what} {value!r}: a size in bytes or with K, M, G or T") from None


def parse_rate(value):
    """Parse a tc rate such as ``100mbit`` into bits per second; None/'' -> 0 (no cap)."""
    if value is None or value in {"", 0}:
        return 0
    match = _RATE_RE.match(str(value))
    if not match:
        raise LabError(f"invalid bandwidth {value!r}: use a tc rate such as 100mbit, 20mbps or 1gbit")
    number, unit = match.groups()
    bits = int(float(number) * _RATE_FACTORS[unit.lower()])
    if bits < 8000:
        raise LabError(f"invalid bandwidth {value!r}: at least 8kbit")
    return bits


def short_id(*parts, length=10):
    """A stable short hex id for names limited in length (interface names have 15 characters)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


def plan(lab_name, hosts, subnet, defaults=None):
    """Validate a lab request and compute every host's address and kernel object names.

    ``hosts`` is a list of dicts with at least ``name``; optional ``groups``, ``address``,
    ``data_size``, ``memory_max`` and ``bandwidth``. ``defaults`` supplies the optional keys.
    Returns ``{"bridge_address": "10.x.y.1/24", "hosts": [...]}``; raises LabError on bad input.
    """
    defaults = defaults or {}
    validate_name(lab_name)
    try:
        net = ipaddress.ip_network(subnet, strict=True)
    except ValueError as exc:
        raise LabError(f"invalid lab subnet {subnet!r}: {exc}") from None
    if net.version != 4 or not net.is_private:
        raise LabError(f"lab subnet {subnet} must be a private IPv4 network")
    usable = list(net.hosts())
    capacity = max(0, len(usable) - HOST_OFFSET)
    if not hosts:
        raise LabError("the lab needs at least one host")
    if len(hosts) > capacity:
        raise LabError(
            f"{len(hosts)} hosts do not fit in {subnet}: it holds {capacity} lab hosts "
            f"(addresses from .{HOST_OFFSET + 1}); choose a larger subnet or fewer hosts"
        )
    bridge_ip = usable[0]
    seen_names, seen_addrs, out = set(), {str(bridge_ip)}, []
    for index, spec in enumerate(hosts):
        if not isinstance(spec, dict) or "name" not in spec:
            raise LabError(f"lab host #{index + 1} must be a mapping with a 'name'")
        name = validate_name(spec["name"])
        if name in seen_names:
            raise LabError(f"lab host name {name!r} is used twice")
        seen_names.add(name)
        address = spec.get("address") or str(usable[HOST_OFFSET + index])
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            raise LabError(f"lab host {name}: invalid address {address!r}") from None
        if ip not in net or ip in (net.network_address, net.broadcast_address):
            raise LabError(f"lab host {name}: address {address} is not a host address of {subnet}")
        if str(ip) in seen_addrs:
            raise LabError(f"lab host {name}: address {address} is already taken")
        seen_addrs.add(str(ip))
        merged = dict(defaults)
        merged.update({k: v for k, v in spec.items() if v is not None})
        groups = merged.get("groups") or []
        if isinstance(groups, str) or not all(isinstance(g, str) and g for g in groups):
            raise LabError(f"lab host {name}: groups must be a list of group names")
        out.append(
            {
                "name": name,
                "address": str(ip),
                "prefixlen": net.prefixlen,
                "groups": list(groups),
                "netns": f"llrpc-{lab_name}-{name}",
                "veth": "llv" + short_id(lab_name, name, length=11),
                "data_size": parse_size(merged.get("data_size"), f"data_size of {name}"),
                "memory_max": parse_size(merged.get("memory_max"), f"memory_max of {name}"),
                "bandwidth": parse_rate(merged.get("bandwidth")),
            }
        )
    return {"bridge_address": f"{bridge_ip}/{net.prefixlen}", "hosts": out}


def default_hosts(count, coordinator_count=1, prefix="node"):
    """The seed's layout: ``count`` hosts, the first ``coordinator_count`` coordinate and every host
    runs an RPC worker (the seed's master did both)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise LabError(f"lab_host_count must be a whole number >= 1, got {count!r}")
    return [
        {
            "name": f"{prefix}{i}",
            "groups": (["coordinator"] if i <= coordinator_count else []) + ["rpc_workers"],
        }
        for i in range(1, count + 1)
    ]


def image_key(suite, variant, packages, arch, admin_user):
    """Cache key of a base image: everything that changes its content."""
    doc = {
        "suite": suite,
        "variant": variant,
        "packages": sorted(set(packages)),
        "arch": arch,
        "admin_user": admin_user,
        "recipe": IMAGE_RECIPE,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def mirror_from_sources(text, suite):
    """Find the Debian mirror serving ``suite`` in an apt sources file (one-line or deb822 format).

    The lab builds its image from the same mirror the controller already uses, so no registry
    address is written into the project.
    """
    # deb822 stanzas
    for stanza in re.split(r"\n\s*\n", text):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split():
            if fields.get("enabled", "yes").lower() == "no":
                continue
            uris = fields.get("uris", "").split()
            if uris:
                return uris[0]
    # one-line format
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) >= 3 and parts[0] == "deb":
            idx = 1
            if parts[1].startswith("["):
                while idx < len(parts) and not parts[idx].endswith("]"):
                    idx += 1
                idx += 1
            if idx + 1 < len(parts) and parts[idx + 1] == suite:
                return parts[idx]
    return None


def _unescape_mount(path):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mount_points(mountinfo_text):
    """Mount points listed in a /proc/self/mountinfo text, in order, octal escapes decoded."""
    points = []
    for line in mountinfo_text.splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.append(_unescape_mount(fields[4]))
    return points


def nspawn_argv(nspawn, name, root, netns_path, binds=(), capabilities=("CAP_NET_ADMIN",)):
    """The systemd-nspawn command line measured to boot a lab host on these machines."""
    argv = [
        nspawn,
        "--quiet",
        "-D",
        root,
        "-M",
        name,
        "--register=no",
        "--keep-unit",
        "--boot",
        f"--network-namespace-path={netns_path}",
        "--console=passive",
        "--bind=/dev/fuse",
        "--bind=/dev/net/tun",
    ]
    if capabilities:
        argv.append("--capability=" + ",".join(capabilities))
    for src, dst in binds:
        argv.append(f"--bind={src}:{dst}")
    return argv


def tbf_args(rate_bits):
    """tc tbf parameters for a bandwidth cap: burst sized for ~10 ms at the rate (at least 32 KiB)."""
    burst = max(32 * 1024, rate_bits // 8 // 100)
    return ["tbf", "rate", f"{rate_bits}bit", "burst", str(burst), "latency", "50ms"]


def find_mirror(suite):
    """The first mirror serving ``suite`` in the controller's apt sources, or None."""
    files = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.sources"))
    files += sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                mirror = mirror_from_sources(handle.read(), suite)
        except OSError:
            continue
        if mirror:
            return mirror
    return None


def netns_pids(netns_path, proc="/proc"):
    """PIDs of every process in the network namespace bound at ``netns_path`` (what ``ip netns pids`` lists).

    A lab host's processes are found by its namespace, not through its systemd-nspawn process: when nspawn dies
    (SIGKILL, OOM), the container's systemd and every service keep running, reparented to the controller's PID 1."""
    try:
        target = os.stat(netns_path)
    except OSError:
        return []
    pids = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            found = os.stat(os.path.join(proc, entry, "ns", "net"))
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino):
            pids.append(int(entry))
    return sorted(pids)


def container_init(nspawn_pid, proc="/proc"):
    """PID (in the caller's PID namespace) of the init a ``systemd-nspawn --boot`` process runs: its only child.

    None when the nspawn process is gone or has no single child (not started yet, or still forking)."""
    children = set()
    try:
        tasks = os.listdir(f"{proc}/{nspawn_pid}/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"{proc}/{nspawn_pid}/task/{task}/children", encoding="ascii") as handle:
                children.update(handle.read().split())
        except OSError:  # the thread ended meanwhile
            continue
    return int(children.pop()) if len(children) == 1 else None
