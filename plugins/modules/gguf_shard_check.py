#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_shard_check
short_description: Check that every shard of a plan reads through the model directory at its size
version_added: 0.2.0
description:
  - Stats each of O(shards) as O(model_dir)/NAME, following links (a shard on another host is a link into its SSHFS
    mount), and fails when one is missing, unreadable or of another size than the plan's, naming each such shard and
    the mount to look at. One module run for the whole plan.
  - Changes nothing.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Reads exactly as a normal run does.
options:
  model_dir:
    description: The coordinator's model directory, where every shard appears under its file name.
    type: path
    required: true
  shards:
    description:
      - The plan's shards (C(plan) of M(llamarpc.cluster.gguf_shard_plan)) - each with C(name) (its file name),
        C(size) (bytes) and C(host) (the host the plan put it on, named in the message); other keys are ignored.
    type: list
    elements: dict
    required: true
  mount_root:
    description: Where the coordinator mounts each host's model directory (C(MOUNT_ROOT/HOST)); the message names the
      mount of a shard that is not there.
    type: path
  coordinator:
    description: This host as the inventory names it (for the message).
    type: str
seealso:
  - module: llamarpc.cluster.gguf_shard_plan
  - module: llamarpc.cluster.sshfs_masked_mount
"""

EXAMPLES = r"""
- name: Check that every shard reads through the coordinator's model directory
  llamarpc.cluster.gguf_shard_check:
    model_dir: /data/models/model
    shards: "{{ placement.plan }}"
    mount_root: /mnt/llamarpc
    coordinator: "{{ inventory_hostname }}"
"""

RETURN = r"""
shards:
  description: Each shard as found - C(name), C(host), C(state) (V(ok), V(missing) or V(size)) and C(size) (its size
    on disk, null when missing).
  returned: always
  type: list
  elements: dict
  sample:
    - {name: m-00001-of-00002.gguf, host: node1, state: ok, size: 3795193856}
msg:
  description: A one-line summary, or one line per shard that is not there at its size.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_check import ARGUMENT_SPEC, run_module


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
