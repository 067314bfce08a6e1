#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheel_set
short_description: Resolve Python requirements for another host's Python and download the pinned wheels once
version_added: 0.1.0
author:
  - llamarpc.cluster contributors (@llamarpc)
description:
  - Runs where the package index is reachable (the controller), for a host that has no route to it.
  - Resolves O(requirements) with C(uv pip compile) for the host's environment - its full Python version
    (O(python_version), so C(python_full_version) markers are judged as the host judges them), its machine and C library
    (O(machine), O(glibc)) - and writes the pinned result, every file with its hash, to C(requirements.lock) in O(dest).
  - Then pip downloads exactly that list (C(--no-deps --require-hashes)) and archives it with the lock as
    C(wheels.tar) in O(dest), for M(llamarpc.cluster.wheel_set_install) on the host.
  - A set already in O(dest) is reused as it is; a lock without its archive (an interrupted run) is downloaded again,
    not resolved again, so a re-run installs the same list.
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Reports whether the set would be resolved and downloaded; runs nothing.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
options:
  requirements:
    description: Requirements of the set (pip's syntax), pinned where the index matters (C(torch==2.13.0+cpu)).
    type: list
    elements: str
    required: true
  dest:
    description: Directory of this set (created); one directory per distinct set.
    type: path
    required: true
  python_version:
    description: The host's full Python version, V(X.Y.Z) (C(ansible_facts.python.version)).
    type: str
    required: true
  machine:
    description: The host's machine (C(ansible_facts.architecture)).
    type: str
    required: true
    choices: [x86_64, aarch64]
  glibc:
    description: The host's C library version, V(2.36) or C(getconf GNU_LIBC_VERSION)'s V(glibc 2.36).
    type: str
    required: true
  index_url:
    description: Index used instead of the default one (PyPI, or C(UV_DEFAULT_INDEX) for uv). Empty - the default.
    type: str
    default: ""
  no_index:
    description: Use no index at all, only O(find_links).
    type: bool
    default: false
  extra_index_urls:
    description: Indexes searched besides the index; the best match of every index wins, so only pins choose one.
    type: list
    elements: str
    default: []
  find_links:
    description: Directories or pages of wheels searched besides the index.
    type: list
    elements: str
    default: []
  uv:
    description: The uv program (a path, or a name searched on C(PATH)).
    type: path
    default: uv
  python:
    description: Python whose pip downloads the wheels (pip 22 or newer). Default - C(python3) on C(PATH).
    type: path
requirements:
  - uv and pip on the machine the module runs on.
notes:
  - Assumes a CPython host on glibc (the C(cpXY) ABI).
seealso:
  - module: llamarpc.cluster.wheel_set_install
  - name: uv pip compile
    description: The resolver, with C(--python-version) and C(--python-platform).
    link: https://docs.astral.sh/uv/pip/compile/
"""

EXAMPLES = r"""
- name: Resolve and download Open WebUI's wheels for the host, on the controller
  llamarpc.cluster.wheel_set:
    requirements: [open-webui==0.12.4, torch==2.13.0+cpu]
    dest: /var/cache/llamarpc/wheels/open-webui-0123456789abcdef
    python_version: "{{ ansible_facts.python.version_info[:3] | join('.') }}"
    machine: "{{ ansible_facts.architecture }}"
    glibc: "2.36"
    extra_index_urls: [https://download.pytorch.org/whl/cpu]
  delegate_to: localhost
"""

RETURN = r"""
lock:
  description: Path of the pinned list (pins with their hashes).
  returned: always
  type: str
  sample: /var/cache/llamarpc/wheels/open-webui-0123456789abcdef/requirements.lock
archive:
  description: Path of the archive of the wheels and the lock.
  returned: always
  type: str
  sample: /var/cache/llamarpc/wheels/open-webui-0123456789abcdef/wheels.tar
resolved:
  description: Whether the lock exists (false only in check mode before a first run).
  returned: always
  type: bool
packages:
  description: The pins of the lock (empty in check mode before a first run).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Normalized distribution name.
      type: str
      sample: async-timeout
    version:
      description: Pinned version.
      type: str
      sample: 5.0.1
    hashes:
      description: Hashes of the files of that version (C(sha256:...)).
      type: list
      elements: str
uv_platform:
  description: The target uv resolved for.
  returned: always
  type: str
  sample: x86_64-manylinux_2_36
msg:
  description: A one-line summary.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.packages._wheel_set import (
    RESOLVE_RULES,
    RESOLVE_SPEC,
    resolve,
)


def main():
    module = AnsibleModule(argument_spec=RESOLVE_SPEC, supports_check_mode=True, **RESOLVE_RULES)
    module.exit_json(**resolve(module))


if __name__ == "__main__":
    main()
