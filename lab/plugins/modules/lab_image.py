#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_image
short_description: Build and cache the Debian root filesystem that local lab hosts boot from
version_added: 0.1.0
description:
  - Builds a Debian root filesystem with C(debootstrap), prepares it for booting under C(systemd-nspawn)
    (an administrator with password-less sudo, no SSH host keys, an empty machine id) and keeps it in a
    cache directory keyed by everything that changes its content (suite, variant, packages, architecture,
    administrator, recipe version). A later run with the same key changes nothing.
  - Lab hosts have no route to any package registry, so every package a role needs on a lab host is
    installed here, on the controller, once.
  - The image is built in a temporary directory and renamed into place, so an interrupted build never
    leaves a half image that looks complete.
  - Builds of one key take turns, under a lock file beside the image. Labs created at the same time build the
    image once, and the later ones use it.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - debootstrap and chroot on the controller, run as root
options:
  cache_dir:
    description: Directory holding cached images, one sub-directory per key.
    type: path
    required: true
  suite:
    description: Debian suite to bootstrap.
    type: str
    default: bookworm
  variant:
    description: C(debootstrap) variant.
    type: str
    default: minbase
  packages:
    description: Packages installed into the image in addition to the variant's.
    type: list
    elements: str
    default: []
  mirror:
    description:
      - Debian mirror to bootstrap from. By default the controller's own apt sources
        (C(/etc/apt/sources.list) and C(/etc/apt/sources.list.d/*.sources)) are read for a mirror
        of O(suite).
    type: str
  admin_user:
    description: Administrator created in the image, member of C(sudo) with password-less sudo.
    type: str
    default: lab
  log_file:
    description: Where the build output goes (useful to watch a long build).
    type: path
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
seealso:
  - module: llamarpc.lab.lab_host
"""

EXAMPLES = r"""
- name: Build (once) the image lab hosts boot from
  llamarpc.lab.lab_image:
    cache_dir: /var/cache/llamarpc/lab
    packages: [systemd, systemd-sysv, dbus, openssh-server, python3, sudo, sshfs, fuse3, iproute2]
  register: image
"""

RETURN = r"""
rootfs:
  description: Root filesystem of the image.
  returned: success
  type: str
  sample: /var/cache/llamarpc/lab/bookworm-0123456789abcdef/rootfs
key:
  description: Cache key of the image.
  returned: success
  type: str
  sample: 0123456789abcdef
build_seconds:
  description: Seconds the build took (0 when the cached image was used).
  returned: success
  type: float
  sample: 181.4
"""

import glob
import json
import os
import platform
import shutil
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils._cache_lock import exclusive
from ansible_collections.llamarpc.lab.plugins.module_utils._lab import find_mirror, image_key

MARKER = "image.json"


def run(module, argv, log):
    """Run a build step, appending its output to the log; fail with the log's tail."""
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    rc, out, err = module.run_command(argv)
    log.write(out + err)
    log.flush()
    if rc != 0:
        tail = (out + err).strip().splitlines()[-15:]
        module.fail_json(msg=f"image build step failed (rc={rc}): {' '.join(argv)}", stderr_lines=tail)


def prepare(module, root, admin_user, log):
    """Make a bootstrapped tree bootable as a lab host."""
    chroot = module.get_bin_path("chroot", required=True)
    run(module, [chroot, root, "useradd", "--create-home", "--shell", "/bin/bash", "-G", "sudo", admin_user], log)
    sudoers = os.path.join(root, "etc/sudoers.d/90-lab-admin")
    with open(sudoers, "w", encoding="utf-8") as handle:
        handle.write(f"{admin_user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    os.chmod(sudoers, 0o440)
    # Every host gets its own SSH host keys and machine id at first boot (lab_host writes them).
    for key in glob.glob(os.path.join(root, "etc/ssh/ssh_host_*")):
        os.unlink(key)
    with open(os.path.join(root, "etc/machine-id"), "w", encoding="ascii"):
        pass
    dropin = os.path.join(root, "etc/ssh/sshd_config.d/10-lab.conf")
    with open(dropin, "w", encoding="utf-8") as handle:
        handle.write("PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin no\nUseDNS no\n")
    # Lab hosts have no route to a registry: their one apt source is the lab's own repository (lab_host writes
    # it), so the mirror debootstrap used is not a source, and stale package lists would only mislead apt.
    if os.path.exists(os.path.join(root, "etc/apt/sources.list")):
        os.unlink(os.path.join(root, "etc/apt/sources.list"))
    shutil.rmtree(os.path.join(root, "var/lib/apt/lists"), ignore_errors=True)
    os.makedirs(os.path.join(root, "var/lib/apt/lists/partial"), exist_ok=True)
    shutil.rmtree(os.path.join(root, "var/cache/apt/archives"), ignore_errors=True)
    os.makedirs(os.path.join(root, "var/cache/apt/archives/partial"), exist_ok=True)


def built(top, rootfs):
    """Whether the image at ``top`` is complete (its marker is written last)."""
    return os.path.isfile(os.path.join(top, MARKER)) and os.path.isdir(rootfs)


def build(module, p, top, key):
    """Bootstrap and prepare the image in ``top``.tmp, then rename it to ``top``; the seconds it took."""
    debootstrap = module.get_bin_path("debootstrap", required=True)
    mirror = p["mirror"] or find_mirror(p["suite"])
    if not mirror:
        module.fail_json(
            msg=f"no apt source for suite {p['suite']} on the controller: set the mirror option to a Debian mirror"
        )
    tmp = top + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    started = time.monotonic()
    log_path = p["log_file"] or os.path.join(tmp, "build.log")
    with open(log_path, "a", encoding="utf-8") as log:
        argv = [debootstrap, f"--variant={p['variant']}"]
        if p["packages"]:
            argv.append("--include=" + ",".join(sorted(set(p["packages"]))))
        argv += [p["suite"], os.path.join(tmp, "rootfs"), mirror]
        run(module, argv, log)
        prepare(module, os.path.join(tmp, "rootfs"), p["admin_user"], log)
    with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as handle:
        json.dump({"key": key, "suite": p["suite"], "packages": sorted(set(p["packages"]))}, handle)
    shutil.rmtree(top, ignore_errors=True)
    os.rename(tmp, top)
    return round(time.monotonic() - started, 1)


def main():
    module = AnsibleModule(
        argument_spec={
            "cache_dir": {"type": "path", "required": True},
            "suite": {"type": "str", "default": "bookworm"},
            "variant": {"type": "str", "default": "minbase"},
            "packages": {"type": "list", "elements": "str", "default": []},
            "mirror": {"type": "str"},
            "admin_user": {"type": "str", "default": "lab"},
            "log_file": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    key = image_key(p["suite"], p["variant"], p["packages"], platform.machine(), p["admin_user"])
    top = os.path.join(p["cache_dir"], f"{p['suite']}-{key}")
    rootfs = os.path.join(top, "rootfs")
    result = {"rootfs": rootfs, "key": key, "build_seconds": 0.0}
    if built(top, rootfs):
        module.exit_json(changed=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)

    # Another lab building this image: wait, then use what it built.
    with exclusive(p["cache_dir"], f".{p['suite']}-{key}.lock"):
        if built(top, rootfs):
            module.exit_json(changed=False, **result)
        result["build_seconds"] = build(module, p, top, key)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
