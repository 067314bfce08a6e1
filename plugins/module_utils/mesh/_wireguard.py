# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers of the WireGuard mesh: key format, the peers of one host, ``wg show dump`` parsing.

Standard library only and side-effect free (used by ``wireguard_key`` and the ``wireguard_peers`` filter).
"""

from __future__ import annotations

import base64
import binascii
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
