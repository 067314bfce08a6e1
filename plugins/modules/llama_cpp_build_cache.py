#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_cpp_build_cache
short_description: The controller's cache of llama.cpp builds, keyed before anything is built
version_added: 0.2.0
description:
  - An action that runs on the controller only, as the controller's user (it never connects to a host and never
    uses C(become)). One entry per controller key - C(<cache_dir>/<key>/bin.tar.gz), the binaries as the build
    host packed them, and C(build.json), written last, with what the nodes' install needs (the build key, the RPC
    server's name and protocol, the files, the build host and its platform).
  - The key is the sha256 over O(checksum), O(subdir), O(cmake_flags) (the build module's defaults for the
    architecture and O(cpu) when empty), O(targets), the O(helpers) (name and source sha256 of each), the O(patches)
    (name and sha256 of each, in order), and the build
    host's architecture, OS family, distribution and release, and glibc version from O(platform) (with the CPU's
    flags for a native build). It needs no compiler on the build host, so a hit is decided before the toolchain is
    installed or the build host is touched.
  - O(state=lookup) reports RV(hit) and the entry; O(state=store) puts O(archive) into the entry and writes
    C(build.json) from O(build), the result of M(llamarpc.cluster.llama_cpp_build).
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  state:
    description: Look the key up, or store a build under it.
    type: str
    choices: [lookup, store]
    default: lookup
  cache_dir:
    description: The controller's cache directory (created when storing).
    type: path
    required: true
  checksum:
    description: sha256 of the source archive.
    type: str
    required: true
  subdir:
    description: Directory of the llama.cpp tree in the archive (empty - detected).
    type: str
    default: ""
  cmake_flags:
    description: Configure flags (empty - the build module's defaults).
    type: list
    elements: str
    default: []
  cpu:
    description: V(portable) or V(native), as the option C(cpu) of M(llamarpc.cluster.llama_cpp_build).
    type: str
    choices: [portable, native]
    default: portable
  targets:
    description: CMake targets.
    type: list
    elements: str
    required: true
  helpers:
    description:
      - The helper sources the build compiles (option C(helpers) of M(llamarpc.cluster.llama_cpp_build)), as files on
        the controller - the same bytes the build host gets.
    type: list
    elements: path
    default: []
  patches:
    description:
      - The patches the build applies (option C(patches) of M(llamarpc.cluster.llama_cpp_build)), as files on the
        controller - the same bytes the build host gets.
    type: list
    elements: path
    default: []
  platform:
    description: The build host's C(llamarpc_platform) fact (M(llamarpc.cluster.llama_cpp_platform_facts)).
    type: dict
    required: true
  build:
    description: With O(state=store), the registered result of M(llamarpc.cluster.llama_cpp_build).
    type: dict
  build_host:
    description: With O(state=store), the host that built.
    type: str
  archive:
    description: With O(state=store), the build's archive on the controller (fetched from the build host).
    type: path
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: O(state=store) only looks up in check mode.
seealso:
  - module: llamarpc.cluster.llama_cpp_build
  - module: llamarpc.cluster.llama_cpp_platform_facts
"""

EXAMPLES = r"""
- name: Look up the controller's cache
  llamarpc.cluster.llama_cpp_build_cache:
    cache_dir: "{{ lookup('ansible.builtin.env', 'HOME') }}/.cache/llamarpc/llama-cpp"
    checksum: 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
    targets: [ggml-rpc-server, llama-server]
    platform: "{{ hostvars['node1'].ansible_facts.llamarpc_platform }}"
  run_once: true
  register: cached
"""

RETURN = r"""
controller_key:
  description: The controller key.
  returned: always
  type: str
  sample: 4b6e0c6c1d0f4f1e9a0e2e8f5d7c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c
helpers:
  description: The programs O(helpers) become in the build's C(bin/) (each source's file name without its suffix,
    C(_) as C(-)), hit or not.
  returned: always
  type: list
  elements: str
  sample: [llamarpc-fnv1a]
hit:
  description: Whether a complete entry is there (after O(state=store), true).
  returned: always
  type: bool
  sample: true
reason:
  description: Why the entry cannot be used (empty on a hit).
  returned: always
  type: str
  sample: no entry
entry_dir:
  description: The entry's directory.
  returned: always
  type: str
  sample: /home/me/.cache/llamarpc/llama-cpp/4b6e0c6c1d0f4f1e9a0e2e8f5d7c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c
archive:
  description: The binaries' archive on the controller.
  returned: on a hit
  type: str
  sample: /home/me/.cache/llamarpc/llama-cpp/4b6e0c6c1d0f4f1e9a0e2e8f5d7c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c/bin.tar.gz
key:
  description: The build key (M(llamarpc.cluster.llama_cpp_build)'s), which names the install directory on the nodes.
  returned: on a hit
  type: str
  sample: 930e0fe5fb03f4f0c82e7c44f6ac122edf49c0e8a789fb6ec2d5420ad90894c1
rpc_server:
  description: File name of the RPC server in the archive.
  returned: on a hit
  type: str
  sample: ggml-rpc-server
rpc_protocol:
  description: RPC protocol version of the build (null for trees without one).
  returned: on a hit
  type: dict
  sample: {major: 7, minor: 0, patch: 0, version: 7.0.0}
patches:
  description:
    - Each of O(patches) with C(name), C(sha256), C(applied) and C(reason) (why a patch did not apply to the source,
      which was then built without it), as the build recorded them.
  returned: on a hit
  type: list
  elements: dict
  sample: [{name: rpc-tensor-hashes.patch, sha256: 5d41402abc4b2a76b9719d911017c592ae1f4d3a9c5e6b7a8f9e0d1c2b3a4f5e,
            applied: true, reason: ""}]
record:
  description: The entry's C(build.json).
  returned: on a hit
  type: dict
"""
