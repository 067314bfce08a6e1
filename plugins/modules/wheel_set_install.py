#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheel_set_install
short_description: Install a wheel set into a new virtualenv and switch a link to it only when the install succeeded
version_added: 0.1.0
author:
  - llamarpc.cluster contributors (@llamarpc)
description:
  - Installs the archive M(llamarpc.cluster.wheel_set) wrote (copied to the host) without any index, into a new
    virtualenv C(O(prefix)/releases/O(release)), with C(pip --no-index --require-hashes -r requirements.lock) - the
    host's own pip resolves again with its own markers and refuses any distribution the lock lacks.
  - On success C(O(prefix)/venv) becomes a symlink to it in one rename, and releases other than the new one and the one
    it replaces are removed. A plain virtualenv directory at C(O(prefix)/venv) (an older layout) is kept as
    C(releases/previous).
  - On failure the new virtualenv is removed and C(O(prefix)/venv) is left as it was, so a service that runs from it
    keeps running the previous install.
  - Nothing is done when C(O(prefix)/venv) already points at the release.
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Predicts whether the release would be installed; changes nothing.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
options:
  archive:
    description: The set's C(wheels.tar) on the host (its C(wheels/) holds the wheels and C(requirements.lock)).
    type: path
    required: true
  prefix:
    description: Install directory; C(venv) and C(releases/) are made in it.
    type: path
    required: true
  release:
    description: Name of the release directory, for example the wheel set's key.
    type: str
    required: true
  python:
    description: The host's Python that creates the virtualenv (with its C(venv) module).
    type: path
    default: /usr/bin/python3
requirements:
  - The C(venv) module of O(python) (Debian's C(python3-venv)).
seealso:
  - module: llamarpc.cluster.wheel_set
"""

EXAMPLES = r"""
- name: Install Open WebUI's wheel set, switching /opt/llamarpc/open-webui/venv only when it succeeded
  llamarpc.cluster.wheel_set_install:
    archive: /opt/llamarpc/open-webui/wheels.tar
    prefix: /opt/llamarpc/open-webui
    release: 0123456789abcdef
"""

RETURN = r"""
venv:
  description: The link services run from.
  returned: always
  type: str
  sample: /opt/llamarpc/open-webui/venv
release:
  description: The release directory of this set.
  returned: always
  type: str
  sample: /opt/llamarpc/open-webui/releases/0123456789abcdef
previous:
  description: Where the link pointed before (null without a link).
  returned: always
  type: str
removed:
  description: Older release directories removed.
  returned: when changed
  type: list
  elements: str
msg:
  description: A one-line summary.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.packages._wheel_set import INSTALL_SPEC, install


def main():
    module = AnsibleModule(argument_spec=INSTALL_SPEC, supports_check_mode=True)
    module.exit_json(**install(module))


if __name__ == "__main__":
    main()
