#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_packages
short_description: Install Debian packages, with a check mode that works on a host without python3-apt
version_added: 0.1.0
description:
  - In a real run, exactly M(ansible.builtin.apt) with O(name), O(update_cache), O(cache_valid_time) and
    O(install_recommends) and C(state=present) (which installs python3-apt itself when the host lacks it).
  - In check mode, M(ansible.builtin.apt) fails on a host without python3-apt (a fresh Debian host) with
    C(python3-apt must be installed to use check mode). This module answers from C(dpkg-query) instead (which of
    the names are not installed) and C(apt-get install --simulate) (what they would pull in), on every host alike,
    with or without python3-apt. Nothing is written, not even apt's binary caches.
  - In check mode the package lists are the ones the host has now (a real run refreshes them first with
    O(update_cache)); when the simulation cannot resolve a name against them, the task still reports the names that
    are not installed, and says why the dependencies are not known.
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
    details: Reports the packages that are not installed and what apt would install with them; changes nothing.
  diff_mode:
    details: In check mode, the packages that would be installed (as M(ansible.builtin.apt) shows in a real run).
options:
  name:
    description: Package names (no versions, no wildcards).
    type: list
    elements: str
    required: true
notes:
  - Debian and its derivatives only (C(dpkg-query), C(apt-get)).
seealso:
  - module: ansible.builtin.apt
"""

EXAMPLES = r"""
- name: Packages the worker uses (check mode works on a bare host)
  llamarpc.cluster.apt_packages:
    name: [nftables, iproute2]
    update_cache: true
    cache_valid_time: 3600
    install_recommends: false
"""

RETURN = r"""
installed:
  description: The names asked for that are installed now.
  returned: check mode
  type: list
  elements: str
missing:
  description: The names asked for that are not installed (a real run installs them).
  returned: check mode
  type: list
  elements: str
  sample: [nftables]
would_install:
  description:
    - What apt-get's simulation would unpack (the missing names and their dependencies), in its order; empty when
      nothing is missing or the simulation failed.
  returned: check mode
  type: list
  elements: dict
  sample: [{name: libnftables1, version: 1.0.6-2+deb12u2, upgrade: false}, {name: nftables, version: 1.0.6-2+deb12u2,
           upgrade: false}]
simulation_error:
  description: The last line of apt-get's error when the simulation failed (for example, lists not fetched yet).
  returned: check mode, when the simulation failed
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.packages import _apt

ARGUMENT_SPEC = {"name": {"type": "list", "elements": "str", "required": True}, **_apt.OPTIONS}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not module.check_mode:
        module.fail_json(msg="apt_packages installs through its action plugin (ansible.builtin.apt); run as a task")
    result = _apt.check(module, module.params["name"], module.params["install_recommends"])
    if module._diff and result["missing"]:
        result["diff"] = {"prepared": result["msg"] + "\n"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
