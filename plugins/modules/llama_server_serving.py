#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_server_serving
short_description: Wait until a running llama-server serves, and prove it with a greedy completion
version_added: 0.3.0
description:
  - Looks at C(/health) of the llama-server at O(url) every O(interval) seconds until it answers 200 (it answers 503
    while the model loads), for O(wait) seconds at most. Not serving by then is no failure (RV(serving) is false) -
    repeat the task with C(until) to wait longer, with progress between the runs.
  - Once it serves, with O(prompt) - a greedy completion (temperature 0, no prompt cache) of O(n_predict) tokens.
    Fails when the completion fails or answers without tokens or timings.
  - Changes nothing on the host.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Runs as in a real run (it only reads, and a completion changes nothing).
options:
  url:
    description: The API's base URL, V(http://10.77.0.11:8080).
    type: str
    required: true
  api_key:
    description: llama-server's API key, sent as a bearer token; empty - none.
    type: str
    default: ""
  wait:
    description: Seconds this run waits for C(/health) to answer 200; V(0) - one look.
    type: int
    default: 30
  interval:
    description: Seconds between two looks at C(/health).
    type: float
    default: 5.0
  prompt:
    description: The completion's prompt; omitted - no completion.
    type: str
  n_predict:
    description: Tokens the completion generates.
    type: int
    default: 16
  completion_timeout:
    description: Seconds the completion may take.
    type: int
    default: 300
seealso:
  - module: llamarpc.cluster.llama_server_smoke
    description: Proves a llama.cpp build with a server of its own.
"""

EXAMPLES = r"""
- name: Wait for the model to load (up to 30 minutes), then a greedy completion through the cluster
  llamarpc.cluster.llama_server_serving:
    url: http://10.77.0.11:8080
    api_key: "{{ vault_api_key }}"
    wait: 30
    prompt: The capital of France is
    n_predict: 16
  register: serving
  until: serving is failed or serving.serving
  retries: 60
  delay: 0
"""

RETURN = r"""
health_status:
  description: What C(/health) answered last (0 - nothing answered).
  returned: always
  type: int
  sample: 200
serving:
  description: Whether C(/health) answered 200.
  returned: always
  type: bool
  sample: true
completion:
  description: llama-server's answer to the completion.
  returned: when O(prompt) is given and it serves
  type: dict
  sample: {content: " Paris.", tokens_predicted: 3, timings: {predicted_per_second: 12.5}}
smoke:
  description: The completion in short - C(prompt), C(content), C(prompt_tokens), C(prompt_tokens_per_second),
    C(generated_tokens), C(generation_tokens_per_second) (speeds rounded to two decimals).
  returned: when O(prompt) is given and it serves
  type: dict
  sample:
    prompt: The capital of France is
    content: " Paris."
    prompt_tokens: 6
    prompt_tokens_per_second: 41.2
    generated_tokens: 3
    generation_tokens_per_second: 12.5
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_serving import ARGUMENT_SPEC, run_module


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
