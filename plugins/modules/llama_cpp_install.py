#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_cpp_install
short_description: One llama.cpp build's binaries on a node, with their runtime packages, in one task
version_added: 0.3.0
description:
  - Reads the node itself - the build's marker C(<install_dir>/<key>/complete) (written last by an install; only a
    regular file counts), which of O(packages) C(dpkg-query) does not report installed, and which RPC server
    C(<install_dir>/<key>/bin) holds (C(ggml-rpc-server) in current trees, C(rpc-server) in older ones) - and acts only
    on a difference. A node that has the build and the packages costs one module run and no transfer.
  - Missing packages are installed exactly as M(llamarpc.cluster.apt_packages) installs them (M(ansible.builtin.apt),
    C(state=present), with O(update_cache), O(cache_valid_time) and O(install_recommends)).
  - Without the marker, the controller's O(archive) (tar or zip) is copied to the node and unpacked into
    C(<install_dir>/<key>/bin) through a staging directory, every file fsynced, then the marker is written atomically
    and durably. An unpack cut short leaves no marker, and the next run unpacks again.
  - Returns what the M(llamarpc.cluster.llama_cpp) role publishes as C(llama_cpp_*) facts (RV(bin_dir),
    RV(rpc_server_bin), RV(server_bin), RV(rpc_protocol), RV(build_key), RV(helper_names), RV(installed)).
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment:
  - llamarpc.cluster.attributes
  - llamarpc.cluster.attributes.check_diff
  - llamarpc.cluster.apt_install
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on
      the controller.
    support: full
  check_mode:
    details:
      - Reports the packages that are not installed (and what apt would install with them) and the unpack a real run
        would do; changes nothing. RV(installed) is false until the build is on the node.
  diff_mode:
    details: The marker's content before and after, and the packages a real run would install.
options:
  install_dir:
    description: Install directory on the node; the build goes to C(<install_dir>/<key>).
    type: path
    required: true
  key:
    description: The build key (a directory name), as M(llamarpc.cluster.llama_cpp_build_cache) returns it.
    type: str
    required: true
  archive:
    description:
      - The binaries' archive on the controller (tar, compressed or not, or zip, with the files at its top), copied
        to the node only when the marker is missing. Required for an install; in check mode it may be omitted (a
        build that does not exist yet).
    type: path
  src:
    description:
      - The archive already on the node. The action plugin sets it after copying O(archive); a task gives O(archive).
    type: path
  rpc_server:
    description: File name of the RPC server in the archive. Empty - the name found in C(bin) (current, then older).
    type: str
    default: ""
  rpc_protocol:
    description: RPC protocol version of the build, returned as RV(rpc_protocol).
    type: str
    default: ""
  helpers:
    description: Names of the helper programs the archive holds beside llama.cpp's, returned as RV(helper_names).
    type: list
    elements: str
    default: []
  packages:
    description: Debian packages the binaries need on the node (no versions, no wildcards).
    type: list
    elements: str
    default: []
notes:
  - Debian and its derivatives only (C(dpkg-query), C(apt-get)). Files belong to the user the module runs as (root,
    with C(become)).
seealso:
  - module: llamarpc.cluster.apt_packages
  - module: llamarpc.cluster.llama_cpp_build_cache
"""

EXAMPLES = r"""
- name: Install the build on the nodes (a rerun reads the marker and the packages, and changes nothing)
  llamarpc.cluster.llama_cpp_install:
    install_dir: /opt/llamarpc/llama.cpp
    key: "{{ cached.key }}"
    archive: "{{ cached.archive }}"
    rpc_server: "{{ cached.rpc_server }}"
    packages: [libgomp1, libstdc++6, libgcc-s1]
    update_cache: true
    cache_valid_time: 3600
    install_recommends: false
  register: installed
"""

RETURN = r"""
bin_dir:
  description: The build's C(bin) directory on the node.
  returned: success
  type: str
  sample: /opt/llamarpc/llama.cpp/930e0fe5fb03f4f0c82e7c44f6ac122edf49c0e8a789fb6ec2d5420ad90894c1/bin
rpc_server_bin:
  description: The RPC server (O(rpc_server), else the name found in RV(bin_dir), else C(ggml-rpc-server)).
  returned: success
  type: str
  sample: /opt/llamarpc/llama.cpp/930e0fe5fb03f4f0c82e7c44f6ac122edf49c0e8a789fb6ec2d5420ad90894c1/bin/ggml-rpc-server
server_bin:
  description: C(llama-server) in RV(bin_dir).
  returned: success
  type: str
rpc_protocol:
  description: O(rpc_protocol).
  returned: success
  type: str
  sample: 7.0.0
build_key:
  description: O(key).
  returned: success
  type: str
helper_names:
  description: O(helpers).
  returned: success
  type: list
  elements: str
  sample: [llamarpc-fnv1a]
installed:
  description: Whether the build is on the node (true after a real run; in check mode, whether it was already there).
  returned: success
  type: bool
marker:
  description: The marker's path.
  returned: always
  type: str
marker_state:
  description: The marker as the run found it - V(installed), V(absent) or V(not a regular file).
  returned: always
  type: str
packages_missing:
  description: The O(packages) that were not installed.
  returned: always
  type: list
  elements: str
would_install:
  description: What apt-get's simulation would unpack for the missing packages (as M(llamarpc.cluster.apt_packages)).
  returned: check mode, when packages are missing
  type: list
  elements: dict
unpacked:
  description: Whether this run unpacked the archive.
  returned: real runs
  type: bool
need_archive:
  description:
    - The marker is missing and no O(src) was given (the module's first run on the node); the action plugin then
      copies O(archive) and runs the module again with O(src).
  returned: real runs
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_install import ARGUMENT_SPEC, run


def main():
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
