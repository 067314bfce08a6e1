# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mesh plan: which IPv4 address each host has on the cluster's mesh, and what is wrong with the inventory.

Standard library only and side-effect free (used by the ``mesh`` filters and unit-tested).

Providers:

* ``none``: a host's ``llamarpc_mesh_address`` from the inventory, else its ``ansible_host``.
* ``wireguard``: a host's ``llamarpc_mesh_address`` from the inventory (inside the mesh subnet), else an address
  derived from the host alone, so adding or removing another host never moves it: the host bits of its
  ``ansible_host`` (10.213.0.11 -> 10.99.0.11 in 10.99.0.0/24), or when that is not an IPv4 address or lands on
  the subnet's network or broadcast address, a SHA-256 of the inventory name. Two hosts on one address are an
  error the user settles by setting ``llamarpc_mesh_address`` on one of them.
* ``tailscale``: the address comes from Tailscale once the host joined; nothing to plan.
"""

from __future__ import annotations

import hashlib
import ipaddress

PROVIDERS = ("none", "wireguard", "tailscale")


def ipv4(value):
    """``value`` as an IPv4Address, or None when it is not a plain dotted-quad IPv4 address."""
    try:
        address = ipaddress.IPv4Address(str(value).strip())
    except ValueError:
        return None
    return address if str(address) == str(value).strip() else None


def derive_address(subnet, name, anchor=None):
    """The mesh address of host ``name`` in ``subnet`` (an IPv4Network), from ``anchor`` (ansible_host) or the name."""
    size = subnet.num_addresses
    if size < 4:
        raise ValueError(f"mesh subnet {subnet} is too small: it needs room for hosts (a /30 or larger)")
    base = int(subnet.network_address)
    anchor_ip = ipv4(anchor) if anchor is not None else None
    if anchor_ip is not None:
        offset = int(anchor_ip) & int(subnet.hostmask)
        if 0 < offset < size - 1:
            return str(ipaddress.IPv4Address(base + offset))
    digest = int.from_bytes(hashlib.sha256(str(name).encode("utf-8")).digest()[:8], "big")
    return str(ipaddress.IPv4Address(base + 1 + digest % (size - 2)))


def plan(names, hostvars, provider, subnet):
    """The mesh address of every host in ``names``, where it came from, and the inventory's errors.

    Returns ``{"addresses": {name: address}, "sources": {name: source}, "errors": [message, ...]}``;
    ``source`` is ``inventory`` (llamarpc_mesh_address), ``ansible_host`` or ``derived``. For the tailscale
    provider the addresses are unknown before the hosts join, so they are left out (only an explicit
    ``llamarpc_mesh_address`` is checked for duplicates).
    """
    errors = []
    addresses = {}
    sources = {}
    if provider not in PROVIDERS:
        errors.append(
            f"unknown mesh provider {provider!r}: llamarpc_mesh_provider must be one of {', '.join(PROVIDERS)}"
        )
        return {"addresses": addresses, "sources": sources, "errors": errors}
    network = None
    if provider == "wireguard":
        try:
            network = ipaddress.IPv4Network(str(subnet), strict=True)
        except ValueError as exc:
            errors.append(f"llamarpc_mesh_subnet {subnet!r} is not an IPv4 network such as 10.99.0.0/24 ({exc})")
            return {"addresses": addresses, "sources": sources, "errors": errors}
        if network.num_addresses < 4:
            errors.append(f"llamarpc_mesh_subnet {subnet} is too small: use a /30 or larger")
            return {"addresses": addresses, "sources": sources, "errors": errors}

    for name in names:
        variables = hostvars[name]
        explicit = variables.get("llamarpc_mesh_address") or ""
        anchor = variables.get("ansible_host") or ""
        if explicit:
            address, source = str(explicit).strip(), "inventory"
        elif provider == "none":
            address, source = str(anchor or name), "ansible_host"
        elif provider == "wireguard":
            address, source = derive_address(network, name, anchor), "derived"
        else:
            continue
        if ipv4(address) is None:
            what = "llamarpc_mesh_address" if source == "inventory" else "ansible_host"
            errors.append(
                f"{name}: mesh address {address!r} (from {what}) is not a numeric IPv4 address; "
                "set llamarpc_mesh_address"
            )
            continue
        if network is not None and source == "inventory":
            ip = ipaddress.IPv4Address(address)
            if ip not in network or ip in (network.network_address, network.broadcast_address):
                errors.append(
                    f"{name}: llamarpc_mesh_address {address} is not a host address of the mesh subnet {network} "
                    "(llamarpc_mesh_subnet)"
                )
                continue
        addresses[name] = address
        sources[name] = source

    holders = {}
    for name, address in addresses.items():
        holders.setdefault(address, []).append(name)
    for address, hosts in holders.items():
        if len(hosts) > 1:
            how = ", ".join(f"{host} ({sources[host]})" for host in hosts)
            errors.append(
                f"duplicate mesh address {address}: {how}; give all but one of them their own llamarpc_mesh_address"
            )
    return {"addresses": addresses, "sources": sources, "errors": errors}
