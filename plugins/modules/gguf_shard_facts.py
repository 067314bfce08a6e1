#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_shard_facts
short_description: Report what a host's model directory holds and how much room it has, for shard placement
version_added: 0.3.0
description:
  - The first of the three steps of shard placement - run it on every candidate host (or loop over them with
    C(delegate_to) and C(delegate_facts)), then M(llamarpc.cluster.gguf_shard_plan) once, then
    M(llamarpc.cluster.gguf_shard_place) on each host.
  - Reports the free bytes at O(model_dir) (at its nearest existing parent when it does not exist yet), every file
    and link in it, and the partial downloads. Changes nothing; the directory is not created.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.facts]
options:
  model_dir:
    description: Absolute path of the model directory.
    type: path
    required: true
  tensor_cache:
    description:
      - The directory of the RPC worker's tensor cache on this host (its C(LLAMA_CACHE)), if it has one. The report
        then says whether it shares the model's filesystem and how many bytes its C(rpc) sub-directory holds.
    type: path
seealso:
  - module: llamarpc.cluster.gguf_shard_plan
  - module: llamarpc.cluster.gguf_shard_place
"""

EXAMPLES = r"""
- name: Report each candidate's model directory
  llamarpc.cluster.gguf_shard_facts:
    model_dir: /data/models/qwen2.5-32b
    tensor_cache: "{{ tensor_caches[item].path | default(omit) }}"
  delegate_to: "{{ item }}"
  delegate_facts: true
  loop: "{{ groups['rpc_workers'] }}"
  become: true
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host's facts.
  returned: always
  type: complex
  contains:
    gguf_shard_dir:
      description:
        - The model directory - C(model_dir), C(exists), C(free) (bytes), C(files) (per name its C(state) - V(file)
          with C(size), V(link) with C(target), V(absent) or V(other) - and C(partial), the bytes of its
          C(NAME.partial)), C(complete) (name to size of the regular files), C(partial_bytes) (all partials).
        - C(tensor_cache) with O(tensor_cache) - C(path), C(same_filesystem), C(cached) (bytes, counted only on
          the model's filesystem).
        - The collection's model record - C(models) (per model id this host's C(files) and C(links)), C(served)
          (the models served, newest first, with their C(source); on the coordinator) and C(placed) (per file the
          collection placed and that is still as it placed it, its size).
      returned: always
      type: dict
      sample:
        model_dir: /data/models/m
        exists: true
        free: 4000000000
        files: {m-00001-of-00002.gguf: {state: file, size: 3795193856}, m-00002-of-00002.gguf: {state: absent,
                partial: 1048576}}
        complete: {m-00001-of-00002.gguf: 3795193856}
        partial_bytes: 1048576
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch, _shard_record
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_options import FACTS


def main():
    module = AnsibleModule(argument_spec=FACTS, supports_check_mode=True)
    model_dir = module.params["model_dir"]
    if not os.path.isabs(model_dir):
        module.fail_json(msg=f"model_dir must be an absolute path, got {model_dir!r}")
    try:
        report = _shard_fetch.inspect(model_dir, None, module.params["tensor_cache"])
        report.update(_shard_record.report(model_dir))
    except OSError as exc:
        module.fail_json(msg=f"cannot inspect {model_dir}: {exc}")
    module.exit_json(changed=False, ansible_facts={"gguf_shard_dir": {"model_dir": model_dir, **report}})


if __name__ == "__main__":
    main()
