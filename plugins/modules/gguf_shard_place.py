#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_shard_place
short_description: Fetch, verify and link the GGUF shards a plan puts on this host, resumably
version_added: 0.1.0
description:
  - The last of the three steps of shard placement - M(llamarpc.cluster.gguf_shard_facts) on every candidate host,
    M(llamarpc.cluster.gguf_shard_plan) once, then this on each host with that host's part of the plan
    (RV(llamarpc.cluster.gguf_shard_plan#module:place)).
  - Downloads each of O(shards) into C(NAME.partial) - an interrupted download resumes with HTTP C(Range) - checks
    size and sha256, makes it read-only and renames it into place. A rerun changes nothing.
  - A corrupt shard is repaired in its own file (same inode) from its source, writing only the blocks that differ -
    no room for a second copy is needed, and a process holding the file open reads the repaired bytes. A killed
    repair resumes. A corrupt shard of the wrong size is replaced by a verified download when there is room for one.
  - Removes the partial downloads of O(drop), and creates the symlinks of O(links) (on the coordinator).
  - With O(keep_models), first removes the files the collection placed for other models (old ones, kept for a
    rollback until then); with O(model), records this host's files of the model.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - On the managed host - Python 3 standard library only (downloads use urllib), and network access to the URLs.
options:
  model_dir:
    description: Absolute path of the model directory (created, owned like its parent, mode 0755).
    type: path
    required: true
  shards:
    description: The shards to hold here, as the plan gives them.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: File name in O(model_dir).
        type: str
        required: true
      size:
        description: Size in bytes.
        type: int
        required: true
      sha256:
        description: Expected sha256 (hex).
        type: str
        required: true
      etag:
        description: The source's ETag; a partial download of another ETag starts over.
        type: str
      url:
        description: Where the host fetches the shard (HTTP Range requests).
        type: str
      src:
        description:
          - A file on the controller instead of O(shards[].url). It is copied to the host only when the host lacks
            the shard, or holds it corrupt.
        type: path
      hub:
        description: The URL is the Hugging Face hub's - its requests carry O(hf_token).
        type: bool
        default: false
  links:
    description: Symlinks to create in O(model_dir), name to target (the coordinator's view of shards on other hosts).
    type: dict
    default: {}
  drop:
    description: Shard names whose partial downloads here are removed (planned for another host).
    type: list
    elements: str
    default: []
  hf_token:
    description:
      - Hugging Face token for the shards with O(shards[].hub), sent only to the hub's origin (never across a redirect
        to its CDN). Defaults to what huggingface_hub finds on the controller (C(HF_TOKEN), the token file).
    type: str
  verify:
    description:
      - C(quick) hashes only shards whose size or mtime differ from the manifest; C(full) hashes every shard.
    type: str
    choices: [quick, full]
    default: quick
  metrics_file:
    description:
      - A C(.prom) file in node exporter's textfile directory that gets each held shard's last verification - its
        time, its result (C(llamarpc_shard_verify_ok)) and how often it was found corrupt. Shards not hashed in this
        run keep their last record. Written whole (temporary file and rename) when not in check mode; writing it is no
        change of the host. Omitted - no metrics.
    type: path
  timeout:
    description: Socket timeout of each HTTP request in seconds.
    type: int
    default: 60
  retries:
    description: Attempts after a failed request before giving up (each resumes where the last one stopped).
    type: int
    default: 5
  validate_certs:
    description: Verify TLS certificates.
    type: bool
    default: true
  model:
    description:
      - The id of the model these shards belong to (RV(llamarpc.cluster.gguf_shard_plan#module:model_id)); this host's
        files and links of it are recorded in the model record (C(.llamarpc-models.json) in O(model_dir)).
    type: str
  keep_models:
    description:
      - Before anything is fetched, remove the files and links recorded for the models not listed here - only those
        the collection placed itself (C(placed) in the manifest) and that are still as it placed them (size and
        mtime); a link only while it points where the collection made it point. A file it did not place is never
        removed. Empty - nothing is removed.
    type: list
    elements: str
    default: []
notes:
  - Interrupting a long download is safe - rerun the task and it resumes. A shard is never visible under its final
    name before it is verified. Nothing here deletes a shard of the model at hand, complete or corrupt.
  - A failed fetch or repair says what was kept and what to do; when the disk is full it names the deleted files that
    processes still hold open there.
  - On a copy-on-write filesystem (btrfs) an in-place repair allocates new blocks for what it rewrites; only the
    differing blocks are rewritten.
  - The plan, verification, ownership, the progress file and the steps in detail - C(docs/modules.md).
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Reports what would be fetched, resumed, repaired, re-verified, removed or linked; nothing is copied.
  diff_mode:
    details: Each corrupt shard (before) and how it is repaired (after); the headers name the host.
seealso:
  - module: llamarpc.cluster.gguf_shard_facts
  - module: llamarpc.cluster.gguf_shard_plan
  - module: llamarpc.cluster.sshfs_masked_mount
"""

EXAMPLES = r"""
# On every candidate host at once: each fetches its own shards, in parallel.
- name: Place Qwen2.5-32B Q4_K_M on the cluster, preferring the coordinator
  hosts: coordinator:rpc_workers
  become: true
  tasks:
    - name: Report each host's model directory
      llamarpc.cluster.gguf_shard_facts:
        model_dir: /data/models/qwen2.5-32b

    - name: Plan the shards over the hosts (controller)
      llamarpc.cluster.gguf_shard_plan:
        hf_repo: Qwen/Qwen2.5-32B-Instruct-GGUF
        hf_pattern: "*q4_k_m*.gguf"
        model_dir: /data/models/qwen2.5-32b
        coordinator: "{{ groups['coordinator'][0] }}"
        reserve: 2G
      run_once: true
      register: shard_plan

    - name: Fetch, verify and link this host's shards
      llamarpc.cluster.gguf_shard_place:
        model_dir: /data/models/qwen2.5-32b
        shards: "{{ shard_plan.place[inventory_hostname].shards }}"
        links: "{{ shard_plan.place[inventory_hostname].links }}"
        drop: "{{ shard_plan.place[inventory_hostname].drop }}"
"""

RETURN = r"""
fetched:
  description: Shards downloaded (or copied) to this host by this run.
  returned: always
  type: list
  elements: dict
  sample: [{name: m-00002-of-00002.gguf, resumed_from: 1048576000, downloaded: 2743193856, seconds: 211.4}]
verified:
  description: Shards of this host that were hashed by this run (and found good).
  returned: always
  type: list
  elements: str
refetched:
  description: Shards found corrupt (wrong size or sha256) on this host, and repaired or fetched again.
  returned: always
  type: list
  elements: str
repaired:
  description: Shards repaired in their own file (same inode) by this run, with the bytes rewritten (only the blocks
    that differed from the source).
  returned: always
  type: list
  elements: dict
  sample: [{name: m-00001-of-00002.gguf, rewritten: 1048576}]
actions:
  description: What was done (or would be done in check mode) on this host.
  returned: always
  type: list
  elements: str
  sample:
    - fetch m-00001-of-00002.gguf (resume from 104857600)
    - link m-00002-of-00002.gguf -> /mnt/llamarpc/node2/m-00002-of-00002.gguf
removed:
  description: The files and links of models not in O(keep_models) removed (or, in check mode, to be removed).
  returned: always
  type: list
  elements: str
kept_foreign:
  description: Names recorded for models not kept that were left because the collection did not place them as they
    are now (a user's file, a file changed since, a link pointing elsewhere).
  returned: always
  type: list
  elements: str
freed:
  description: Bytes of the files in RV(removed).
  returned: with O(keep_models)
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_options import PLACE
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_place_run import run_module


def main():
    module = AnsibleModule(argument_spec=PLACE, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
