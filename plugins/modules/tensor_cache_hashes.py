#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tensor_cache_hashes
short_description: Decide llama-server's tensor hashes file - from verified seeded bytes, never stale
version_added: 0.3.0
description:
  - The coordinator's file for C(llama-server --rpc-tensor-hashes) (env C(LLAMA_ARG_RPC_TENSOR_HASHES), the
    C(llama_cpp) role's patch C(rpc-tensor-hashes.patch)) - one C(HASH SIZE NAME) line per tensor, the FNV-1a 64
    of its bytes - with which a seeded load offers each worker the tensors its cache holds without reading them.
  - With O(seeded) (this run's seeding) the file is made from the seeded tensors whose bytes are known to be of a
    shard in force (C(shard_sha256) of M(llamarpc.cluster.tensor_cache_seed) equal to its sha256 in O(shards)),
    with a C(# shard NAME SHA256) line for each shard they came from. Without it the file at O(path) is kept while
    every shard it names is in force with that sha256, and is to be removed otherwise (a shard replaced or repaired
    since) - a stale file is never used.
  - Reads O(path), and C(O(server) --help) for the flag. Changes nothing - RV(content) and RV(state) are for the
    caller to write (M(llamarpc.cluster.managed_files)), RV(environment) for llama-server's environment file.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Reads only; the same result as a real run.
options:
  path:
    description: The tensor hashes file on the coordinator (beside the plan, C(plan.json)).
    type: path
    required: true
  shards:
    description: The shards in force - a shard's file name to its sha256 (the C(llama_model) role's plan).
    type: dict
    default: {}
  seeded:
    description:
      - This run's seeding - the results of M(llamarpc.cluster.tensor_cache_seed), one per worker (a registered loop's
        C(results)), seeded with its O(llamarpc.cluster.tensor_cache_seed#module:shards); their
        RV(llamarpc.cluster.tensor_cache_seed#module:tensors) make the file. Results without them (skipped, check mode)
        count as no seeding.
    type: list
    elements: dict
  server:
    description: The C(llama-server) binary; RV(use) needs it to know C(--rpc-tensor-hashes). Omit it until it is there.
    type: path
seealso:
  - module: llamarpc.cluster.tensor_cache_seed
  - name: llama.cpp issue 13106 (pre-computed hashes for the RPC tensor cache)
    description: The upstream request the patch answers.
    link: https://github.com/ggml-org/llama.cpp/issues/13106
"""

EXAMPLES = r"""
- name: Tensor hashes from this run's seeding, for llama-server
  llamarpc.cluster.tensor_cache_hashes:
    path: /etc/llamarpc/coordinator/tensor-hashes.txt
    shards: "{{ llama_model_shards | selectattr('sha256') | items2dict(key_name='name', value_name='sha256') }}"
    seeded: "{{ seeding.results }}"
    server: "{{ llama_cpp_server_bin }}"
  register: hashes

- name: Write it (or remove a stale one)
  llamarpc.cluster.managed_files:
    files:
      - dest: /etc/llamarpc/coordinator/tensor-hashes.txt
        state: "{{ hashes.state }}"
        content: "{{ hashes.content | default('', true) }}"
        owner: root
        group: llamarpc-server
        mode: "0640"
"""

RETURN = r"""
state:
  description: Whether the file is to be at O(path) (V(present), with RV(content)) or not (V(absent)).
  returned: always
  type: str
  sample: present
content:
  description: The file's text (null when RV(state) is V(absent)).
  returned: always
  type: str
  sample: "# shard gemma-3-270m-q4_k_m.gguf a5fd3b62...\n5d2f31b0b4c1e6a3 178257920 token_embd.weight\n"
use:
  description: llama-server is to take the file - it is RV(state=present) and the binary knows C(--rpc-tensor-hashes).
  returned: always
  type: bool
  sample: true
reason:
  description: Why RV(use) is false (empty when it is true).
  returned: always
  type: str
  sample: "stale - it was made from m-00002-of-00002.gguf of sha256 1f2e..., the shard in force has 9a8b..."
environment:
  description: llama-server's environment - C(LLAMA_ARG_RPC_TENSOR_HASHES) set to O(path) when RV(use), else empty.
  returned: always
  type: dict
  sample: {LLAMA_ARG_RPC_TENSOR_HASHES: /etc/llamarpc/coordinator/tensor-hashes.txt}
tensors:
  description: Tensors the file names.
  returned: always
  type: int
  sample: 448
shards:
  description: The shard files its hashes were computed from.
  returned: always
  type: list
  elements: str
  sample: [m-00001-of-00002.gguf, m-00002-of-00002.gguf]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache._tensor_hashes import (
    ARGUMENT_SPEC,
    run_module,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
