# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The scan's options (``_sync_scan.ARGUMENT_SPEC``), written once for sync_hazard and sync_hazard_facts."""

    DOCUMENTATION = r"""
options:
  model_dirs:
    description:
      - Absolute paths of the directories to protect (model files, GGUF shards). The same paths are assumed
        on every host, so a sync target C(host:/path) is compared with them as well.
    type: list
    elements: path
    default: [/data/models]
  users:
    description:
      - Users whose user units and home files (C(~/.lsyncd.conf.lua), syncthing and unison configs) are
        read. Every name must exist on the host.
      - Empty means every user with a running user manager, every lingering user, root and every user with
        a UID from 1000 to 65533.
    type: list
    elements: str
    default: []
  config_paths:
    description: More lsyncd config files to read (besides the standard places and those on command lines).
    type: list
    elements: path
    default: []
  exclude_patterns:
    description:
      - Extra lsyncd exclude patterns added, besides the model directories, to each sync the exclude rewrite
        protects (for example V(*.gguf)).
    type: list
    elements: str
    default: []
  hygiene:
    description: Also look for other deleting syncers (rsync, syncthing, unison) and tmpfiles.d cleanups.
    type: bool
    default: true
"""
