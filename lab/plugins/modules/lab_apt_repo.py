#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_apt_repo
short_description: Prepare and serve the local apt repository from which bare lab hosts install packages
version_added: 0.2.0
description:
  - Lab hosts boot from a bare image (like a fresh cloud VM) and have no route beyond the lab, so the roles'
    own C(ansible.builtin.apt) tasks install from a package source the controller prepares and serves on
    the lab bridge alone.
  - The controller's apt resolves O(packages) against the image's own dpkg status (so exactly what a bare
    host lacks, without recommended packages), downloads them from O(mirror) (checked against the suite's
    signed Release file), and writes a flat repository of those .deb files with its C(Packages) and
    C(Release) index. It is cached under O(cache_dir) by a key over suite, architecture, names and image; a
    later run with the same key downloads nothing.
  - With O(state=present) the repository is served over HTTP on O(address):O(port) only (a
    C(python3 -m http.server) daemon whose pid file is in O(state_dir)); O(state=absent) stops it.
  - A package a role asks for that is not in O(packages) is simply not there, as on a host whose sources
    lack it; the lab role keeps the list of every package the collection's roles install.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - apt-get, dpkg-deb and start-stop-daemon on a Debian controller, run as root
options:
  state:
    description: C(present) prepares (or reuses) the repository and serves it; C(absent) stops serving.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description: The lab's state directory (pid file of the server, apt's private state for this lab).
    type: path
    required: true
  cache_dir:
    description: Directory holding cached repositories (one per key) and downloaded packages.
      Required when O(state=present).
    type: path
  image:
    description: Root filesystem of the lab image whose dpkg status the packages are resolved against.
      Required when O(state=present).
    type: path
  image_key:
    description: Cache key of that image (see M(llamarpc.lab.lab_image)). Required when O(state=present).
    type: str
  suite:
    description: Debian suite of the image.
    type: str
    default: bookworm
  mirror:
    description:
      - Debian mirror to download from. By default the controller's own apt sources are read for a
        mirror of O(suite), as M(llamarpc.lab.lab_image) does.
    type: str
  keyring:
    description: Keyring that signs O(suite) on O(mirror).
    type: path
    default: /usr/share/keyrings/debian-archive-keyring.gpg
  packages:
    description: Package names the repository must be able to install (their dependencies come along).
    type: list
    elements: str
    default: []
  address:
    description: Controller address on the lab bridge to serve on (a prefix length after it is ignored).
      Required when O(state=present).
    type: str
  port:
    description: TCP port to serve on.
    type: int
    default: 8642
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
seealso:
  - module: llamarpc.lab.lab_image
  - module: llamarpc.lab.lab_host
"""

EXAMPLES = r"""
- name: The lab's package source
  llamarpc.lab.lab_apt_repo:
    state_dir: /var/lib/llamarpc-lab/llamarpc
    cache_dir: /var/cache/llamarpc/lab
    image: "{{ image.rootfs }}"
    image_key: "{{ image.key }}"
    packages: [sshfs, nftables, libgomp1]
    address: 10.213.0.1
  register: repo

- name: Stop serving it
  llamarpc.lab.lab_apt_repo:
    state: absent
    state_dir: /var/lib/llamarpc-lab/llamarpc
"""

RETURN = r"""
url:
  description: Where lab hosts find the repository.
  returned: O(state=present)
  type: str
  sample: http://10.213.0.1:8642/
sources:
  description: The deb822 apt source for lab hosts (C(/etc/apt/sources.list.d/llamarpc-lab.sources)).
  returned: O(state=present)
  type: str
repo_dir:
  description: Directory of the repository on the controller.
  returned: O(state=present)
  type: str
  sample: /var/cache/llamarpc/lab/apt-0123456789abcdef
key:
  description: Cache key of the repository.
  returned: O(state=present)
  type: str
debs:
  description: Number of .deb files in the repository.
  returned: O(state=present)
  type: int
  sample: 121
build_seconds:
  description: Seconds spent resolving and downloading (0 when the cached repository was used).
  returned: O(state=present)
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.lab.plugins.module_utils._apt_repo_run import run_module


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "state_dir": {"type": "path", "required": True},
            "cache_dir": {"type": "path"},
            "image": {"type": "path"},
            "image_key": {"type": "str", "no_log": False},
            "suite": {"type": "str", "default": "bookworm"},
            "mirror": {"type": "str"},
            "keyring": {"type": "path", "default": "/usr/share/keyrings/debian-archive-keyring.gpg"},
            "packages": {"type": "list", "elements": "str", "default": []},
            "address": {"type": "str"},
            "port": {"type": "int", "default": 8642},
        },
        required_if=[("state", "present", ("cache_dir", "image", "image_key", "address"))],
        supports_check_mode=True,
    )
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
