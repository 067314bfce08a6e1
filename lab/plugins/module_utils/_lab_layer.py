# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A lab host's own overlay layer (part of ``lab_host``'s mechanism, ``_lab_host``): host key, machine id,
hostname, hosts, apt source, lingering admin, the unit that shows the host its own network devices, and the admin's
authorized key; written only where the content differs, with the image's owners and modes for new directories."""

from __future__ import annotations

import os
import uuid

SYSFS_NET_UNIT = "llamarpc-lab-sysfs-net.service"
SYSFS_NET_UNIT_TEXT = """[Unit]
Description=This lab host's own network devices in /sys/class/net (systemd-nspawn shows the controller's)
DefaultDependencies=no
Before=sysinit.target network-pre.target
Wants=network-pre.target

# One process, and tried again: at a loaded boot systemd has failed to attach a second ExecStart's process to the
# unit's cgroup (status=219/CGROUP) after the first one exited. Each step can run twice.
[Service]
Type=oneshot
RemainAfterExit=yes
Restart=on-failure
RestartSec=1
ExecStart=/bin/sh -c 'mkdir -p /run/llamarpc-lab/sysfs \
  && { mountpoint -q /run/llamarpc-lab/sysfs \
       || mount -t sysfs -o ro,nosuid,nodev,noexec sysfs /run/llamarpc-lab/sysfs; } \
  && mount --bind /run/llamarpc-lab/sysfs/class/net /sys/class/net \
  && mount --bind /run/llamarpc-lab/sysfs/devices/virtual/net /sys/devices/virtual/net'
"""


class Layer:
    """The upper directory of ``host``'s overlay; actions are recorded in (and run through) ``host``."""

    def __init__(self, host):
        self.module = host.module
        self.params = host.params
        self.actions = host.actions
        self.act = host.act
        self.dir = host.dir
        self.upper = host.upper

    def ensure(self):
        """Per-host overlay layer: host keys, machine id, hostname, admin's authorized key."""
        p = self.params
        if not os.path.isdir(self.upper):
            self.actions.append("create overlay layer")
        if not self.module.check_mode:
            for sub in ("upper", "work", "rootfs"):
                os.makedirs(os.path.join(self.dir, sub), mode=0o755, exist_ok=True)
        if self.module.check_mode and not os.path.isdir(self.upper):
            return
        etc = os.path.join(self.upper, "etc")
        key = os.path.join(etc, "ssh", "ssh_host_ed25519_key")
        if not os.path.exists(key):
            self.makedirs(os.path.dirname(key))
            keygen = self.module.get_bin_path("ssh-keygen", required=True)
            self.act("generate host key", [keygen, "-q", "-t", "ed25519", "-N", "", "-C", p["name"], "-f", key])
        self.write(
            os.path.join(etc, "ssh", "sshd_config.d", "05-hostkey.conf"), "HostKey /etc/ssh/ssh_host_ed25519_key\n"
        )
        self.write(os.path.join(etc, "hostname"), p["name"] + "\n")
        if p["apt_sources"]:
            self.write(os.path.join(etc, "apt", "sources.list.d", "llamarpc-lab.sources"), p["apt_sources"])
        self.write(
            os.path.join(etc, "hosts"),
            f"127.0.0.1 localhost\n127.0.1.1 {p['name']}\n::1 localhost ip6-localhost ip6-loopback\n",
        )
        machine_id = os.path.join(etc, "machine-id")
        if not os.path.exists(machine_id) or os.path.getsize(machine_id) == 0:
            self.write(machine_id, uuid.uuid4().hex + "\n", force=True)
        uid, gid, home = self.admin_account()
        # Linger keeps the admin's user manager running between logins. Without it, a login that arrives while
        # user@UID is stopping (10 s after the previous session ended) waits for the stop and start, and
        # Ansible's become times out (seen on lab hosts after a controller-side pause between tasks).
        self.write(os.path.join(self.upper, "var/lib/systemd/linger", self.params["admin_user"]), "")
        # systemd-nspawn with --network-namespace-path shows the controller's /sys/class/net in the host, so
        # Ansible's facts miss the host's own interfaces (a WireGuard interface, for one). A fresh sysfs mounted
        # inside the host's network namespace lists its own; it is bound over the two net directories at boot.
        self.write(os.path.join(etc, "systemd", "system", SYSFS_NET_UNIT), SYSFS_NET_UNIT_TEXT)
        self.write(
            os.path.join(etc, "systemd", "system", "sysinit.target.d", "llamarpc-lab.conf"),
            f"[Unit]\nWants={SYSFS_NET_UNIT}\n",
        )
        self.authorize_admin(uid, gid, home)

    def authorize_admin(self, uid, gid, home):
        """The admin's authorized key in the overlay, owned by the admin as the image's account says."""
        ssh_dir = os.path.join(self.upper, home.lstrip("/"), ".ssh")
        if (
            self.write(
                os.path.join(ssh_dir, "authorized_keys"), self.params["authorized_key"].strip() + "\n", mode=0o600
            )
            and not self.module.check_mode
        ):
            os.chmod(ssh_dir, 0o700)
            for path in (ssh_dir, os.path.join(ssh_dir, "authorized_keys")):
                os.chown(path, uid, gid)

    def admin_account(self):
        with open(os.path.join(self.params["image"], "etc", "passwd"), encoding="utf-8") as handle:
            for line in handle:
                fields = line.rstrip("\n").split(":")
                if fields[0] == self.params["admin_user"]:
                    return int(fields[2]), int(fields[3]), fields[5]
        self.module.fail_json(msg=f"user {self.params['admin_user']} does not exist in image {self.params['image']}")

    def write(self, path, content, mode=0o644, force=False):
        """Write a file of the overlay when its content differs; True when it was (or would be) written."""
        try:
            with open(path, encoding="utf-8") as handle:
                if handle.read() == content and not force:
                    return False
        except OSError:
            pass
        self.actions.append(f"write {os.path.relpath(path, self.upper)}")
        if not self.module.check_mode:
            self.makedirs(os.path.dirname(path))
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(content)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        return True

    def makedirs(self, path):
        """Create missing directories of the upper layer with the owner and mode of the image's own,
        so that the overlay does not hide them (a root-owned /home/lab would lock the admin out)."""
        if os.path.isdir(path) or os.path.normpath(path) == os.path.normpath(self.upper):
            return
        self.makedirs(os.path.dirname(path))
        os.mkdir(path)
        lower = os.path.join(self.params["image"], os.path.relpath(path, self.upper))
        if os.path.isdir(lower):
            st = os.stat(lower)
            os.chown(path, st.st_uid, st.st_gid)
            os.chmod(path, st.st_mode & 0o7777)
