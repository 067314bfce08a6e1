# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""systemd unit names on the controller: the escape sshfs_masked_mount names its units with, for roles too."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.module_utils import _sshfs

DOCUMENTATION = r"""
name: systemd_escape_path
short_description: A path escaped as C(systemd-escape --path) does it
version_added: 0.1.0
description:
  - The name systemd gives a path in unit names, computed on the controller (no command on the host) - for example
    the name of a C(.mount) unit, which must be the escaped C(Where=) path with the suffix C(.mount).
  - The same escape M(llamarpc.cluster.sshfs_masked_mount) names its units with; it matches C(systemd-escape --path)
    (a unit test compares them).
options:
  _input:
    description: An absolute path.
    type: path
    required: true
author:
  - llamarpc.cluster contributors (@llamarpc)
"""

EXAMPLES = r"""
- name: The mount unit of /srv/llamarpc/export/shards (srv-llamarpc-export-shards.mount)
  ansible.builtin.debug:
    msg: "{{ '/srv/llamarpc/export/shards' | llamarpc.cluster.systemd_escape_path }}.mount"
"""

RETURN = r"""
_value:
  description: The escaped path, for example V(srv-llamarpc-export-shards); V(-) for C(/).
  type: str
"""


def systemd_escape_path(path):
    """``systemd-escape --path PATH`` for an absolute path."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise AnsibleFilterError(f"systemd_escape_path needs an absolute path, got {path!r}")
    return _sshfs.systemd_escape_path(path)


class FilterModule:
    """llamarpc.cluster systemd filters."""

    def filters(self):
        return {"systemd_escape_path": systemd_escape_path}
