#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sshfs_client_key
short_description: Keep an SSH key pair for an SSHFS client on the client and return its public key
version_added: 0.1.0
description:
  - Makes the key's directory root's alone (mode C(0700), owner and group root), generates an ed25519 key pair with
    C(ssh-keygen) at O(path) when there is none (the private key never leaves the host), writes a missing public key
    file from the private key, and returns the public key.
  - An existing key is kept as it is.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - C(ssh-keygen) (openssh-client) on the host; root.
options:
  path:
    description: The private key file; the public key is C(PATH.pub).
    type: path
    required: true
  comment:
    description: The comment of a new key.
    type: str
    default: ""
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Predicts RV(actions); a key that does not exist yet has no public key in check mode (V(null)).
seealso:
  - module: llamarpc.cluster.sshfs_masked_mount
"""

EXAMPLES = r"""
- name: This client's key
  llamarpc.cluster.sshfs_client_key:
    path: /etc/llamarpc/sshfs/id_ed25519
    comment: llamarpc sshfs node1
  register: _key
"""

RETURN = r"""
public_key:
  description: The public key, C(TYPE BASE64) without its comment; V(null) in check mode before the key exists.
  returned: always
  type: str
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm3dE2Lrg4ZzTr1Y9y0V5J1nQHkFf0m3N5V6oRzWlqK
path:
  description: The private key file.
  returned: always
  type: str
  sample: /etc/llamarpc/sshfs/id_ed25519
actions:
  description: What was done (or would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [make the key directory, generate the key]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._client_key import ARGUMENT_SPEC, run


def main():
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
