#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_shard_plan
short_description: Plan where the shards of a split GGUF model go, from every candidate host's free space
version_added: 0.3.0
description:
  - An action that runs on the controller only and never connects to a host - the second of the three steps of shard
    placement, after M(llamarpc.cluster.gguf_shard_facts) on every candidate host and before
    M(llamarpc.cluster.gguf_shard_place) on each. Run it once (C(run_once), or from a play on the coordinator).
  - Resolves the source once - the hub's metadata, URLs, or hashes of controller files - and reads each candidate's
    C(gguf_shard_dir) fact.
  - Complete shards stay where they are; the others go first-fit onto the O(coordinator), then onto the other hosts by
    usable bytes, keeping O(reserve) and O(tensor_caches) free. When the model does not fit it fails, naming what is
    missing where, before anything is downloaded.
  - RV(place) holds each host's part for M(llamarpc.cluster.gguf_shard_place) - its shards, and on the coordinator
    the symlinks to the shards on other hosts (through the mounts of M(llamarpc.cluster.sshfs_masked_mount)).
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - On the controller, for O(hf_repo) only - the C(huggingface_hub) Python package.
options:
  model_dir:
    description:
      - Absolute path of the model directory on every host. On the coordinator it is the directory to give llama.cpp
        (C(-m MODEL_DIR/PREFIX-00001-of-0000N.gguf)).
    type: path
    required: true
  coordinator:
    description:
      - Inventory name of the host that loads the model. It is preferred for shards and gets the symlinks. Defaults to
        the host the task runs on.
    type: str
  candidates:
    description:
      - Inventory names of the hosts that may hold shards (the coordinator is always one of them).
      - Empty (the default) - the hosts of the play's current batch.
    type: list
    elements: str
    default: []
  hf_repo:
    description: Hugging Face repository id (C(owner/name)) to take the shards from.
    type: str
  hf_revision:
    description: Branch, tag or commit of O(hf_repo). The commit it resolves to is pinned for all hosts.
    type: str
    default: main
  hf_pattern:
    description:
      - Shell pattern (fnmatch) matched against the repository's file paths, for example C(*q4_k_m*.gguf).
        It must select one GGUF file or one complete split set.
    type: str
  hf_token:
    description:
      - Hugging Face token for private or gated repositories. Defaults to what huggingface_hub finds on the
        controller (C(HF_TOKEN), the token file). Never returned; give it to M(llamarpc.cluster.gguf_shard_place) too.
    type: str
  hf_endpoint:
    description:
      - Hub endpoint (a mirror). Defaults to C(HF_ENDPOINT) on the controller, else the public hub. The managed hosts
        must reach it too.
    type: str
  urls:
    description: Plain HTTP(S) URLs to fetch, with their checksums.
    type: list
    elements: dict
    suboptions:
      url:
        description: The URL. Hosts fetch it with C(Range) requests (a server that ignores Range works, but an
          interrupted download then starts over).
        type: str
        required: true
      sha256:
        description: Expected sha256 (hex).
        type: str
        required: true
      size:
        description: Size in bytes. Without it the controller asks the server (HEAD, C(Content-Length)).
        type: int
      name:
        description: File name in the model directory. Defaults to the last component of the URL path.
        type: str
  files:
    description:
      - Files on the controller (relative paths are searched like M(ansible.builtin.copy)'s C(src)). The controller
        hashes them; M(llamarpc.cluster.gguf_shard_place) copies each one to the host it is planned for.
    type: list
    elements: path
  reserve:
    description: Bytes to keep free on every host's model filesystem, a number or with a unit (C(512M), C(2G)).
    type: str
    default: 1G
  tensor_caches:
    description:
      - Per host, the RPC tensor cache of the worker there - C(path) (its C(LLAMA_CACHE) directory) and C(max_size)
        (the cap its pruner enforces). Where it shares the model's filesystem, room is kept for it to grow to its cap.
      - The host's M(llamarpc.cluster.gguf_shard_facts) must have been given the same O(tensor_caches) C(path).
        Entries for hosts that are not candidates, and empty ones, are ignored.
    type: dict
    default: {}
  mount_root:
    description:
      - The coordinator sees host H's model directory at O(mount_root)C(/H) unless O(mount_paths) says otherwise.
    type: path
    default: /mnt/llamarpc
  mount_paths:
    description: Per host, where the coordinator sees that host's model directory (absolute paths).
    type: dict
    default: {}
  link:
    description: Plan the coordinator's symlinks to shards on other hosts.
    type: bool
    default: true
  timeout:
    description: Socket timeout of the controller's HTTP requests in seconds.
    type: int
    default: 60
  validate_certs:
    description: Verify TLS certificates of the controller's requests.
    type: bool
    default: true
  fetch:
    description:
      - V(false) plans only, for C(playbooks/plan.yml) - controller files are not hashed, and the GGUF header of every
        shard is read (HTTP C(Range) requests of growing size, or the controller file), never its tensor data.
      - A model that does not fit is not a failure then - RV(refusal) holds the message.
    type: bool
    default: true
notes:
  - C(changed) says that the hosts do not hold the plan yet (a shard to fetch, a link to make, a partial download to
    remove); the plan itself changes nothing.
  - The plan, and the steps in detail - C(docs/modules.md).
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Plans as without check mode (nothing is changed either way).
  diff_mode:
    details: The placement of every shard before (where it is now) and after (the plan).
seealso:
  - module: llamarpc.cluster.gguf_shard_facts
  - module: llamarpc.cluster.gguf_shard_place
  - module: llamarpc.cluster.llama_plan_report
"""

EXAMPLES = r"""
# From a play on the coordinator alone, over the workers: what the llama_model role does.
- name: Report each candidate's model directory
  llamarpc.cluster.gguf_shard_facts:
    model_dir: /data/models/tiny
  delegate_to: "{{ item }}"
  delegate_facts: true
  loop: "{{ [inventory_hostname] + groups['rpc_workers'] }}"

- name: Plan the shards
  llamarpc.cluster.gguf_shard_plan:
    files: "{{ lookup('ansible.builtin.fileglob', '/srv/models/tiny-*.gguf', wantlist=True) | sort }}"
    model_dir: /data/models/tiny
    candidates: "{{ groups['rpc_workers'] }}"
    tensor_caches:
      node2: {path: /var/cache/llamarpc/rpc-worker, max_size: 20G}
  register: shard_plan

- name: Fetch each host's shards onto it
  llamarpc.cluster.gguf_shard_place:
    model_dir: /data/models/tiny
    shards: "{{ shard_plan.place[item].shards }}"
    links: "{{ shard_plan.place[item].links }}"
    drop: "{{ shard_plan.place[item].drop }}"
  delegate_to: "{{ item }}"
  loop: "{{ shard_plan.place | list }}"
"""

RETURN = r"""
plan:
  description: Every shard in file order with the host it is placed on and its path there (the same on every host).
  returned: always, except with O(fetch=false) when RV(refusal) is set
  type: list
  elements: dict
  sample:
    - {name: m-00001-of-00002.gguf, size: 3795193856, sha256: 9f86d0..., host: node1,
       path: /data/models/m/m-00001-of-00002.gguf}
place:
  description:
    - Per candidate host, the options of its M(llamarpc.cluster.gguf_shard_place) - C(shards) (each with C(name),
      C(size), C(sha256), C(etag), and C(url) or the controller file C(src); C(hub) for the hub's), C(links) (on the
      coordinator) and C(drop) (partial downloads of shards planned elsewhere).
  returned: always; empty with RV(refusal) (nothing to place on any host)
  type: dict
  sample:
    node2:
      shards: [{name: m-00002-of-00002.gguf, size: 3791290336, sha256: 60303a..., etag: null,
                url: "http://10.0.0.1/m-00002-of-00002.gguf"}]
      links: {}
      drop: []
hosts:
  description:
    - Per candidate host, the usable bytes (free + partials - reserve - tensor cache room), the bytes assigned
      and the bytes left; C(tensor_cache) (bytes kept for it) on hosts whose cache shares the model filesystem.
  returned: like RV(plan)
  type: dict
  sample: {node1: {usable: 19000000000, assigned: 15000000000, left: 4000000000}}
assigned:
  description: Names of the shards placed on the coordinator.
  returned: like RV(plan)
  type: list
  elements: str
links:
  description: On the coordinator, symlink name to target for the shards on other hosts.
  returned: like RV(plan)
  type: dict
  sample: {m-00002-of-00002.gguf: /mnt/llamarpc/node2/m-00002-of-00002.gguf}
redundant:
  description: Per host, complete copies of shards that the plan keeps on another host (left in place).
  returned: like RV(plan)
  type: dict
model_path:
  description: On the coordinator, the path of shard 1 (what C(llama-server -m) takes).
  returned: like RV(plan)
  type: str
  sample: /data/models/qwen2.5-32b/m-00001-of-00002.gguf
revision:
  description: The commit the Hugging Face revision resolved to.
  returned: when O(hf_repo) is used
  type: str
model:
  description:
    - With O(fetch=false), the model as M(llamarpc.cluster.llama_cluster_plan) plans it, read from the shards' GGUF
      headers - layer count, weight bytes per layer, KV heads and sizes.
  returned: when O(fetch=false)
  type: dict
  sample: {"architecture": "llama", "n_layer": 8, "weight_bytes": 13107200}
vocabulary:
  description: With O(fetch=false), the tokenizer's token list as shard 1's header has it - C(count) (tokens), C(sha256)
    (of the list as stored) and C(model) (the tokenizer's type); null values when it has none.
  returned: when O(fetch=false)
  type: dict
  sample: {count: 262144, sha256: 5f4c..., model: llama}
header_reads:
  description: With O(fetch=false), per shard the header's length, where its data starts, and the HTTP requests and
    bytes it took to read it.
  returned: when O(fetch=false)
  type: list
  elements: dict
  sample: [{name: m-00001-of-00002.gguf, header_bytes: 6021344, data_offset: 6021344, requests: 7, received: 8323072}]
refusal:
  description: With O(fetch=false), the message a fetching run would fail with when the model does not fit, else null.
  returned: when O(fetch=false)
  type: str
reports:
  description: With O(fetch=false), what each candidate reported of its model directory for this model (C(free),
    C(partial_bytes), C(complete), C(exists), C(tensor_cache)).
  returned: when O(fetch=false)
  type: dict
shards:
  description: With O(fetch=false), the shards of the source in order (C(name), C(size), C(sha256) - null for
    controller files - and C(url)).
  returned: when O(fetch=false)
  type: list
  elements: dict
"""
