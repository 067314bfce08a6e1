# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's one mesh contract: a host is reached at llamarpc_mesh_address, else at ansible_host."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.module_utils import _mesh, _tailscale, _wireguard

DOCUMENTATION = r"""
name: mesh_addresses
short_description: Addresses at which hosts are reached over the cluster's mesh
version_added: 0.1.0
description:
  - For each host name, its C(llamarpc_mesh_address) (set by the mesh roles), else its C(ansible_host),
    else the name itself. Workers bind to this address and the coordinator dials it.
  - The same file provides C(mesh_plan), used by the P(llamarpc.cluster.mesh#role) role - for host names, their
    hostvars, a provider and a mesh subnet, a dictionary with C(addresses) (name to mesh address), C(sources)
    (name to V(inventory), V(ansible_host) or V(derived)) and C(errors) (messages about unknown providers,
    addresses that are not IPv4 or not in the subnet, and duplicate addresses).
  - And C(wireguard_peers) - for host names, their hostvars, this host's name and a keepalive, the WireGuard
    peers of this host (every other host that published its C(wireguard_node) fact), sorted by name; and
    C(wireguard_dump) - the output of C(wg show INTERFACE dump) as a dictionary (the private key left out).
  - And C(tailscale_problems) - for an auth key, a login server, tags and a host name, the messages about what
    Tailscale would refuse (the key itself never appears in them).
options:
  _input:
    description: Host names (for example C(groups['rpc_workers'])).
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
author:
  - llamarpc.cluster contributors (@llamarpc)
"""

EXAMPLES = r"""
- name: Addresses of the coordinators
  ansible.builtin.debug:
    msg: "{{ groups['coordinator'] | llamarpc.cluster.mesh_addresses(hostvars) }}"

- name: The mesh plan of the play's hosts for WireGuard
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | llamarpc.cluster.mesh_plan(hostvars, 'wireguard', '10.99.0.0/24') }}"
"""

RETURN = r"""
_value:
  description: One address per host, in order.
  type: list
  elements: str
"""


def mesh_address(name, variables):
    """The address of one host from its variables."""
    for key in ("llamarpc_mesh_address", "ansible_host"):
        value = variables.get(key)
        if value:
            return str(value)
    return str(name)


def mesh_addresses(names, hostvars):
    """The address of each host in ``names``."""
    return [mesh_address(name, hostvars[name]) for name in names]


def mesh_plan(names, hostvars, provider, subnet=""):
    """Mesh addresses the provider will give ``names``, their sources and the inventory's errors."""
    return _mesh.plan(list(names), hostvars, str(provider), str(subnet))


def wireguard_peers(names, hostvars, me, keepalive=0):
    """The WireGuard [Peer] entries of host ``me``."""
    try:
        return _wireguard.peers(list(names), hostvars, str(me), keepalive)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def wireguard_dump(text):
    """``wg show INTERFACE dump`` parsed."""
    try:
        return _wireguard.parse_dump(str(text))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def tailscale_problems(auth_key, login_server="", tags=(), hostname=""):
    """What is wrong with Tailscale settings (auth key format, tags, host name); empty when nothing is."""
    problems = [_tailscale.auth_key_problem(auth_key, login_server), _tailscale.hostname_problem(hostname)]
    return [problem for problem in problems if problem] + _tailscale.tag_problems(list(tags or []))


class FilterModule:
    """llamarpc.cluster filters."""

    def filters(self):
        return {
            "mesh_addresses": mesh_addresses,
            "mesh_plan": mesh_plan,
            "wireguard_peers": wireguard_peers,
            "wireguard_dump": wireguard_dump,
            "tailscale_problems": tailscale_problems,
        }
