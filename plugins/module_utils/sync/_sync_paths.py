# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a syncer writes, and how that place relates to the model directories.

Standard library only: this file is shipped to the managed host with the module.
"""

from __future__ import annotations

import posixpath
import re


def split_target(target):
    """``{kind, host, path}`` of an rsync/lsyncd target: local path, ``[user@]host:path``, rsync daemon."""
    if target is None:
        return {"kind": "unknown", "host": None, "path": None}
    if target.startswith("rsync://"):
        rest = target[len("rsync://") :]
        host, _slash, module = rest.partition("/")
        return {"kind": "rsyncd", "host": host.rpartition("@")[2], "path": None, "module": module}
    match = re.match(r"^(?:[^/@:]+@)?([^/:\[]+|\[[^\]]+\])::(.*)$", target)
    if match:
        return {"kind": "rsyncd", "host": match.group(1), "path": None, "module": match.group(2)}
    match = re.match(r"^(?:[^/@:]+@)?([^/:\[]+|\[[^\]]+\]):(.*)$", target)
    if match and not target.startswith("/"):
        return {"kind": "ssh", "host": match.group(1), "path": match.group(2)}
    return {"kind": "local", "host": None, "path": target}


def normalize(path):
    """Normalised absolute path, or None for paths this module cannot place (relative, placeholders)."""
    if not isinstance(path, str) or not path.startswith("/") or "{" in path:
        return None
    return posixpath.normpath(path)


def relation(path, model_dir):
    """How ``path`` relates to ``model_dir``: 'same', 'contains' (an ancestor), 'inside' or None."""
    path = normalize(path)
    model_dir = normalize(model_dir)
    if path is None or model_dir is None:
        return None
    if path == model_dir:
        return "same"
    if path == "/" or model_dir.startswith(path + "/"):
        return "contains"
    if model_dir == "/" or path.startswith(model_dir + "/"):
        return "inside"
    return None


def reached(path, model_dirs):
    """Model directories ``path`` reaches; every one when the path is unknown (conservative)."""
    if normalize(path) is None:
        return list(model_dirs)
    return [m for m in model_dirs if relation(path, m)]
