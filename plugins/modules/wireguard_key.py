#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wireguard_key
short_description: Keep a WireGuard private key on the host and return its public key
version_added: 0.1.0
description:
  - Generates a private key with C(wg genkey) into O(path) (mode C(0600), written atomically) when the file does
    not exist, and returns the public key (C(wg pubkey)). An existing key is kept as it is.
  - The private key never leaves the host - it is neither returned nor logged; only the public key is.
  - An existing file that does not hold a WireGuard key fails the task, naming the file, rather than being
    overwritten.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - C(wg) from wireguard-tools on the host.
options:
  path:
    description: File of the private key. Its directory must exist.
    type: path
    required: true
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Predicts C(changed); a key that does not exist yet has no public key in check mode (V(null)), and then
      neither C(wg) nor the key's directory need exist yet (a fresh host).
seealso:
  - name: wg(8)
    description: The WireGuard configuration utility.
    link: https://git.zx2c4.com/wireguard-tools/about/src/man/wg.8
"""

EXAMPLES = r"""
- name: WireGuard key of this host
  llamarpc.cluster.wireguard_key:
    path: /etc/wireguard/wg-llamarpc.key
  register: _key

- name: Its public key
  ansible.builtin.debug:
    msg: "{{ _key.public_key }}"
"""

RETURN = r"""
public_key:
  description: The public key (base64); V(null) in check mode when the key does not exist yet.
  returned: always
  type: str
  sample: xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=
path:
  description: The key file.
  returned: always
  type: str
  sample: /etc/wireguard/wg-llamarpc.key
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh._wireguard import is_key


def public_key(module, wg, private):
    rc, out, err = module.run_command([wg, "pubkey"], data=private)
    key = out.strip()
    if rc != 0 or not is_key(key):
        module.fail_json(msg=f"wg pubkey failed (rc={rc}): {err.strip() or out.strip()}")
    return key


def main():
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}},
        supports_check_mode=True,
    )
    path = module.params["path"]
    result = {"changed": False, "path": path, "public_key": None}

    if os.path.exists(path):
        wg = module.get_bin_path("wg", required=True)
        with open(path, encoding="ascii", errors="replace") as handle:
            private = handle.read().strip()
        if not is_key(private):
            module.fail_json(
                msg=f"{path} exists but does not hold a WireGuard private key; move it away to get a new key",
                **result,
            )
        result["public_key"] = public_key(module, wg, private)
        module.exit_json(**result)

    directory = os.path.dirname(path) or "."
    result["changed"] = True
    # On a fresh host in check mode neither wg (installed by the run) nor the key's directory (created by the run)
    # need be there yet.
    if module.check_mode:
        module.exit_json(**result)
    if not os.path.isdir(directory):
        module.fail_json(msg=f"directory {directory} of the key file does not exist", **result)

    wg = module.get_bin_path("wg", required=True)
    rc, out, err = module.run_command([wg, "genkey"])
    private = out.strip()
    if rc != 0 or not is_key(private):
        module.fail_json(msg=f"wg genkey failed (rc={rc}): {err.strip()}", **result)
    module.no_log_values.add(private)
    _atomic.write_atomic(path, private + "\n", mode=0o600, move=module.atomic_move, prefix=".wireguard-key-")
    os.chmod(path, 0o600)
    result["public_key"] = public_key(module, wg, private)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
