#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: port_holders
short_description: Fail when a service's TCP port is held by a program outside the service's own systemd unit
version_added: 0.1.0
description:
  - For each service, finds the processes listening on its TCP port (IPv4 and IPv6) and the systemd unit each runs
    in, from C(/proc), as C(ss -ltnp) does.
  - Fails, before anything changes, when another program holds the port - a hand-started C(rpc-server) of another
    llama.cpp build, a second C(llama-server) - naming the program, its PID and unit; the service's own unit holding
    it (a re-run) is fine.
  - Changes nothing. site.yml's preflight runs it on every host.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
options:
  services:
    description: The services this host runs.
    type: list
    elements: dict
    required: true
    suboptions:
      service:
        description: Name of the service in messages.
        type: str
        required: true
      port:
        description: Its TCP port.
        type: int
        required: true
      unit:
        description: The systemd unit that runs it (C(name.service)).
        type: str
        required: true
"""

EXAMPLES = r"""
- name: No other program holds the worker's port
  llamarpc.cluster.port_holders:
    services:
      - {service: the RPC worker, port: 50052, unit: llamarpc-rpc-worker.service}
"""

RETURN = r"""
holders:
  description: Service to the processes listening on its port (C(pid), C(comm), C(unit), C(address)).
  returned: always
  type: dict
  sample: {"the RPC worker": [{"pid": 812, "comm": "rpc-server", "unit": "llamarpc-rpc-worker.service",
           "address": ["10.0.0.12"]}]}
problems:
  description: One message per port held outside its service's unit (the task fails when there is any).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.preflight import _ports


def main():
    module = AnsibleModule(
        argument_spec={
            "services": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "service": {"type": "str", "required": True},
                    "port": {"type": "int", "required": True},
                    "unit": {"type": "str", "required": True},
                },
            }
        },
        supports_check_mode=True,
    )
    holders, problems = _ports.foreign_holders(module.params["services"])
    if problems:
        module.fail_json(msg="; ".join(problems), holders=holders, problems=problems)
    module.exit_json(changed=False, holders=holders, problems=problems)


if __name__ == "__main__":
    main()
