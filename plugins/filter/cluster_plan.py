# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workers to seed before a load, and the peers they read shards from (module_utils/plan/_coordinator_state)."""

# Each filter is documented beside this file, in plugins/filter/<filter name>.yml.

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.filter.mesh import mesh_address
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_state


def seed_targets(rpc, endpoints, workers, hostvars):
    try:
        seeding = {host: hostvars[host].get("llama_rpc_worker_seeding") for host in workers}
        return _coordinator_state.seed_targets(rpc, list(endpoints), list(workers), seeding)
    except ValueError as exc:
        raise AnsibleFilterError(f"seed_targets: {exc}") from exc


def shard_peers(placement, here, hostvars, user, export_name, identity_file, known_hosts_file):
    try:
        hosts = {row["host"] for row in placement}
        addresses = {host: mesh_address(host, hostvars[host]) for host in hosts if host in hostvars}
        return _coordinator_state.shard_peers(
            list(placement),
            here,
            addresses,
            user=user,
            export_name=export_name,
            identity_file=identity_file,
            known_hosts_file=known_hosts_file,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"shard_peers: {exc}") from exc


class FilterModule:
    """The workers to seed and the peers they read shards from."""

    def filters(self):
        return {"seed_targets": seed_targets, "shard_peers": shard_peers}
