#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_model_served
short_description: Record the model the cluster serves now, and the one before it for a rollback
version_added: 0.3.0
description:
  - Records O(model) (the id M(llamarpc.cluster.gguf_shard_plan) returns as
    RV(llamarpc.cluster.gguf_shard_plan#module:model_id)) as served now in the coordinator's model record
    (C(.llamarpc-models.json) in O(model_dir)), with the O(source) it came from, first in the list of models served;
    at most O(keep_previous) models before it stay listed.
  - The models to keep on every host after the switch (RV(keep)) are what M(llamarpc.cluster.gguf_shard_place) takes
    as O(llamarpc.cluster.gguf_shard_place#module:keep_models) to remove the files of the others; the previous
    model's source (RV(previous)) is what C(llamarpc.cluster.rollback) places again.
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  model_dir:
    description: The coordinator's model directory (absolute, existing).
    type: path
    required: true
  model:
    description: The id of the model now served.
    type: str
    required: true
  source:
    description: Where the model came from - the llama_model source variables (C(files), C(urls), C(hf_repo), ...).
    type: dict
    default: {}
  keep_previous:
    description: How many models served before this one are kept for a rollback.
    type: int
    default: 1
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  diff_mode:
    details: The ids of the models served, newest first, before and after.
seealso:
  - module: llamarpc.cluster.gguf_shard_place
  - module: llamarpc.cluster.gguf_shard_facts
"""

EXAMPLES = r"""
- name: Record the model served now
  llamarpc.cluster.gguf_model_served:
    model_dir: /data/models
    model: "{{ shard_plan.model_id }}"
    source: {files: "{{ model_files }}"}
    keep_previous: 1
  register: served
"""

RETURN = r"""
served:
  description: The models served, newest first, each with C(model) and C(source).
  returned: always
  type: list
  elements: dict
  sample: [{model: 3f1c2a9b0d4e5f60, source: {files: [/srv/m-00001-of-00003.gguf]}}]
keep:
  description: The ids of the models whose files stay on every host (the one served and O(keep_previous) before it).
  returned: always
  type: list
  elements: str
previous:
  description: The model served before this one (C(model), C(source)), the rollback target; null when none.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_options import SERVED
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_record import run_served


def main():
    module = AnsibleModule(argument_spec=SERVED, supports_check_mode=True)
    module.exit_json(**run_served(module))


if __name__ == "__main__":
    main()
