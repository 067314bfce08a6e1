# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's one mesh contract: a host is reached at llamarpc_mesh_address, else at ansible_host."""

# Each filter is documented beside this file, in plugins/filter/<filter name>.yml.

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import _mesh, _tailscale, _wireguard


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
