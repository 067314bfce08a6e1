# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The attributes of the collection's modules, written once.

    A module takes the descriptions (``llamarpc.cluster.attributes``) and one set of support levels:
    ``.check_diff``, ``.check_no_diff`` or ``.facts``. What it says itself under
    ``attributes`` (a ``details`` line, or a support level of its own) is merged over the fragment's.
    """

    # The descriptions; every module takes this one.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
"""

    # Full check mode, and a diff of what changes (or would change).
    CHECK_DIFF = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

    # Full check mode, no diff.
    CHECK_NO_DIFF = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

    # A facts module: returns facts, full check mode, no diff (the descriptions of check and diff mode come
    # from DOCUMENTATION).
    FACTS = r"""
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
  check_mode:
    support: full
  diff_mode:
    support: none
"""
