#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_cpp_build_check
short_description: Check that llama.cpp binaries built on one host run on every node, before building
version_added: 0.2.0
description:
  - An action that runs on the controller only, from the C(llamarpc_platform) facts that
    M(llamarpc.cluster.llama_cpp_platform_facts) gathered on O(build_host) and on every host of O(nodes).
  - Fails, naming the hosts and the fix, when a host is not of a supported OS family (Debian, Ubuntu), or when a
    node has another architecture, another OS family or an older glibc than the build host (binaries ask for the
    glibc symbol versions they were linked against).
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  build_host:
    description: The host that builds (C(localhost) for the controller).
    type: str
    required: true
  nodes:
    description: The hosts that will run the binaries.
    type: list
    elements: str
    required: true
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: It changes nothing, in check mode or not.
seealso:
  - module: llamarpc.cluster.llama_cpp_platform_facts
  - module: llamarpc.cluster.llama_cpp_build
"""

EXAMPLES = r"""
- name: Gather the platform of the nodes
  llamarpc.cluster.llama_cpp_platform_facts:

- name: Check that node1's binaries run on every node
  llamarpc.cluster.llama_cpp_build_check:
    build_host: node1
    nodes: "{{ ansible_play_hosts_all }}"
  run_once: true
"""

RETURN = r"""
problems:
  description: What is wrong, one message each (empty when nothing is); the task fails when there is any.
  returned: always
  type: list
  elements: str
  sample:
    - "the build host node1 has glibc 2.39, newer than node2 (glibc 2.36): its binaries would fail there with
      'GLIBC_... not found'; set llama_cpp_build_host to ..."
build_host:
  description: O(build_host).
  returned: always
  type: str
  sample: node1
platform:
  description: The build host's C(llamarpc_platform) fact.
  returned: always
  type: dict
  sample: {architecture: x86_64, os_family: Debian, libc: glibc, libc_version: "2.36"}
"""
