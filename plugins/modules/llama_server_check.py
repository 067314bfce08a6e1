#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_server_check
short_description: Check, before llama-server (re)starts, that its binary knows its flags and its user reads the model
version_added: 0.3.0
description:
  - With O(server) - runs C(O(server) --help) and fails when it does, or when its text does not name every one of
    O(flags) (llama-server exits on an unknown flag, and systemd would restart it in a loop).
  - With O(user) and O(model_files) - reads the first bytes of every file as O(user) in a transient unit with the
    properties O(sandbox) (C(systemd-run --wait --pipe)), so in the view of the files the service's unit has; fails,
    with the reason and what to change, when the user cannot. Stopped after O(read_timeout) seconds (a hung network
    mount). Not in check mode, where the user may not exist yet.
  - Changes nothing on the host.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - systemd as the host's system manager (for the read).
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: The flags are checked (it only reads); the read as O(user) is not.
options:
  server:
    description: The llama-server binary; omitted - the flags are not checked.
    type: path
  flags:
    description: Flags the binary's C(--help) must name.
    type: list
    elements: str
    default: []
  user:
    description: The account llama-server runs as; required with O(model_files).
    type: str
  model_files:
    description: The model's files as llama-server opens them; empty - nothing is read.
    type: list
    elements: path
    default: []
  sandbox:
    description: Unit properties (C(Key=value)) of llama-server's unit that shape its view of the files, for example
      V(ProtectHome=tmpfs) and V(BindReadOnlyPaths=/home/pool/models).
    type: list
    elements: str
    default: []
  read_timeout:
    description: Seconds the read may take before systemd stops it.
    type: int
    default: 120
  host:
    description: The host's name in messages (the inventory name).
    type: str
    default: this host
seealso:
  - module: llamarpc.cluster.llama_server_serving
"""

EXAMPLES = r"""
- name: Check that llama-server knows the unit's flags and that its user can read every shard
  llamarpc.cluster.llama_server_check:
    server: /opt/llamarpc/llama.cpp/KEY/bin/llama-server
    flags: [--rpc, --device, --tensor-split, --api-key-file]
    user: llamarpc-server
    model_files: [/home/pool/models/m-00001-of-00002.gguf, /home/pool/models/m-00002-of-00002.gguf]
    sandbox: [ProtectSystem=strict, ProtectHome=tmpfs, BindReadOnlyPaths=/home/pool/models]
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
checked:
  description: The checks that ran and passed - C(flags), C(read).
  returned: always
  type: list
  elements: str
  sample: [flags, read]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_server_check import (
    ARGUMENT_SPEC,
    run_module,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
