# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gguf_vocabulary_check (documented in plugins/modules/gguf_vocabulary_check.py): runs on the controller only and never
connects; module_utils/model/_vocabulary_check.py reads both headers and compares."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _vocabulary_check as vocabulary_check


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=vocabulary_check.ARGUMENT_SPEC)
        result.update(vocabulary_check.check(args, lambda entry: self._find_needle("files", entry)))
        return result
