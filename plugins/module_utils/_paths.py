# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the controller keeps what the collection makes for its user: never inside the collection itself.

An installed collection may be read-only, shared by users, or replaced by the next ``ansible-galaxy collection
install``; what the playbooks make (the real model's shards, the demo's files, the lab's inventory, benchmark results)
goes to the user's cache or to the directory the user started ansible-playbook in.
"""

from __future__ import annotations

import os

CACHE = "cache"
WORKING_DIR = "cwd"
BASES = (CACHE, WORKING_DIR)


def cache_dir(environ=None):
    """``$XDG_CACHE_HOME/llamarpc``, else ``~/.cache/llamarpc`` (the XDG base directory rule)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "llamarpc")


def working_dir(environ=None):
    """The directory the user started ansible-playbook in: ``$PWD`` of their shell (Ansible runs some plugins in the
    playbook's directory), else the process's own; the cache when neither is an absolute path."""
    environ = os.environ if environ is None else environ
    for candidate in (environ.get("PWD"), os.getcwd()):
        if candidate and os.path.isabs(candidate):
            return candidate
    return cache_dir(environ)


def user_path(*parts, base=CACHE, environ=None):
    """``parts`` joined under the cache (``base='cache'``) or the working directory (``base='cwd'``).

    The parts must be relative and stay below the base: ``..`` is refused, so a caller cannot climb out of it."""
    if base not in BASES:
        raise ValueError(f"base must be one of {', '.join(BASES)}, not {base!r}")
    for part in parts:
        if not isinstance(part, str) or os.path.isabs(part) or ".." in part.split("/"):
            raise ValueError(f"each part must be a relative path without '..', not {part!r}")
    root = cache_dir(environ) if base == CACHE else working_dir(environ)
    return os.path.join(root, *parts)
