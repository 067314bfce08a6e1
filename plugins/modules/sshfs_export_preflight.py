#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sshfs_export_preflight
short_description: Check that a directory can be exported read-only over SFTP from a root-owned chroot
version_added: 0.1.0
description:
  - Fails, changing nothing, with one message per rule broken when O(dir) is not a directory that others may read
    and search (the export user reads it), or when O(root) or any directory above it exists but is not a directory,
    not owned by root, or writable by group or others (sshd refuses an SFTP chroot then).
  - Neither path is followed if it is a symbolic link, and neither is changed.
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  dir:
    description: The exported directory.
    type: path
    required: true
  root:
    description: The SFTP chroot of the export user (it need not exist yet).
    type: path
    required: true
  user:
    description: The export user, named in messages.
    type: str
    required: true
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: It only reads, in check mode or not.
seealso:
  - module: llamarpc.cluster.sshfs_export_view
"""

EXAMPLES = r"""
- name: Check the export directory and the chroot
  llamarpc.cluster.sshfs_export_preflight:
    dir: /data/shards
    root: /srv/llamarpc/export
    user: llamarpc-shards
"""

RETURN = r"""
problems:
  description: What is wrong, one message per rule broken (empty when nothing is).
  returned: always
  type: list
  elements: str
  sample:
    - "/srv/llamarpc must be owned by root: sshd refuses an SFTP chroot otherwise (found owner uid 1000, mode 0755)."
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._export import PREFLIGHT_ARGUMENT_SPEC, preflight


def main():
    preflight(AnsibleModule(argument_spec=PREFLIGHT_ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
