#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_shard_place
short_description: Place the shards of a split GGUF model across hosts that have room, fetch them resumably
version_added: 0.1.0
description:
  - Places the shards of a split GGUF model on the hosts with room for them, and makes the O(coordinator)'s model
    directory show every shard under its split file name, as llama.cpp needs (shards held elsewhere are symlinks into
    the mounts of M(llamarpc.cluster.sshfs_masked_mount)).
  - Plans before it fetches - complete shards stay where they are; the others go first-fit onto the coordinator, then
    onto the other hosts by usable bytes, keeping O(reserve) and O(tensor_caches) free. When the model does not fit,
    every host fails before anything is downloaded.
  - Each host downloads its own shards; an interrupted download resumes (C(NAME.partial), HTTP C(Range)); every shard
    is verified (size and sha256), made read-only and renamed into place. A rerun changes nothing.
  - A corrupt shard of the right size is repaired in its own file (same inode) from its source - by C(Range) from a
    URL or the hub, or from the controller file - writing only the blocks that differ, then verified. That needs no
    room for a second copy (a nearly full disk), and a process holding the file open (sftp-server behind the
    coordinator's SSHFS mount) reads the repaired bytes. A killed repair resumes (C(NAME.repair.json)). A corrupt
    shard of the wrong size is replaced by a verified download when there is room for one, else rewritten in place
    when there is room for its growth, else the task fails and changes nothing.
  - Run it on every candidate host at once (C(forks) at least the batch size; not with the free strategy), or on the
    coordinator alone with O(candidates).
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - On the controller, for O(hf_repo) only - the C(huggingface_hub) Python package (metadata, token and URL
    resolution).
  - On the managed hosts - Python 3 standard library only (downloads use urllib); network access to the
    download URLs (the hub and its CDN for O(hf_repo)).
options:
  model_dir:
    description:
      - Absolute path of the model directory on every host (created, mode 0755). On the coordinator it is the
        directory to give llama.cpp (C(-m MODEL_DIR/PREFIX-00001-of-0000N.gguf)).
    type: path
    required: true
  coordinator:
    description:
      - Inventory name of the host that loads the model. It is preferred for shards and gets the symlinks.
      - Defaults to the first host of the play batch, or with O(candidates) to the host the task runs on.
    type: str
  candidates:
    description:
      - Inventory names of the hosts that may hold shards, when the task runs on the coordinator alone (the
        coordinator is always one of them). Each host is reached as a delegated task would reach it (its
        C(ansible_host), user, port, key, become settings). Hosts are inspected and filled one after the other.
      - Empty (the default) - the hosts running the task are the candidates.
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
        controller (C(HF_TOKEN), the token file). Sent to the hosts only as a request header, never logged.
    type: str
  hf_endpoint:
    description:
      - Hub endpoint (a mirror such as a self-hosted one). Defaults to C(HF_ENDPOINT) on the controller, else the
        public hub. The managed hosts must reach it too.
    type: str
  urls:
    description: Plain HTTP(S) URLs to fetch, with their checksums.
    type: list
    elements: dict
    suboptions:
      url:
        description: The URL. The host fetches it with C(Range) requests (a server that ignores Range works, but
          an interrupted download then starts over).
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
      - Files on the controller (relative paths are searched like M(ansible.builtin.copy)'s C(src)). The
        controller hashes them and copies each one to the host it is planned for.
    type: list
    elements: path
  reserve:
    description:
      - Bytes to keep free on every host's model filesystem, as a number of bytes or with a unit (C(512M),
        C(2G)).
    type: str
    default: 1G
  tensor_caches:
    description:
      - Per host (inventory name), the llama.cpp RPC tensor cache of the worker there, a dict with C(path) (its
        C(LLAMA_CACHE) directory, absolute; tensors go into its C(rpc) sub-directory) and C(max_size) (the cap
        its pruner enforces, bytes or with a unit such as C(20G)).
      - When a host's cache and O(model_dir) are on one filesystem (same device; a path not created yet counts
        where its nearest existing parent is), the plan keeps room on that host for the cache to grow to its cap
        (the cap minus the bytes already in C(PATH/rpc)), on top of O(reserve). A cache on another filesystem
        changes nothing; entries for hosts that are not candidates, and empty ones (no cache), are ignored.
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
    description: Create the coordinator's symlinks to shards on other hosts.
    type: bool
    default: true
  verify:
    description:
      - C(quick) hashes only shards whose size or mtime differ from the manifest; C(full) hashes every shard.
    type: str
    choices: [quick, full]
    default: quick
  timeout:
    description: Socket timeout of each HTTP request in seconds.
    type: int
    default: 60
  retries:
    description: Attempts after a failed request before giving up (each resumes where the last one stopped).
    type: int
    default: 5
  plan_timeout:
    description: Seconds a host waits for the others' reports before planning.
    type: int
    default: 600
  validate_certs:
    description: Verify TLS certificates (hosts and controller).
    type: bool
    default: true
  fetch:
    description:
      - V(false) plans only, for C(playbooks/plan.yml) - the source is resolved (controller files are not hashed),
        every candidate host reports its model directory, the plan is made as with V(true), and the GGUF header of
        every shard is read - with HTTP C(Range) requests of growing size from a URL or the hub, or from the
        controller file - never its tensor data. Nothing is fetched, copied, linked or removed on any host.
      - A model that does not fit is not a failure then - RV(refusal) holds the message the task would fail with.
    type: bool
    default: true
  _request:
    description:
      - Internal. Set by the action plugin for each host (the phase, the shards and links); not for playbooks.
    type: dict
  _headers:
    description:
      - Internal. Request headers for the source (the hub token) set by the action plugin; not for playbooks.
    type: dict
notes:
  - Interrupting a long download is safe - rerun the task and it resumes. A shard is never visible under its final
    name before it is verified.
  - Nothing here deletes a complete shard, nor a corrupt one (it is repaired in place or replaced by the rename of a
    verified copy); a copy on a host that the plan does not use is reported as C(redundant). Partial downloads of
    shards planned for another host are removed.
  - A failed fetch or repair says what was kept and what to do; when the disk is full it names the deleted files that
    processes still hold open there (their blocks stay allocated until they close them).
  - On a copy-on-write filesystem (btrfs) an in-place repair allocates new blocks for what it rewrites; only the
    differing blocks are rewritten.
  - The sidecar records the ETag; when the source changes (new ETag) a partial download starts over.
  - The plan, verification, ownership, the progress file and the two ways to run it, in detail - C(docs/modules.md).
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Gathers free space, plans and reports what would be fetched, resumed, repaired, re-verified or linked.
  diff_mode:
    details: The placement of every shard before (where it is now) and after (the plan); then, per host with corrupt
      shards, each one (before) and how it is repaired (after).
seealso:
  - module: llamarpc.cluster.sshfs_masked_mount
"""

EXAMPLES = r"""
- name: Place Qwen2.5-32B Q4_K_M on the cluster, preferring the coordinator
  hosts: coordinator:rpc_workers
  tasks:
    - name: Plan and fetch the shards
      llamarpc.cluster.gguf_shard_place:
        hf_repo: Qwen/Qwen2.5-32B-Instruct-GGUF
        hf_pattern: "*q4_k_m*.gguf"
        model_dir: /data/models/qwen2.5-32b
        coordinator: "{{ groups['coordinator'][0] }}"
        reserve: 2G
        # The RPC workers' tensor caches: room kept for them wherever they share a disk with /data/models.
        tensor_caches:
          node2: {path: /var/cache/llamarpc/rpc-worker, max_size: 20G}
          node3: {path: /var/cache/llamarpc/rpc-worker, max_size: 20G}
      become: true

- name: Shards served by a local mirror, with checksums
  hosts: coordinator:rpc_workers
  tasks:
    - name: Fetch from plain URLs
      llamarpc.cluster.gguf_shard_place:
        model_dir: /data/models/tiny
        coordinator: node1
        urls:
          - url: http://10.213.0.1:8080/tiny-00001-of-00002.gguf
            sha256: 5a1c0e8b04a0c7d3f8b6c1f1e0a7b9d2c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8
          - url: http://10.213.0.1:8080/tiny-00002-of-00002.gguf
            sha256: 0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0

- name: From a play on the coordinator alone, fill the coordinator and the workers
  hosts: coordinator
  tasks:
    - name: Plan over the coordinator and the workers, fetch each shard onto its host
      llamarpc.cluster.gguf_shard_place:
        files: "{{ lookup('ansible.builtin.fileglob', '/srv/models/tiny-*.gguf', wantlist=True) | sort }}"
        model_dir: /data/models/tiny
        candidates: "{{ groups['rpc_workers'] }}"
      become: true

- name: Check what would happen, and show the plan
  hosts: coordinator:rpc_workers
  tasks:
    - name: Plan only
      llamarpc.cluster.gguf_shard_place:
        files: [/srv/models/tiny-00001-of-00002.gguf, /srv/models/tiny-00002-of-00002.gguf]
        model_dir: /data/models/tiny
      check_mode: true
      diff: true
"""

RETURN = r"""
plan:
  description:
    - Every shard in file order with the host it is placed on and its path on that host (the same on every host).
  returned: always, except with O(fetch=false) when RV(refusal) is set
  type: list
  elements: dict
  sample:
    - {name: m-00001-of-00002.gguf, size: 3795193856, sha256: 9f86d0..., host: node1,
       path: /data/models/m/m-00001-of-00002.gguf}
    - {name: m-00002-of-00002.gguf, size: 3791290336, sha256: 60303a..., host: node2,
       path: /data/models/m/m-00002-of-00002.gguf}
hosts:
  description:
    - Per candidate host, the usable bytes (free + partials - reserve - tensor cache room), the bytes assigned
      and the bytes left.
    - C(tensor_cache) (bytes kept for the RPC tensor cache to grow to its cap) only on hosts whose cache shares
      the model filesystem.
  returned: always
  type: dict
  sample: {node1: {usable: 19000000000, assigned: 15000000000, left: 4000000000},
           node2: {usable: 2000000000, assigned: 0, left: 2000000000, tensor_cache: 21474836480}}
assigned:
  description: Names of the shards placed on this host.
  returned: always
  type: list
  elements: str
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
links:
  description: On the coordinator, symlink name to target for the shards on other hosts.
  returned: always
  type: dict
  sample: {m-00002-of-00002.gguf: /mnt/llamarpc/node2/m-00002-of-00002.gguf}
redundant:
  description: Complete copies on this host of shards that the plan keeps on another host (left in place).
  returned: always
  type: list
  elements: str
actions:
  description: What was done (or would be done in check mode) on this host.
  returned: always
  type: list
  elements: str
  sample: [fetch m-00001-of-00002.gguf (resume from 104857600), link m-00002-of-00002.gguf]
model_path:
  description: On the coordinator, the path of shard 1 (what C(llama-server -m) takes).
  returned: always
  type: str
  sample: /data/models/qwen2.5-32b/m-00001-of-00002.gguf
per_host:
  description: With O(candidates), what happened on each candidate host (the other keys describe the coordinator).
  returned: when O(candidates) is used
  type: dict
  sample:
    node2:
      assigned: [m-00002-of-00002.gguf]
      fetched: [{name: m-00002-of-00002.gguf, resumed_from: 0, downloaded: 3791290336, seconds: 211.4}]
      verified: []
      refetched: []
      actions: [fetch m-00002-of-00002.gguf]
model:
  description:
    - With O(fetch=false), the model as M(llamarpc.cluster.llama_cluster_plan) plans it (its
      O(llamarpc.cluster.llama_cluster_plan#module:model)), read from the shards' GGUF headers - layer count, weight
      bytes per layer, KV heads and sizes.
  returned: when O(fetch=false)
  type: dict
  sample: {"architecture": "llama", "n_layer": 8, "weight_bytes": 13107200}
header_reads:
  description: With O(fetch=false), per shard the header's length, where its data starts, and the HTTP requests and
    bytes it took to read it.
  returned: when O(fetch=false)
  type: list
  elements: dict
  sample: [{name: m-00001-of-00002.gguf, header_bytes: 6021344, data_offset: 6021344, requests: 7, received: 8323072}]
refusal:
  description: With O(fetch=false), the message a fetching run would fail with when the model does not fit (what is
    missing where), else null; RV(plan) is then not returned.
  returned: when O(fetch=false)
  type: str
reports:
  description: With O(fetch=false), what each candidate host reported of its model directory (C(free), C(partial_bytes),
    C(complete), C(exists), C(tensor_cache)).
  returned: when O(fetch=false)
  type: dict
shards:
  description: With O(fetch=false), the shards of the source in order (C(name), C(size), C(sha256) - null for
    controller files - and C(url)).
  returned: when O(fetch=false)
  type: list
  elements: dict
revision:
  description: The commit the Hugging Face revision resolved to.
  returned: when O(hf_repo) is used
  type: str
"""

import contextlib
import os
import shutil
import stat
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils import _shard_fetch
from ansible_collections.llamarpc.cluster.plugins.module_utils._shard_plan import human

# Options of the task; the action plugin resolves them on the controller and calls this module with the
# hidden ``_phase`` options below (``stat``: report the model directory, ``apply``: fetch, verify, link).
TASK_OPTIONS = {
    "model_dir": {"type": "path", "required": True},
    "coordinator": {"type": "str"},
    "candidates": {"type": "list", "elements": "str", "default": []},
    "hf_repo": {"type": "str"},
    "hf_revision": {"type": "str", "default": "main"},
    "hf_pattern": {"type": "str"},
    "hf_token": {"type": "str", "no_log": True},
    "hf_endpoint": {"type": "str"},
    "urls": {
        "type": "list",
        "elements": "dict",
        "options": {
            "url": {"type": "str", "required": True},
            "sha256": {"type": "str", "required": True},
            "size": {"type": "int"},
            "name": {"type": "str"},
        },
    },
    "files": {"type": "list", "elements": "path"},
    "reserve": {"type": "str", "default": "1G"},
    "tensor_caches": {"type": "dict", "default": {}},
    "mount_root": {"type": "path", "default": "/mnt/llamarpc"},
    "mount_paths": {"type": "dict", "default": {}},
    "link": {"type": "bool", "default": True},
    "verify": {"type": "str", "choices": ["quick", "full"], "default": "quick"},
    "timeout": {"type": "int", "default": 60},
    "retries": {"type": "int", "default": 5},
    "plan_timeout": {"type": "int", "default": 600},
    "validate_certs": {"type": "bool", "default": True},
    "fetch": {"type": "bool", "default": True},
}

# The one internal option: what the action plugin asks this host to do. ``phase`` ``stat`` reports the model
# directory for ``names`` (and the filesystem and size of this host's ``tensor_cache`` directory); ``apply``
# fetches/verifies ``shards``, removes the partials in ``drop`` and creates ``links``. ``_headers`` go with every
# request to the source's origin: secret (they may hold a token), and apart so that no_log masks only them (it
# masks every string of a no_log value wherever it appears).
HIDDEN_OPTIONS = {"_request": {"type": "dict"}, "_headers": {"type": "dict", "no_log": True}}
REQUEST_DEFAULTS = {"phase": "stat", "names": [], "tensor_cache": None, "shards": [], "links": {}, "drop": []}


def apply(module, params):
    """Fetch/verify the shards assigned to this host, drop stale partials, create links."""
    model_dir = params["model_dir"]
    check = module.check_mode
    result = {"fetched": [], "verified": [], "refetched": [], "repaired": [], "actions": [], "changed": False}
    if not os.path.isdir(model_dir) and (params["_shards"] or params["_links"]):
        result["actions"].append(f"create {model_dir}")
        result["changed"] = True
        if not check:
            _shard_fetch.make_dirs(model_dir)  # owned like its parent: a directory in a user's home is the user's
    lock = None
    if not check and os.path.isdir(model_dir):
        try:
            lock = _shard_fetch.lock_dir(model_dir)  # released when this process ends, whichever way
        except _shard_fetch.FetchError as exc:
            module.fail_json(msg=str(exc), **result)
    try:
        return _apply_locked(module, params, result)
    finally:
        if lock is not None:
            lock.close()  # also when the module fails (an in-process caller may run it again)


def _apply_locked(module, params, result):
    model_dir = params["model_dir"]
    check = module.check_mode
    manifest_path = os.path.join(model_dir, _shard_fetch.MANIFEST)
    manifest = (_shard_fetch.read_json(manifest_path) or {}) if os.path.isdir(model_dir) else {}
    manifest_before = dict(manifest)
    progress_path = os.path.join(model_dir, _shard_fetch.PROGRESS)
    corrupt_found, repairs = {}, {}  # the diff of the repairs: each corrupt shard, and what is done about it

    for shard in params["_shards"]:
        name = shard["name"]
        path = os.path.join(model_dir, name)
        corrupt = False
        if os.path.isfile(path) and not os.path.islink(path):
            ok, hashed, record = _shard_fetch.verify_file(model_dir, shard, manifest, full=params["verify"] == "full")
            if ok:
                manifest[name] = record
                if hashed:
                    result["verified"].append(name)
                if stat.S_IMODE(os.stat(path).st_mode) != _shard_fetch.READ_ONLY:
                    result["actions"].append(f"chmod 0444 {name}")
                    result["changed"] = True
                    if not check:
                        os.chmod(path, _shard_fetch.READ_ONLY)
                        manifest[name] = {**record, "mtime_ns": os.stat(path).st_mtime_ns}
                if _shard_fetch.give_to_directory_owner(path, check=check):
                    result["actions"].append("chown {} {}:{}".format(name, *_shard_fetch.owner_of(model_dir)))
                    result["changed"] = True
                if os.path.exists(path + _shard_fetch.REPAIR):  # a killed repair that had already mended the file
                    result["actions"].append(f"remove {name}{_shard_fetch.REPAIR} (the shard verifies)")
                    result["changed"] = True
                    if not check:
                        os.unlink(path + _shard_fetch.REPAIR)
                continue
            corrupt = True
            manifest.pop(name, None)
            result["refetched"].append(name)
            found = f"sha256 {record['sha256']}" if record else f"{os.path.getsize(path)} bytes"
            corrupt_found[name] = (
                f"{name}: corrupt ({found}, expected {shard['size']} bytes, sha256 {shard['sha256']})\n"
            )
        if not shard.get("url") and not shard.get("src"):
            result.setdefault("need_source", []).append(name)  # the action plugin copies it and calls again
            continue
        in_place = corrupt and _repair_in_place(module, model_dir, shard, path, result)
        partial = path + _shard_fetch.PARTIAL
        sidecar = _shard_fetch.read_json(path + _shard_fetch.SIDECAR)
        resumable = os.path.isfile(partial) and _shard_fetch.sidecar_matches(sidecar, shard) and not shard.get("src")
        start = (
            _shard_fetch.repair_resume_point(path, shard) if in_place else os.path.getsize(partial) if resumable else 0
        )
        verb = f"repair {name} in place" if in_place else f"{'re' if corrupt else ''}fetch {name}"
        if corrupt:
            repairs[name] = f"{name}: {'repaired in its own inode' if in_place else 'replaced by a verified copy'}\n"
        result["actions"].append(verb + (f" (resume from {start})" if start else ""))
        result["changed"] = True
        if check:
            continue
        # A corrupt shard is never unlinked: it is repaired in its own inode (see _repair_in_place), or replaced by
        # the rename of a verified copy, so a failed fetch leaves things as they were.
        if corrupt:
            with contextlib.suppress(OSError):  # a full disk: the repair sidecar still marks the file untrusted
                _save_manifest(manifest_path, manifest, manifest_before)  # a killed repair must not be trusted later
                manifest_before = dict(manifest)
        started = time.monotonic()
        progress = _shard_fetch.Progress(progress_path, name, int(shard["size"]), start)
        fetch_args = {
            "headers": params["_headers"],
            "timeout": params["timeout"],
            "retries": params["retries"],
            "progress": progress,
            "validate_certs": params["validate_certs"],
        }
        try:
            if in_place:
                resumed_from, downloaded, rewritten, manifest[name] = _shard_fetch.repair_in_place(
                    path, shard, **fetch_args
                )
                result["repaired"].append({"name": name, "rewritten": rewritten})
            elif shard.get("src"):
                resumed_from, downloaded = _shard_fetch.copy_local(shard["src"], partial, shard)
            else:
                resumed_from, downloaded = _shard_fetch.download(shard["url"], partial, shard, **fetch_args)
            if not in_place:
                manifest[name] = _shard_fetch.finish(model_dir, shard, partial)
        except (_shard_fetch.FetchError, OSError) as exc:
            _save_manifest(manifest_path, manifest, manifest_before)
            module.fail_json(msg=_failure(exc, model_dir, shard, corrupt, in_place), **result)
        _save_manifest(manifest_path, manifest, manifest_before)
        manifest_before = dict(manifest)
        result["fetched"].append(
            {
                "name": name,
                "resumed_from": resumed_from,
                "downloaded": downloaded,
                "seconds": round(time.monotonic() - started, 2),
            }
        )

    for name in params["_drop"]:
        if any(
            os.path.exists(os.path.join(model_dir, name + suffix))
            for suffix in (_shard_fetch.PARTIAL, _shard_fetch.SIDECAR)
        ):
            result["actions"].append(f"remove {name}{_shard_fetch.PARTIAL} (planned for another host)")
            result["changed"] = True
            if not check:
                _shard_fetch.remove_partial(model_dir, name)

    for name, target in sorted(params["_links"].items()):
        path = os.path.join(model_dir, name)
        if os.path.islink(path) and os.readlink(path) == target:
            continue
        if os.path.exists(path) and not os.path.islink(path):
            module.fail_json(msg=f"{path} exists and is not a symlink; refusing to replace it with a link", **result)
        result["actions"].append(f"link {name} -> {target}")
        result["changed"] = True
        if not check:
            _shard_fetch.link(model_dir, name, target)

    if module._diff and corrupt_found:
        result["diff"] = {
            "before_header": f"{model_dir}: shards found corrupt",
            "after_header": f"{model_dir}: repair",
            "before": "".join(corrupt_found.values()),
            "after": "".join(repairs.values()),
        }
    if not check:
        _save_manifest(manifest_path, manifest, manifest_before)
        if result["fetched"]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(progress_path)
    return result


def _repair_in_place(module, model_dir, shard, path, result):
    """Whether the corrupt shard at ``path`` is repaired in its own inode (True) or replaced by a verified
    ``.partial`` renamed over it (False); fails, changing nothing, when neither has room.

    In place whenever its size is right: no second copy's room is needed (a worker's disk is often nearly full), a
    process holding the file open (sftp-server behind the coordinator's SSHFS mount, an mmap) reads the repaired
    bytes instead of keeping a corrupt unlinked inode and its blocks, and only differing blocks are written. A file of
    the wrong size is replaced by a verified download when there is room for it (the rename is atomic), else it is
    rewritten in place too when the disk has room for its growth.
    """
    size = int(shard["size"])
    have = os.path.getsize(path)
    free = shutil.disk_usage(model_dir).free
    if have == size or _shard_fetch.repair_resume_point(path, shard):
        return True
    partial = path + _shard_fetch.PARTIAL
    partial_bytes = os.path.getsize(partial) if os.path.isfile(partial) else 0
    if free + partial_bytes >= size:
        return False
    if free >= size - have:
        return True
    module.fail_json(
        msg=f"{shard['name']} is corrupt ({human(have)}, expected {human(size)}) and cannot be repaired: "
        f"{human(size - have - free)} more room is needed in {model_dir} ({human(free)} free). Nothing was changed. "
        + _room_hint(model_dir),
        **result,
    )
    return False


def _room_hint(model_dir):
    """What to do about a full disk: name the deleted files still held open there, which keep their blocks."""
    held = _shard_fetch.deleted_but_open(model_dir)
    if not held:
        return "Free some space on that filesystem, then run again."
    listed = ", ".join(
        f"{entry['path']} ({human(entry['size'])}, pid {entry['pid']} {entry['command']})" for entry in held
    )
    return (
        f"Deleted files there are still held open, and keep their blocks until closed: {listed}. Restart those "
        "processes (llama-server; sftp-server closes when the coordinator's SSHFS mount of this host is remounted), "
        "or free other space, then run again."
    )


def _failure(exc, model_dir, shard, corrupt, in_place):
    """The message of a failed fetch or repair: what went wrong, what was kept, and what to do."""
    name = shard["name"]
    what = str(exc) if isinstance(exc, _shard_fetch.FetchError) else f"{name}: {exc.strerror or exc}"
    source = shard.get("url") or shard.get("src")
    if isinstance(exc, OSError) or "no space left" in what:
        free = shutil.disk_usage(model_dir).free
        what += f" ({human(free)} free in {model_dir}, the shard is {human(int(shard['size']))})"
        todo = _room_hint(model_dir)
    else:
        todo = f"Make {source} reachable (or fix the source), then run again."
    if in_place:
        kept = f"The corrupt {name} was kept in place and partly repaired at most; the next run resumes the repair."
    elif corrupt:
        kept = f"The corrupt {name} was kept (it is replaced only by a verified copy)."
    else:
        kept = "The bytes received so far are kept; the next run resumes."
    return f"{what.rstrip('.')}. {kept} {todo}"


def _save_manifest(path, manifest, before):
    if manifest != before and os.path.isdir(os.path.dirname(path)):
        _shard_fetch.write_json(path, manifest)


def main():
    module = AnsibleModule(argument_spec={**TASK_OPTIONS, **HIDDEN_OPTIONS}, supports_check_mode=True)
    params = dict(module.params)
    request = {**REQUEST_DEFAULTS, **(params.pop("_request") or {})}
    params.update({f"_{key}": value for key, value in request.items()})
    params["_headers"] = params["_headers"] or {}
    model_dir = params["model_dir"]
    if not os.path.isabs(model_dir):
        module.fail_json(msg=f"model_dir must be an absolute path, got {model_dir!r}")
    if params["_phase"] == "stat":
        try:
            report = _shard_fetch.inspect(model_dir, params["_names"], params["_tensor_cache"])
        except OSError as exc:
            module.fail_json(msg=f"cannot inspect {model_dir}: {exc}")
        module.exit_json(changed=False, report=report)
    try:
        result = apply(module, params)
    except OSError as exc:
        module.fail_json(msg=f"{model_dir}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
