# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A path on the controller for what the playbooks make: the user's cache or working directory."""

from __future__ import annotations

DOCUMENTATION = r"""
name: user_path
short_description: A path on the controller for what the playbooks make, never inside the collection
version_added: 0.1.0
description:
  - Joins the terms under the user's cache, C($XDG_CACHE_HOME/llamarpc) or C(~/.cache/llamarpc), or under the
    directory the user started C(ansible-playbook) in (C($PWD)).
  - The collection's playbooks and roles take their default output paths from it (the llama.cpp build cache, the
    real model, the demo's files, the lab's inventory, benchmark results), so an installed collection is never
    written to.
options:
  _terms:
    description: Relative path parts, joined; C(..) is refused. None gives the base itself.
    type: list
    elements: str
    required: false
  base:
    description: V(cache) for the user's cache, V(cwd) for the working directory (the cache when it is unknown).
    type: str
    default: cache
    choices: [cache, cwd]
author:
  - llamarpc.cluster contributors (@llamarpc)
"""

EXAMPLES = r"""
- name: Where the real model's shards go by default (~/.cache/llamarpc/real-model)
  ansible.builtin.debug:
    msg: "{{ lookup('llamarpc.cluster.user_path', 'real-model') }}"

- name: The lab's inventory in the working directory
  ansible.builtin.debug:
    msg: "{{ lookup('llamarpc.cluster.user_path', 'inventories/lab/hosts.yml', base='cwd') }}"
"""

RETURN = r"""
_raw:
  description: One absolute path (a lookup returns a list of one; C(query) gives the list).
  type: list
  elements: path
"""


from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llamarpc.cluster.plugins.module_utils import _paths


class LookupModule(LookupBase):
    """lookup('llamarpc.cluster.user_path', *parts, base='cache')."""

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        try:
            return [_paths.user_path(*terms, base=self.get_option("base"))]
        except ValueError as exc:
            raise AnsibleLookupError(f"llamarpc.cluster.user_path: {exc}") from exc
