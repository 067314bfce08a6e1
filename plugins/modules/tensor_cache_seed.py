#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tensor_cache_seed
short_description: Seed an RPC worker's tensor cache with the plan's tensors from the nearest copy of its shards
version_added: 0.2.0
description:
  - Writes into O(cache_dir) every weight tensor over 10 MiB that llama-server will offer to O(endpoint) by hash
    (C(SET_TENSOR_HASH)) when it loads O(model) on the plan O(rpc) / O(tensor_split), so that the load sends none
    of their bytes over the network.
  - Layers go to endpoints as llama.cpp assigns them with C(-ngl all) (the planner's own mapping); a tied output
    matrix (no C(output.weight)) sends the token embedding's bytes to the output layer's endpoint.
  - Each file is named by the FNV-1a 64 of its bytes (16 lower-case hex digits, computed here) and written
    atomically - a temporary name, the hash checked again, fsync, rename, fsync of the directory. A file already
    there with the right size and hash is left alone.
  - Without O(cache_dir) it only lists - the tensors per endpoint (RV(lists)), from the headers of O(model) - for a
    host that holds every shard (the coordinator) to hand each worker its O(tensors).
  - A tensor whose shard this host does not hold (O(source_dirs)) is read from the nearest other copy - first a peer
    that holds the shard (O(peers), over SFTP, exactly its bytes), then the shard's URL in O(urls), one HTTP Range
    request for exactly its bytes - and written the same way. A peer or URL that fails is not asked again in the run;
    the tensor goes to the next source. Without a URL, or when the request fails or
    the server does not answer with that range (it ignores Range or sends another part), the tensor is reported
    C(unavailable) and not seeded - nothing more than its bytes is read; llama-server sends it at the load.
  - With O(keep_file) the plan's tensors now in the cache are listed there for the worker's cache pruner, which then
    removes them only when the cap cannot hold otherwise; a rerun also reads a fetched tensor's hash from it and so
    fetches nothing that is cached already.
notes:
  - Hashing with O(hasher) (the C++ helper the C(llama_rpc_worker) role builds) runs at about 780 MB/s; without it
    Python hashes at about 5 MB/s.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Hashes the sources and the cache files already there and reports which files would be written.
  diff_mode:
    details: The plan's cache file names present before and after, and the text of O(keep_file) when given.
options:
  model:
    description: The GGUF model on this host (shard 1 of a split; every shard beside it), whose headers say which
      tensors each endpoint gets. Exactly one of O(model) and O(tensors).
    type: path
  tensors:
    description: This endpoint's tensors as a listing run returned them (an item of RV(lists)) - each with C(name),
      C(file), C(offset) and C(size).
    type: list
    elements: dict
  rpc:
    description: The plan's RPC endpoints in device order (C(rpc) of M(llamarpc.cluster.llama_cluster_plan), a list
      or a comma-separated string). Required with O(model).
    type: list
    elements: str
  tensor_split:
    description: The plan's proportions, one per endpoint (C(tensor_split) of the plan). Required with O(model).
    type: list
    elements: float
  endpoint:
    description: This worker's endpoint as it appears in O(rpc), needed with O(model) and O(cache_dir); one not in
      O(rpc) has nothing to seed.
    type: str
  cache_dir:
    description: The worker's tensor cache directory (its C(-c) directory, C($LLAMA_CACHE/rpc)); it must exist.
      Omitted - list only.
    type: path
  source_dirs:
    description: Where this host's shard files are, looked up by file name in order; omitted - the paths the tensors
      name.
    type: list
    elements: path
  hasher:
    description: The C(llamarpc-fnv1a) helper; when omitted or missing, Python hashes (slow).
    type: path
  keep_file:
    description:
      - A text file (written atomically, mode 0644) that lists the plan's tensors now in O(cache_dir) - C(present)
        or C(written); not those C(unavailable). One line per tensor, sorted, no line twice -
        C(HASH NAME FILE OFFSET SIZE) separated by single spaces - the cache file's name (16 hex digits), the
        tensor's name, its shard's file name (both percent-encoded, so neither holds a space), the tensor's offset in
        the shard and its size. Two tensors with identical bytes share a hash (one cache file) but each has its line.
        With O(shards), a sixth field - the sha256 of the shard whose bytes the hash is of - when that is known.
      - The worker's pruner (C(llamarpc_cache_prune.py --keep)) reads only the first field. Put it beside the cache
        directory, not in it (the C(llama_rpc_worker) role - C(<cache dir>/seeded-tensors) beside C(<cache dir>/rpc)).
      - A rerun takes the hash of a tensor to fetch from O(urls) from this file; when that cache file is there with
        the right size and hash, nothing is fetched.
      - Its directory must exist. Requires O(cache_dir).
    type: path
  urls:
    description:
      - Where to fetch the shards this host does not hold - a shard's file name (the basename of a tensor's C(file))
        to an C(http://) or C(https://) URL that serves it with Range requests (the shard's URL of
        M(llamarpc.cluster.gguf_shard_plan), a hub's resolve URL). Redirects are followed; an C(Authorization) or
        C(Cookie) header of O(url_headers) is not sent on to another host.
      - Each tensor is one request for its bytes (60 s without data gives up). After a failed or refused request, the
        URL's other tensors are not tried and are C(unavailable) with a C(reason) in RV(tensors).
      - Requires O(cache_dir).
    type: dict
  url_headers:
    description: HTTP headers sent with the requests for O(urls) (an C(Authorization) token, say).
    type: dict
  peers:
    description:
      - Hosts that hold shards this host lacks and export them read-only over SFTP (the
        P(llamarpc.cluster.sshfs_shard_export#role) role, which also makes this host's key and pins the peer's host
        key) - a shard's file name to C(host) (its address), C(user) (the export user), C(path) (the shard in the
        export, for example C(/shards/NAME)), C(identity_file) and C(known_hosts_file) (this host's key for the
        export, and the file that pins the peer's host key; absolute paths).
      - Asked before O(urls) - the nearer copy, and its bytes do not go through the coordinator. One SSH session per
        peer for the run (C(ssh -s USER@HOST sftp), key only, the host key checked, never a prompt); each tensor is
        read in 64 KiB requests, 16 at a time. After a failure (refused, host key unknown, the file shorter than the
        tensor, 60 s without an answer) the peer is not asked again in the run.
      - Requires O(cache_dir).
    type: dict
  shards:
    description:
      - The shards in force - a shard's file name to its sha256 (the C(llama_model) role's plan). A tensor whose hash
        is of bytes of a shard of that sha256 gets C(shard_sha256) in RV(tensors) - its shard on this host verified by
        the shard placement (its record in the model directory, size and mtime unchanged), fetched in this run from
        O(peers) or O(urls), or recorded with that sha256 in O(keep_file) (a sixth field). Only those go into the
        tensor hashes file llama-server takes (M(llamarpc.cluster.tensor_cache_hashes)).
    type: dict
  metrics_file:
    description:
      - A C(.prom) file in node exporter's textfile directory that gets this seeding's record - the bytes and cache
        files it wrote by source (C(local), C(peer), C(url)), the plan's tensors by state (C(present), C(written),
        C(unavailable)) and when it ended. Replaced whole (temporary file and rename) after each seeding, not in check
        mode; writing it is no change of the host. Omitted - no metrics. Requires O(cache_dir).
    type: path
seealso:
  - module: llamarpc.cluster.llama_cluster_plan
"""

EXAMPLES = r"""
- name: List each worker's tensors on the coordinator, which holds every shard
  llamarpc.cluster.tensor_cache_seed:
    model: /data/models/qwen2.5-32b-instruct-q4_k_m-00001-of-00005.gguf
    rpc: "{{ llama_coordinator_plan.rpc }}"
    tensor_split: "{{ llama_coordinator_plan.tensor_split }}"
  register: seed_lists

- name: Seed a worker from the shards on its own disk
  llamarpc.cluster.tensor_cache_seed:
    tensors: "{{ seed_lists.lists['10.77.0.12:50052'] }}"
    source_dirs: [/data/models]
    cache_dir: /var/cache/llamarpc-rpc/rpc
    hasher: /usr/local/lib/llamarpc/llamarpc-fnv1a

- name: Seed a worker from its own shards, the others' tensors by Range from the source, and keep the list
  llamarpc.cluster.tensor_cache_seed:
    tensors: "{{ seed_lists.lists['10.77.0.12:50052'] }}"
    source_dirs: [/data/models]
    urls: "{{ dict(shard_names | zip(shard_urls)) }}"
    url_headers:
      Authorization: "Bearer {{ hf_token }}"
    cache_dir: /var/cache/llamarpc-rpc/rpc
    keep_file: /var/cache/llamarpc-rpc/seeded-tensors
    hasher: /usr/local/lib/llamarpc/llamarpc-fnv1a
    metrics_file: /var/lib/llamarpc/metrics/llamarpc_tensor_cache_seed.prom

- name: Seed the worker's tensor cache for the plan
  llamarpc.cluster.tensor_cache_seed:
    model: /data/models/qwen2.5-32b-instruct-q4_k_m-00001-of-00005.gguf
    rpc: "{{ llama_coordinator_plan.rpc }}"
    tensor_split: "{{ llama_coordinator_plan.tensor_split }}"
    endpoint: "{{ llamarpc_mesh_address }}:50052"
    cache_dir: /var/cache/llamarpc-rpc/rpc
    hasher: /usr/local/lib/llamarpc/llamarpc-fnv1a
"""

RETURN = r"""
tensors:
  description:
    - The tensors the plan gives O(endpoint), each with C(name), C(file), C(offset) (absolute, in C(file)), C(size),
      C(hash), C(state) - C(present), C(written), C(missing) in check mode, or C(unavailable) (not seeded) - and
      C(source) - C(local) (this host's shard), C(peer) (read over SFTP from O(peers)), C(url) (fetched by Range from
      O(urls)) or null (unavailable, no source).
    - An C(unavailable) tensor has a C(reason) (no local shard, peer or URL; each source's failure). A tensor to
      fetch in check mode has a null C(hash) unless O(keep_file) recorded it.
    - With O(shards), C(shard_sha256) - the sha256 of the shard its hashed bytes are of - on each tensor whose bytes
      are known to be of a shard in force.
  returned: always
  type: list
  elements: dict
  sample:
    - name: token_embd.weight
      file: /data/models/gemma-3-270m-q4_k_m.gguf
      offset: 6422528
      size: 178257920
      hash: 5d2f31b0b4c1e6a3
      state: written
      source: local
written:
  description: Cache files written (in check mode, to write).
  returned: always
  type: int
present:
  description: Tensors already cached with the right size and hash.
  returned: always
  type: int
unavailable:
  description: Tensors not seeded - their shard is not on this host and no URL gave their bytes.
  returned: always
  type: int
fetched:
  description: Cache files written from bytes fetched from another host - over SFTP from a peer or by Range from a URL
    (in check mode, tensors to fetch); part of RV(written).
  returned: always
  type: int
bytes_fetched:
  description: Bytes received by Range requests (0 in check mode).
  returned: always
  type: int
shards_local:
  description: The file names of this host's shards whose tensors were written (in check mode, would be), sorted.
  returned: always
  type: list
  elements: str
shards_fetched:
  description: The file names of the shards whose tensors were fetched by Range (in check mode, would be), sorted.
  returned: always
  type: list
  elements: str
shards_peer:
  description: The file names of the shards whose tensors were read over SFTP from a peer (in check mode, would be),
    sorted.
  returned: always
  type: list
  elements: str
bytes_peer:
  description: Bytes read over SFTP from peers (0 in check mode).
  returned: always
  type: int
summary:
  description: The seeding's outcome without the per-tensor list - RV(written), RV(present), RV(unavailable),
    RV(fetched), RV(bytes_written), RV(bytes_fetched), RV(bytes_peer), RV(shards_local), RV(shards_peer),
    RV(shards_fetched), RV(finished_at) and RV(msg) - for a caller
    that gathers it per worker (the C(llama_coordinator) role's fact C(llama_coordinator_seeded)).
  returned: when O(cache_dir) is given
  type: dict
finished_at:
  description: When the seeding ended (Unix time; in check mode, when the check ended).
  returned: when O(cache_dir) is given
  type: float
keep_file_changed:
  description: Whether O(keep_file)'s text changed (in check mode, would change - always when a tensor is to be
    fetched, its hash unknown until then); false without O(keep_file).
  returned: always
  type: bool
lists:
  description: Without O(cache_dir) - per endpoint of O(rpc), its tensors over 10 MiB (C(name), C(file), C(offset),
    C(size)).
  returned: when O(cache_dir) is omitted
  type: dict
bytes_written:
  description: Bytes written (in check mode, to write).
  returned: always
  type: int
removed_temporaries:
  description: Temporary files of an earlier, killed run that were removed (in check mode, would be).
  returned: always
  type: list
  elements: str
msg:
  description: A one-line summary.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache._tensor_seed import (
    ARGUMENT_SPEC,
    MODULE_RULES,
    run_module,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **MODULE_RULES)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
