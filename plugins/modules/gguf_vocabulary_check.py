#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_vocabulary_check
short_description: Check that a draft model's vocabulary is its target model's, from their GGUF headers
version_added: 0.4.0
description:
  - An action that runs on the controller only and never connects to a host. It reads shard 1's GGUF header of the
    model and of the draft model from their sources (a Hugging Face repository, URLs with Range requests, or files on
    the controller) and nothing else, and fails when the draft cannot draft for the model in speculative decoding.
  - The rule is llama.cpp's own (C(common/speculative.cpp)) - the same tokenizer type, the same BOS and EOS handling,
    token counts at most 128 apart, and the same token texts from id 5 to the shorter list's end, compared by the
    sha256 of each list as its header is read.
  - The site preflight (C(playbooks/preflight.yml)) runs it before anything changes when the coordinator has a draft
    model to place.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - On the controller, for a hub source only - the C(huggingface_hub) Python package.
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Reads and compares as without check mode.
options:
  model:
    description: The target model's source - exactly one of C(hf_repo) (with C(hf_pattern)), C(urls) and C(files).
    type: dict
    required: true
    suboptions: &source
      hf_repo:
        description: Hugging Face repository id (C(owner/name)).
        type: str
      hf_revision:
        description: Branch, tag or commit of C(hf_repo).
        type: str
        default: main
      hf_pattern:
        description: Shell pattern of the repository's files that make the model (one GGUF file or one split set).
        type: str
      hf_token:
        description: Hugging Face token (else the one huggingface_hub finds on the controller).
        type: str
      hf_endpoint:
        description: Another Hugging Face endpoint (a mirror).
        type: str
      urls:
        description: Plain HTTP(S) URLs of the model's files with their sha256.
        type: list
        elements: dict
        suboptions:
          url:
            description: The URL (its header is read with Range requests).
            type: str
            required: true
          sha256:
            description: Expected sha256 (hex).
            type: str
            required: true
          size:
            description: Size in bytes (else asked of the server).
            type: int
          name:
            description: File name (else the URL's last path part).
            type: str
      files:
        description: The model's files on the controller (relative ones are searched like the copy module's src).
        type: list
        elements: path
  draft:
    description: The draft model's source, as O(model).
    type: dict
    required: true
    suboptions: *source
  timeout:
    description: Seconds each request to a source may take.
    type: int
    default: 60
  validate_certs:
    description: Check the sources' TLS certificates.
    type: bool
    default: true
seealso:
  - module: llamarpc.cluster.gguf_shard_plan
  - module: llamarpc.cluster.llama_cluster_plan
"""

EXAMPLES = r"""
- name: Check the draft's vocabulary before anything is downloaded
  llamarpc.cluster.gguf_vocabulary_check:
    model:
      hf_repo: Qwen/Qwen2.5-32B-Instruct-GGUF
      hf_pattern: "*q4_k_m*.gguf"
    draft:
      hf_repo: Qwen/Qwen2.5-0.5B-Instruct-GGUF
      hf_pattern: "*q4_k_m.gguf"
  run_once: true
"""

RETURN = r"""
compatible:
  description: Whether the draft may draft for the model (the task fails when not).
  returned: when both headers were read
  type: bool
model:
  description: The model's vocabulary - C(count) (tokens), C(sha256) (of the token list as stored), C(model) (the
    tokenizer's type), C(bos), C(eos), C(add_bos), C(add_eos).
  returned: when both headers were read
  type: dict
  sample: {count: 262144, sha256: 5f4c..., model: llama, bos: 2, eos: 1, add_bos: true, add_eos: false}
draft:
  description: The draft's vocabulary, as RV(model).
  returned: when both headers were read
  type: dict
header_reads:
  description: How each header was read (C(role), C(name), C(header_bytes), C(requests), C(received)).
  returned: when both headers were read
  type: list
  elements: dict
"""
