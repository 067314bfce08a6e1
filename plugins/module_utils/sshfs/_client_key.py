# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``sshfs_client_key`` module: an SSH key pair made on the client (the private key never leaves it), in a
root-only directory, and its public key."""

from __future__ import annotations

import os
import stat

#: The owner of the key directory (root; tests run as themselves).
OWNER = 0

ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "comment": {"type": "str", "default": ""},
}


def public_key_line(text):
    """``TYPE BASE64`` of a public key file (the comment left out), or None when it holds no key."""
    fields = text.split()
    if len(fields) < 2 or not fields[0].startswith(("ssh-", "ecdsa-", "sk-")):
        return None
    return f"{fields[0]} {fields[1]}"


def directory_changes(st):
    """What makes an existing key directory root's alone (mode 0700, owner and group root): a list of words."""
    changes = []
    if stat.S_IMODE(st.st_mode) != 0o700:
        changes.append("mode")
    if st.st_uid != OWNER or st.st_gid != OWNER:
        changes.append("owner")
    return changes


def run(module):
    path = module.params["path"]
    directory = os.path.dirname(path) or "."
    result = {"changed": False, "path": path, "public_key": None, "actions": []}

    if not os.path.isdir(directory):
        result["actions"].append("make the key directory")
    else:
        changes = directory_changes(os.stat(directory))
        if changes:
            result["actions"].append(f"make the key directory root's alone ({', '.join(changes)})")
    if not os.path.exists(path):
        result["actions"].append("generate the key")
    elif not os.path.exists(path + ".pub"):
        result["actions"].append("write the public key")
    result["changed"] = bool(result["actions"])
    if module.check_mode:
        if os.path.exists(path + ".pub"):
            result["public_key"] = _read_public(module, path, result)
        module.exit_json(**result)

    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700)
    changes = directory_changes(os.stat(directory))
    if "owner" in changes:
        os.chown(directory, OWNER, OWNER)
    if "mode" in changes or "owner" in changes:
        os.chmod(directory, 0o700)
    keygen = module.get_bin_path("ssh-keygen", required=True)
    if not os.path.exists(path):
        argv = [keygen, "-q", "-t", "ed25519", "-N", "", "-C", module.params["comment"], "-f", path]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"ssh-keygen failed (rc={rc}): {(err or out).strip()}", **result)
    elif not os.path.exists(path + ".pub"):
        rc, out, err = module.run_command([keygen, "-y", "-f", path])
        if rc != 0 or public_key_line(out) is None:
            module.fail_json(msg=f"{path}: ssh-keygen -y could not read the key (rc={rc}): {err.strip()}", **result)
        with open(path + ".pub", "w", encoding="ascii") as handle:
            handle.write(f"{public_key_line(out)} {module.params['comment']}".rstrip() + "\n")
        os.chmod(path + ".pub", 0o644)
    result["public_key"] = _read_public(module, path, result)
    module.exit_json(**result)


def _read_public(module, path, result):
    with open(path + ".pub", encoding="ascii", errors="replace") as handle:
        line = public_key_line(handle.read())
    if line is None:
        module.fail_json(msg=f"{path}.pub holds no SSH public key; move the key pair away to get a new one", **result)
    return line
