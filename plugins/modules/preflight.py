#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight
short_description: Check one host's variables for the collection's roles before anything changes
version_added: 0.1.0
description:
  - An action that runs on the controller only and never connects to the host. Run it on every host of a first play
    with C(any_errors_fatal), as C(playbooks/site.yml) does, so that nothing changes anywhere when one host's
    variables are wrong; a host fails with every problem found at once.
  - Checks the variables of each role of O(roles) that runs on the host against the role's argument specs, the mesh
    settings and the model source, that no two services of O(ports) share a TCP port, and that every variable named
    with one of O(prefixes) is known (else a did-you-mean).
  - A value that refers to something not known yet (a fact set later in the run) is not checked; it is returned in
    RV(deferred). Values of C(no_log) options never appear in messages.
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  roles:
    description:
      - Role of the collection (short name) to the groups of the hosts it runs on (C(all) for every host), as the
        playbook's plays apply them.
    type: dict
    default: {}
  ports:
    description: TCP services that may share a host, each the variable holding its port and the groups running it.
    type: list
    elements: dict
    default: []
    suboptions:
      service:
        description: Name of the service in messages.
        type: str
        required: true
      variable:
        description: The variable holding its port (a role option, whose default applies when it is unset).
        type: str
        required: true
      unit:
        description:
          - The variable holding the name of its systemd unit, without C(.service) (a role option). Given, the
            service is returned in RV(listeners), for M(llamarpc.cluster.port_holders).
        type: str
      unit_suffix:
        description: Appended to the name O(ports[].unit) holds, before C(.service) (a unit named after another's).
        type: str
        default: ""
      enabled_by:
        description: The variable holding a boolean that turns the service on (a role option); false, it is not checked.
        type: str
      groups:
        description: The groups of the hosts that run the service.
        type: list
        elements: str
        required: true
  known:
    description:
      - Variable names to accept besides the roles' options - the collection's inventory-level variables and the
        facts its roles set.
    type: list
    elements: str
    default: []
  prefixes:
    description: A variable whose name starts with one of these must be known.
    type: list
    elements: str
    default: [llama_, llamarpc_, tailscale_, wireguard_, open_webui_, lsyncd_, sshfs_, mesh_, monitoring_]
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: It changes nothing, in check mode or not.
notes:
  - It reads the collection's C(roles/*/meta/argument_specs.yml) on the controller.
  - Checks that need the hosts themselves (a bind address among a host's addresses, free disk space, an installed
    package) stay in the roles' own preflight tasks.
  - Every check in detail - C(docs/preflight.md).
seealso:
  - module: ansible.builtin.validate_argument_spec
"""

EXAMPLES = r"""
- name: Preflight (nothing changes anywhere unless the variables make sense)
  hosts: all
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - name: Check every role's arguments, the model source, the mesh, the ports and the variable names
      llamarpc.cluster.preflight:
        roles:
          mesh: [all]
          llama_rpc_worker: [rpc_workers]
          llama_model: [coordinator]
          llama_coordinator: [coordinator]
        ports:
          - {service: llama-server, variable: llama_coordinator_port, groups: [coordinator]}
          - {service: the RPC worker, variable: llama_rpc_worker_port, unit: llama_rpc_worker_service,
             groups: [rpc_workers]}
          - {service: Open WebUI, variable: open_webui_port, groups: [webui]}
        known: [llamarpc_mesh_address, llama_model_path]
"""

RETURN = r"""
problems:
  description: What is wrong, one message each (empty when nothing is); the task fails when there is any.
  returned: always
  type: list
  elements: str
  sample:
    - "unknown variable `llamarpc_mesh_provder`: did you mean `llamarpc_mesh_provider`?"
    - "node1: port 8080 is used by llama-server (llama_coordinator_port) and Open WebUI (open_webui_port): each needs
      a port of its own"
roles:
  description: The roles whose arguments were validated on this host.
  returned: always
  type: list
  elements: str
  sample: [mesh, llama_rpc_worker, llama_cpp, llama_model, llama_coordinator]
ports:
  description: Service of O(ports) run on this host to its port.
  returned: always
  type: dict
  sample: {"llama-server": 8080, "the RPC worker": 50052}
listeners:
  description: The services of O(ports) with a O(ports[].unit) run on this host, their ports and units.
  returned: always
  type: list
  elements: dict
  sample: [{"service": "the RPC worker", "port": 50052, "unit": "llamarpc-rpc-worker.service"}]
rollback_build:
  description:
    - Whether this run rolls the llama.cpp build back (the llama_cpp role's option C(llama_cpp_rollback) as this host
      sees it; false when unset), for the preflight of the rollback and to skip the build host's check.
  returned: always
  type: bool
deferred:
  description: Variables whose values refer to something not known yet, left unchecked.
  returned: always
  type: list
  elements: str
  sample: [llama_coordinator_model_path]
"""
