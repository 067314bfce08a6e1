# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """How missing packages are installed (``_apt``'s options), written once for apt_packages and llama_cpp_install."""

    DOCUMENTATION = r"""
options:
  update_cache:
    description: Refresh the package lists before installing missing packages (real runs only; see O(cache_valid_time)).
    type: bool
    default: false
  cache_valid_time:
    description: With O(update_cache), refresh only when the lists are older than this many seconds.
    type: int
    default: 0
  install_recommends:
    description: Install recommended packages too. Unset - apt's configured default.
    type: bool
"""
