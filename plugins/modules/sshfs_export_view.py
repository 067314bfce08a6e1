#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sshfs_export_view
short_description: Keep the read-only bind mount of an exported directory mounted, current, and read-only
version_added: 0.1.0
description:
  - Manages the systemd mount unit at O(path) (named after it, C(systemd-escape --path PATH).mount), which binds
    O(src) read-only - the view of a directory inside the SFTP chroot of P(llamarpc.cluster.sshfs_shard_export#role).
    The unit file itself is written by the caller (a template).
  - Enables the unit; starts it when it is not mounted; mounts it anew when O(unit_changed) (after a
    C(daemon-reload)) or when the view shows another directory than O(src) - the directory was removed and made
    again, and the old bind still shows the removed one.
  - Then fails unless the mount at O(path) is read-only.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - systemd; root on the host.
options:
  path:
    description: The view (the mount point, the unit's C(Where=)).
    type: path
    required: true
  src:
    description: The exported directory (the unit's C(What=)).
    type: path
    required: true
  unit_changed:
    description: The unit file was just written or changed - reload systemd and mount anew.
    type: bool
    default: false
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Predicts RV(actions) and changes nothing; with O(unit_changed) (a unit not written yet) predicts a reload
      and a restart without asking systemd. The read-only check runs only outside check mode.
  diff_mode:
    details: Whether the unit is enabled and mounted, before and after.
seealso:
  - module: llamarpc.cluster.sshfs_masked_mount
"""

EXAMPLES = r"""
- name: Read-only bind mount of the export directory in the export root
  ansible.builtin.template:
    src: bind.mount.j2
    dest: /etc/systemd/system/srv-llamarpc-export-shards.mount
    mode: "0644"
  register: _unit

- name: Mount the read-only view
  llamarpc.cluster.sshfs_export_view:
    path: /srv/llamarpc/export/shards
    src: /data/shards
    unit_changed: "{{ _unit is changed }}"
"""

RETURN = r"""
actions:
  description: The systemctl actions taken (or that would be, in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: [daemon-reload, restart]
reasons:
  description: Why, one sentence each.
  returned: always
  type: list
  elements: str
  sample: ["the view shows another directory than the exported one"]
unit:
  description: The mount unit.
  returned: always
  type: str
  sample: srv-llamarpc-export-shards.mount
options:
  description: The mount options of the view after the run.
  returned: outside check mode
  type: list
  elements: str
  sample: [ro, relatime]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._export import ARGUMENT_SPEC, run


def main():
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
