# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers of the WireGuard mesh: key format, the peers of one host, ``wg show dump`` and ``ip -json address``
parsing, and what to do to make a running interface match its configuration.

Standard library only and side-effect free (used by ``wireguard_key``, ``wireguard_interface`` and the
``wireguard_peers`` filter).
"""

from __future__ import annotations

import base64
import binascii
import json
import re

#: A WireGuard key: 32 bytes in standard base64 (44 characters, one '=' of padding).
_KEY_RE = re.compile(r"^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$")
#: The fact each host of the mesh publishes for the others (see roles/wireguard).
NODE_FACT = "wireguard_node"


def is_key(value):
    """True when ``value`` is a WireGuard key (private or public) as ``wg`` prints it."""
    if not isinstance(value, str) or not _KEY_RE.match(value):
        return False
    try:
        return len(base64.b64decode(value, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def endpoint(host, port):
    """``host:port`` as WireGuard's Endpoint wants it (IPv6 in brackets)."""
    host = str(host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{int(port)}"


def peers(names, hostvars, me, keepalive=0):
    """The [Peer] entries of host ``me``: every other host of ``names`` that published its node fact.

    Each host's fact is ``{"public_key", "address", "endpoint", "port"}``. Returns a list sorted by name of
    ``{"name", "public_key", "allowed_ips", "endpoint", "keepalive"}``; hosts without the fact or its key
    (unreachable, not in the play, or in check mode before their key exists) are left out. Raises ValueError
    on a malformed fact or a public key used twice.
    """
    result = []
    seen = {}
    for name in sorted(set(names)):
        node = hostvars[name].get(NODE_FACT) if name in hostvars else None
        key = node.get("public_key") if node else None
        if not key:
            # No fact, or check mode on a host whose key does not exist yet.
            continue
        if not is_key(key):
            raise ValueError(f"{name}: {NODE_FACT}.public_key {key!r} is not a WireGuard public key")
        if key in seen:
            raise ValueError(f"{name} and {seen[key]} have the same WireGuard public key: they share a key file")
        seen[key] = name
        if name == me:
            continue
        result.append(
            {
                "name": name,
                "public_key": key,
                "allowed_ips": f"{node['address']}/32",
                "endpoint": endpoint(node["endpoint"], node["port"]),
                "keepalive": int(keepalive),
            }
        )
    return result


def parse_dump(text):
    """``wg show INTERFACE dump`` as ``{"interface": {...}, "peers": [{...}, ...]}``.

    The first line is the interface (private key, public key, listen port, fwmark); every other line is a
    peer (public key, preshared key, endpoint, allowed ips, latest handshake, rx bytes, tx bytes, keepalive).
    The private key is not returned, only whether the interface has one.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("empty output of wg show dump")
    head = lines[0].split("\t")
    if len(head) != 4:
        raise ValueError(f"unexpected interface line of wg show dump: {len(head)} fields")
    interface = {
        "public_key": None if head[1] == "(none)" else head[1],
        "has_private_key": head[0] != "(none)",
        "listen_port": int(head[2]),
        "fwmark": head[3],
    }
    result = []
    for line in lines[1:]:
        fields = line.split("\t")
        if len(fields) != 8:
            raise ValueError(f"unexpected peer line of wg show dump: {len(fields)} fields")
        result.append(
            {
                "public_key": fields[0],
                "endpoint": None if fields[2] == "(none)" else fields[2],
                "allowed_ips": [] if fields[3] == "(none)" else fields[3].split(","),
                "latest_handshake": int(fields[4]),
                "rx_bytes": int(fields[5]),
                "tx_bytes": int(fields[6]),
                "persistent_keepalive": 0 if fields[7] == "off" else int(fields[7]),
            }
        )
    return {"interface": interface, "peers": result}


#: The link kind of a WireGuard interface to the implementation serving it (wireguard-go makes a TUN device).
IMPLEMENTATIONS = {"wireguard": "kernel", "tun": "userspace"}


def parse_link(text):
    """``ip -json -details address show dev INTERFACE`` as ``{"mtu", "addresses", "implementation"}``.

    ``addresses`` are the interface's IPv4 addresses as ``address/prefix``, in the order ``ip`` lists them;
    ``implementation`` is V(kernel), V(userspace) or None (another kind of link) from its link kind.
    """
    try:
        links = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"unexpected output of ip -json address: {exc}") from exc
    if not isinstance(links, list) or len(links) != 1 or not isinstance(links[0], dict):
        raise ValueError("unexpected output of ip -json address: not one link")
    link = links[0]
    kind = (link.get("linkinfo") or {}).get("info_kind")
    return {
        "mtu": int(link.get("mtu") or 0),
        "addresses": [
            f"{info.get('local')}/{info.get('prefixlen')}"
            for info in link.get("addr_info") or []
            if info.get("family") == "inet"
        ],
        "implementation": IMPLEMENTATIONS.get(kind),
    }


def _peer_view(public_key, allowed_ips, keepalive):
    if isinstance(allowed_ips, str):
        allowed_ips = [allowed_ips] if allowed_ips else []
    return (public_key, tuple(sorted(allowed_ips)), int(keepalive or 0))


def peer_differences(dump, want_peers, want_port):
    """What differs between the running interface (``parse_dump``) and the configuration, as sentences.

    Compared: the peers' public keys, allowed IPs and keepalives, and the listen port. Endpoints are not: WireGuard
    moves a peer's endpoint to wherever its packets come from (roaming).
    """
    differences = []
    if dump["interface"]["listen_port"] != int(want_port):
        differences.append(f"listen port {dump['interface']['listen_port']} instead of {int(want_port)}")
    live = {_peer_view(p["public_key"], p["allowed_ips"], p["persistent_keepalive"]) for p in dump["peers"]}
    wanted = {_peer_view(p["public_key"], p["allowed_ips"], p.get("keepalive", 0)) for p in want_peers}
    live_keys = {view[0] for view in live}
    wanted_keys = {view[0] for view in wanted}
    missing = len(wanted_keys - live_keys)
    extra = len(live_keys - wanted_keys)
    changed = len({view[0] for view in live ^ wanted} & live_keys & wanted_keys)
    for count, what in (
        (missing, "missing"),
        (extra, "not configured"),
        (changed, "with other allowed IPs or keepalive"),
    ):
        if count:
            differences.append(f"{count} peer{'s' if count > 1 else ''} {what}")
    return differences


def decide(unit, link, dump, want, config_changed=False):
    """The actions that make the interface run as configured, and why: ``(actions, reasons)``.

    ``unit``: ``{"found", "enabled", "active"}`` of wg-quick's unit; ``link``: ``parse_link`` of the interface or
    None (no interface); ``dump``: ``parse_dump`` of it or None (no WireGuard interface); ``want``: ``{"addresses",
    "mtu", "port", "peers"}`` from the configuration; ``config_changed``: the configuration file was just rewritten.

    Actions, in order: V(enable) (at boot), then at most one of V(start) (the unit is not up: starting applies
    everything), V(restart) (the interface is gone, lost its private key, or has another address or MTU: only
    wg-quick up sets those) and V(sync) (peers or port differ, or the configuration changed: applied in place).
    """
    actions, reasons = [], []
    if not unit["found"]:
        return ["enable", "start"], ["the unit is not installed yet"]
    if not unit["enabled"]:
        actions.append("enable")
        reasons.append("the unit does not start at boot")
    if not unit["active"]:
        return actions + ["start"], reasons + ["the unit is not running"]
    if link is None or dump is None:
        return actions + ["restart"], reasons + ["the interface is gone"]
    if not dump["interface"]["has_private_key"]:
        return actions + ["restart"], reasons + ["the interface has lost its private key"]
    restart = []
    if link["addresses"] != list(want["addresses"]):
        restart.append(f"address {', '.join(link['addresses']) or 'none'} instead of {', '.join(want['addresses'])}")
    if link["mtu"] != int(want["mtu"]):
        restart.append(f"MTU {link['mtu']} instead of {int(want['mtu'])}")
    if restart:
        return actions + ["restart"], reasons + restart
    sync = peer_differences(dump, want["peers"], want["port"])
    if config_changed:
        sync.append("the configuration changed")
    if sync:
        return actions + ["sync"], reasons + sync
    return actions, reasons
