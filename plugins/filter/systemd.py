# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""systemd unit names on the controller: the escape sshfs_masked_mount names its units with, for roles too."""

# Each filter is documented beside this file, in plugins/filter/<filter name>.yml.

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sshfs


def systemd_escape_path(path):
    """``systemd-escape --path PATH`` for an absolute path."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise AnsibleFilterError(f"systemd_escape_path needs an absolute path, got {path!r}")
    return _sshfs.systemd_escape_path(path)


class FilterModule:
    """llamarpc.cluster systemd filters."""

    def filters(self):
        return {"systemd_escape_path": systemd_escape_path}
