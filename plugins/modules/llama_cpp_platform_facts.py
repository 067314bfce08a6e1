#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_cpp_platform_facts
short_description: Gather what decides whether llama.cpp binaries built on one host run on another
version_added: 0.2.0
description:
  - Sets the fact C(llamarpc_platform) - architecture, OS family, distribution and release, glibc version and a
    digest of the CPU's flags - from C(uname), C(/etc/os-release), C(getconf GNU_LIBC_VERSION) and
    C(/proc/cpuinfo). Reads only; needs no root.
  - M(llamarpc.cluster.llama_cpp_build_check) compares a build host's with the nodes'; the role
    C(llamarpc.cluster.llama_cpp) keys its controller cache with the build host's.
author:
  - llamarpc.cluster contributors (@llamarpc)
options: {}
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.facts]
seealso:
  - module: llamarpc.cluster.llama_cpp_build_check
"""

EXAMPLES = r"""
- name: Gather the platform of every node
  llamarpc.cluster.llama_cpp_platform_facts:

- name: Show it
  ansible.builtin.debug:
    msg: "{{ llamarpc_platform.pretty_name }}, glibc {{ llamarpc_platform.libc_version }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts set.
  returned: always
  type: dict
  contains:
    llamarpc_platform:
      description: The host's platform.
      type: dict
      contains:
        architecture:
          description: Machine architecture (C(uname -m)).
          type: str
          sample: x86_64
        os_family:
          description: OS family, named as Ansible's C(ansible_os_family) (Debian covers Ubuntu).
          type: str
          sample: Debian
        distribution:
          description: C(ID) of os-release.
          type: str
          sample: debian
        distribution_version:
          description: C(VERSION_ID) of os-release.
          type: str
          sample: "12"
        pretty_name:
          description: C(PRETTY_NAME) of os-release.
          type: str
          sample: Debian GNU/Linux 12 (bookworm)
        libc:
          description: C(glibc), or the C library found otherwise.
          type: str
          sample: glibc
        libc_version:
          description: Its version.
          type: str
          sample: "2.36"
        cpu_flags_sha256:
          description: sha256 of the CPU's sorted flags (a native build is tuned to them); empty when unknown.
          type: str
          sample: 5f0c0e6f1d7c2a4e8f3b0a6c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_platform import platform_from


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def libc(module):
    """(name, version) of the system's C library: getconf first (the system's, whatever Python links), then Python."""
    getconf = module.get_bin_path("getconf")
    if getconf:
        rc, out, _err = module.run_command([getconf, "GNU_LIBC_VERSION"], environ_update={"LC_ALL": "C"})
        parts = out.split()
        if rc == 0 and len(parts) == 2:
            return ("glibc" if parts[0] == "glibc" else parts[0]), parts[1]
    name, version = platform.libc_ver()
    return name or "unknown", version


def cpu_flags(cpuinfo):
    for line in cpuinfo.splitlines():
        key, _sep, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return value.split()
    return []


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    release = read("/etc/os-release") or read("/usr/lib/os-release")
    name, version = libc(module)
    facts = platform_from(os.uname().machine, release, name, version, cpu_flags(read("/proc/cpuinfo")))
    module.exit_json(changed=False, ansible_facts={"llamarpc_platform": facts})


if __name__ == "__main__":
    main()
