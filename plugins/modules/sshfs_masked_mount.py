#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sshfs_masked_mount
short_description: Keep an SSHFS mount up under a systemd unit, with sshfs's signals ignored, and report its health
version_added: 0.1.0
description:
  - Mounts O(src) (C(host:path)) at O(path) with C(sshfs -f) in a systemd service generated for the mount
    (C(llamarpc-sshfs-<systemd-escape --path PATH>.service), C(Restart=always), enabled). Modelled on
    C(ansible.posix.mount).
  - By default sshfs starts with C(SIGHUP), C(SIGTERM), C(SIGINT) and C(SIGQUIT) ignored, which avoids the libfuse3
    3.17.2 signal-handler deadlock (O(mask_signals)).
  - A mount is healthy when its sshfs is neither stopped nor stuck in C(D) state and a C(statvfs) in a child process
    returns within O(health_timeout); O(state=mounted) lazily unmounts a hung, stale, unsupervised or foreign mount
    and mounts again (changed).
  - Reports whether C(mmap) works on the mount (it does not with O(direct_io)) and, optionally, the read throughput
    (O(read_probe)).
notes:
  - The SSH key should be one that the serving host accepts for read-only SFTP only, confined to the exported
    directory; the role C(llamarpc.cluster.sshfs_shard_export) sets that up on both sides.
  - Why the signals are masked, how the unit stops sshfs, and why health uses C(statvfs) and never touches the mount
    point in the module's own process - C(docs/modules.md).
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - root on the host (a system unit mounts as root); systemd; sshfs 3 and fusermount3 (Debian C(sshfs), C(fuse3))
options:
  path:
    description: Absolute mount point. Created by the unit when missing.
    type: path
    required: true
  src:
    description:
      - Remote directory, C([user@]host:path). A relative or empty path is relative to the login directory
        (with an SFTP chroot, C(host:/) is the exported directory). Required unless O(state=unmounted)
        or O(state=absent).
    type: str
  state:
    description:
      - V(mounted) writes and enables the unit, starts it and heals an unhealthy mount.
      - V(unmounted) stops the unit (unmounts); the unit stays enabled, so it mounts again at boot, like
        C(ansible.posix.mount).
      - V(remounted) does what V(mounted) does, then always restarts the unit (a fresh connection).
      - V(absent) stops and disables the unit and removes its file.
    type: str
    choices: [mounted, unmounted, remounted, absent]
    default: mounted
  user:
    description: Remote user; when O(src) names a user too, both must be the same.
    type: str
  port:
    description: SSH port of the serving host (default of ssh when unset).
    type: int
  identity_file:
    description: Private key file on the host, for example one made by the C(llamarpc.cluster.sshfs_shard_export) role.
    type: path
  known_hosts_file:
    description:
      - Known hosts file holding the serving host's key; with it host keys are checked strictly
        (C(StrictHostKeyChecking=yes)). Without it ssh's defaults apply (root's C(~/.ssh/known_hosts)).
    type: path
  read_only:
    description: Mount read-only (C(-o ro)).
    type: bool
    default: true
  reconnect:
    description: Let sshfs reconnect after the SSH connection drops (C(-o reconnect)).
    type: bool
    default: true
  server_alive_interval:
    description: C(ServerAliveInterval) in seconds (0 leaves both keep-alive options out).
    type: int
    default: 15
  server_alive_count_max:
    description: C(ServerAliveCountMax).
    type: int
    default: 3
  allow_other:
    description:
      - Let users other than root use the mount (C(-o allow_other)), for example a llama-server running as its
        own user.
    type: bool
    default: false
  direct_io:
    description:
      - Bypass the page cache (C(-o direct_io)). The seed used it; it makes C(mmap) fail on the mount (llama.cpp
        then needs C(--load-mode none)) and reads slower. Off by default.
    type: bool
    default: false
  auto_cache:
    description:
      - Keep file contents in the page cache across opens as long as their modification time and size are
        unchanged (C(-o auto_cache)). Without it sshfs drops the cache on every open, so each reload of a model
        reads every shard on the mount over the network again. A file changed on the remote host is read anew.
      - Ignored with O(direct_io), which has no page cache.
    type: bool
    default: true
  extra_opts:
    description:
      - More sshfs C(-o) options, one per item (for example V(Ciphers=aes128-gcm@openssh.com),
        V(max_read=131072)).
    type: list
    elements: str
    default: []
  mask_signals:
    description: Start sshfs with O(masked_signals) ignored (the libfuse3 3.17.2 deadlock workaround).
    type: bool
    default: true
  masked_signals:
    description: Signals ignored when O(mask_signals) is true (names with or without C(SIG)).
    type: list
    elements: str
    default: [HUP, TERM, INT, QUIT]
  health_timeout:
    description: Seconds a statvfs of the mount point (in a child process) may take before the mount counts as hung.
    type: float
    default: 5
  mount_timeout:
    description: Seconds to wait for the mount to appear and answer after (re)starting the unit.
    type: int
    default: 60
  read_probe:
    description:
      - File, relative to O(path), to read O(read_probe_mb) MB of (in a child process) to measure throughput.
        Also the file C(mmap) is tried on (else the first regular file at the top of the mount).
    type: str
  read_probe_mb:
    description: Megabytes (10^6 bytes) the read probe reads at most.
    type: int
    default: 16
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  diff_mode:
    details: The diff is the unit file.
seealso:
  - name: ansible.posix.mount
    description: The mount module this one is modelled on.
    link: https://docs.ansible.com/ansible/latest/collections/ansible/posix/mount_module.html
  - name: sshfs(1)
    description: The sshfs manual page.
    link: https://manpages.debian.org/bookworm/sshfs/sshfs.1.en.html
  - name: The seed's libfuse3 signal-handler deadlock and its workaround
    description: platform notes of the project (C(trap "" HUP TERM INT QUIT; exec sshfs -f ...)).
    link: https://github.com/libfuse/libfuse/blob/master/lib/fuse_signals.c
"""

EXAMPLES = r"""
- name: Mount node2's shard directory read-only, with the key the sshfs_shard_export role made
  llamarpc.cluster.sshfs_masked_mount:
    src: llamarpc-shards@node2:/
    path: /data/models/remote-node2
    identity_file: /etc/llamarpc/sshfs/id_ed25519
    known_hosts_file: /etc/llamarpc/sshfs/known_hosts
    allow_other: true
    read_probe: model-00004-of-00005.gguf
  register: shard_mount

- name: llama.cpp must not mmap the shards when mmap does not work there
  ansible.builtin.set_fact:
    llama_load_mode: "{{ 'auto' if shard_mount.mmap_ok else 'none' }}"

- name: Unmount (the unit stays enabled and mounts again at boot)
  llamarpc.cluster.sshfs_masked_mount:
    path: /data/models/remote-node2
    state: unmounted

- name: Remove the mount and its unit
  llamarpc.cluster.sshfs_masked_mount:
    path: /data/models/remote-node2
    state: absent
"""

RETURN = r"""
unit:
  description: Name of the systemd service that supervises the mount.
  returned: always
  type: str
  sample: llamarpc-sshfs-data-models-remote\x2dnode2.service
health:
  description:
    - Health of the mount when the module ends (before acting in check mode) - V(ok), V(not_mounted),
      V(foreign), V(hung), V(stale), V(stopped), V(blocked) or V(unsupervised).
  returned: always
  type: str
  sample: ok
health_detail:
  description: Why, in words.
  returned: always
  type: str
  sample: mounted and answering
health_before:
  description: Health found before acting (what made a heal necessary).
  returned: always
  type: str
  sample: hung
pid:
  description: PID of the sshfs process (the unit's main process), 0 when none.
  returned: always
  type: int
  sample: 4242
signals_ignored:
  description: Signals the running sshfs process ignores, from C(SigIgn) in C(/proc/PID/status).
  returned: when sshfs runs
  type: list
  elements: str
  sample: [HUP, INT, QUIT, TERM]
mmap_ok:
  description: Whether a read-only C(mmap) of a file on the mount works (null when no file was found to try).
  returned: when the mount is healthy
  type: bool
  sample: true
throughput_mbps:
  description: Read throughput of the probe in MB/s (10^6 bytes per second).
  returned: when O(read_probe) is set and the mount is healthy
  type: float
  sample: 11.6
probe_bytes:
  description: Bytes the read probe read.
  returned: when O(read_probe) is set and the mount is healthy
  type: int
  sample: 16000000
options:
  description: The sshfs C(-o) options used.
  returned: when O(src) is given
  type: list
  elements: str
  sample: [ro, reconnect, ServerAliveInterval=15, ServerAliveCountMax=3, BatchMode=yes]
source:
  description: The source as mounted (C(user@host:path)).
  returned: when O(src) is given
  type: str
  sample: llamarpc-shards@10.213.5.12:/
actions:
  description: What was done (or would be done in check mode).
  returned: always
  type: list
  elements: str
  sample: [write unit, enable unit, lazy unmount (hung), restart unit]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._sshfs_mount import run

ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "src": {"type": "str"},
    "state": {"type": "str", "default": "mounted", "choices": ["mounted", "unmounted", "remounted", "absent"]},
    "user": {"type": "str"},
    "port": {"type": "int"},
    "identity_file": {"type": "path"},
    "known_hosts_file": {"type": "path"},
    "read_only": {"type": "bool", "default": True},
    "reconnect": {"type": "bool", "default": True},
    "server_alive_interval": {"type": "int", "default": 15},
    "server_alive_count_max": {"type": "int", "default": 3},
    "allow_other": {"type": "bool", "default": False},
    "direct_io": {"type": "bool", "default": False},
    "auto_cache": {"type": "bool", "default": True},
    "extra_opts": {"type": "list", "elements": "str", "default": []},
    "mask_signals": {"type": "bool", "default": True},
    "masked_signals": {"type": "list", "elements": "str", "default": ["HUP", "TERM", "INT", "QUIT"]},
    "health_timeout": {"type": "float", "default": 5},
    "mount_timeout": {"type": "int", "default": 60},
    "read_probe": {"type": "str"},
    "read_probe_mb": {"type": "int", "default": 16},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "mounted", ["src"]), ("state", "remounted", ["src"])],
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
