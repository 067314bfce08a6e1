# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus' configuration for the cluster, from the inventory's hosts and their mesh addresses.

Two jobs: ``node`` (node exporter on every host, with the collection's own metrics through its textfile collector) and
``llama_server`` (llama-server's ``/metrics`` on the coordinator, with its API key read from a file that only
Prometheus can read: the key never enters this configuration). Every target carries the inventory name as label
``host``, so that rules and dashboards name hosts as the inventory does, not by address.
"""

from __future__ import annotations

import re

DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
ADDRESS = re.compile(r"^[0-9A-Za-z.:\[\]-]+$")


class ConfigError(ValueError):
    """Settings Prometheus would refuse, named before anything is written."""


def _target(address, port):
    if not ADDRESS.match(str(address)):
        raise ConfigError(f"{address!r} is no host address")
    host = f"[{address}]" if ":" in str(address) and not str(address).startswith("[") else str(address)
    return f"{host}:{int(port)}"


def build(
    hosts,
    node_exporter_port=9100,
    llama_server=None,
    rule_files=(),
    scrape_interval="15s",
    evaluation_interval="15s",
    alertmanagers=(),
):
    """The configuration as a dict (YAML for prometheus.yml).

    ``hosts``: ``[{name, address}]`` (every host of the inventory, node exporter on each); ``llama_server``:
    ``{host, address, port, token_file}`` or None (no coordinator, or its metrics off); ``token_file`` may be empty
    when llama-server has no API key. ``alertmanagers``: ``host:port`` items."""
    for name, value in (("scrape_interval", scrape_interval), ("evaluation_interval", evaluation_interval)):
        if not DURATION.match(str(value)):
            raise ConfigError(f"{name} must be a Prometheus duration such as 15s or 1m, not {value!r}")
    names = [host["name"] for host in hosts]
    if len(set(names)) != len(names):
        raise ConfigError(f"a host is listed twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    config = {
        "global": {"scrape_interval": str(scrape_interval), "evaluation_interval": str(evaluation_interval)},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": "node",
                "static_configs": [
                    {"targets": [_target(host["address"], node_exporter_port)], "labels": {"host": host["name"]}}
                    for host in hosts
                ],
            }
        ],
    }
    if llama_server:
        job = {
            "job_name": "llama_server",
            "metrics_path": "/metrics",
            "static_configs": [
                {
                    "targets": [_target(llama_server["address"], llama_server["port"])],
                    "labels": {"host": llama_server["host"]},
                }
            ],
        }
        if llama_server.get("token_file"):
            job["authorization"] = {"type": "Bearer", "credentials_file": str(llama_server["token_file"])}
        config["scrape_configs"].append(job)
    if alertmanagers:
        config["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": [str(item) for item in alertmanagers]}]}]
        }
    return config
