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
  - Once the build is on the node, it is recorded as the current one in C(<install_dir>/builds.json) (the builds made
    current, the current one first, each with its key, RPC server, RPC protocol, helpers and O(source); written
    atomically and durably, only by this module), and the builds beyond the current one and O(keep_previous) before it
    are removed - only those the record names whose directory holds the marker with their key, and of such a directory
    only what an install put there (C(bin), then the marker). A directory the record does not name, or one without the
    marker, is never removed. A build that is current already changes nothing.
  - With O(state=previous) the build before the current one is made current again from the record alone (no archive,
    no build), and the one it replaces becomes the one before it (a second rollback goes forward again). It fails,
    saying why, when the record names none or its directory is no longer whole; run it in check mode first on every
    node to find out before anything changes.
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
      - Reports the packages that are not installed (and what apt would install with them), the unpack, the record
        and the removals (RV(removed)) a real run would do; changes nothing. RV(installed) is false until the build is
        on the node. With O(state=previous), whether there is a build to roll back to (it fails when there is none).
  diff_mode:
    details:
      - The marker's content before and after, the packages a real run would install, the record's keys before and
        after (current first) and each build directory removed.
options:
  install_dir:
    description: Install directory on the node; the build goes to C(<install_dir>/<key>).
    type: path
    required: true
  state:
    description:
      - V(present) - the build O(key) installed and made current. V(previous) - the build recorded before the current
        one made current again (O(key), O(archive) and the build's own options are not used; RV(rollback_to) names it).
    type: str
    choices: [present, previous]
    default: present
  key:
    description:
      - The build key (a directory name), as M(llamarpc.cluster.llama_cpp_build_cache) returns it. Required with
        O(state=present).
    type: str
    default: ""
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
  source:
    description:
      - Where the build came from, as the role knows it (method, source or archive, checksum), kept in the record for a
        rollback to report.
    type: dict
    default: {}
  keep_previous:
    description:
      - How many builds made current before the current one stay on the node (0 or more). Builds beyond them are
        removed when the collection installed them (see the description).
    type: int
    default: 1
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
    source: {method: source, checksum: "{{ llama_cpp_source_checksum }}"}
    keep_previous: 1
  register: installed

- name: Back to the build before the current one (no archive, no build), after a check-mode run on every node
  llamarpc.cluster.llama_cpp_install:
    install_dir: /opt/llamarpc/llama.cpp
    state: previous
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
  description: The marker's path (with O(state=previous), the marker of the build rolled back to).
  returned: success
  type: str
marker_state:
  description: The marker as the run found it - V(installed), V(absent) or V(not a regular file).
  returned: success
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
builds:
  description: The record's build keys after the run (in check mode, after a real run), the current one first.
  returned: when the build is recorded (not on the run that asks for the archive)
  type: list
  elements: str
removed:
  description:
    - The keys of the builds whose directories this run removed (in check mode, would remove) - recorded, beyond
      O(keep_previous), and holding their marker.
  returned: always
  type: list
  elements: str
kept:
  description:
    - The keys of the builds that left the record but whose directories stay, because they are not (or no longer) the
      collection's own (no marker with their key, a link, or files an install did not put there).
  returned: always
  type: list
  elements: str
rollback_to:
  description: With O(state=previous), the key of the build made (in check mode, that would be made) current again.
  returned: state=previous
  type: str
source:
  description: With O(state=previous), the source recorded for the build rolled back to.
  returned: state=previous, success
  type: dict
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
