# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus' configuration from the inventory (the monitoring role's scrape targets)."""

# Each filter is documented beside this file, in plugins/filter/<filter name>.yml.

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.filter.mesh import mesh_address
from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _prometheus_config


def prometheus_config(names, hostvars, node_exporter_port=9100, llama_server=None, rule_files=(), **settings):
    """prometheus.yml as a dict: node exporter on every host of ``names`` at its mesh address, llama-server's
    /metrics (``llama_server``: ``{host, port, token_file}``; its address is the host's mesh address)."""
    hosts = [{"name": name, "address": mesh_address(name, hostvars[name])} for name in names]
    server = None
    if llama_server and llama_server.get("host"):
        server = dict(llama_server, address=mesh_address(llama_server["host"], hostvars[llama_server["host"]]))
    try:
        return _prometheus_config.build(hosts, int(node_exporter_port), server, list(rule_files or []), **settings)
    except (ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"prometheus_config: {exc}") from exc


class FilterModule:
    """llamarpc.cluster monitoring filters."""

    def filters(self):
        return {"prometheus_config": prometheus_config}
