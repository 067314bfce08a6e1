#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_host
short_description: Boot, stop or remove one local lab host (a systemd-nspawn container in its own network namespace)
version_added: 0.1.0
description:
  - A lab host is a real Debian system booted with C(systemd-nspawn --boot) from an overlay of a cached
    image (see M(llamarpc.lab.lab_image)), in its own network namespace joined to the lab bridge
    (see M(llamarpc.lab.lab_network)) by a veth pair. Inside run systemd, sshd, logind and user managers;
    C(/dev/fuse) and C(/dev/net/tun) are present and the host has C(CAP_NET_ADMIN) for nftables and TUN.
  - Per host it can cap the data directory's size (a loop-mounted ext4 image), the memory (a memory cgroup)
    and the link bandwidth (C(tc tbf) both ways).
  - O(state=running) is idempotent - it creates only what is missing and starts a stopped host again;
    O(state=absent) leaves nothing behind (process, mounts, namespace, interfaces, cgroup, state directory).
  - A host's processes are found by its network namespace and memory cgroup. A container whose C(systemd-nspawn)
    died keeps running without it, and is killed before the host boots again (never two on one root) or is removed.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - root on the controller; systemd-nspawn, iproute2, ssh-keygen; tc for bandwidth caps; mkfs.ext4 for data caps
options:
  name:
    description: Host name (also the container's machine name and hostname).
    type: str
    required: true
  state:
    description: C(running) boots the host (and waits for SSH), C(stopped) shuts it down cleanly,
      C(absent) removes every trace of it.
    type: str
    choices: [running, stopped, absent]
    default: running
  state_dir:
    description: Per-host directory on the controller (overlay layers, data image, console log, pid file).
    type: path
    required: true
  image:
    description: Root filesystem to overlay. Required when O(state=running).
    type: path
  netns:
    description:
      - Network namespace name. Required when O(state=running); for O(state=stopped) and O(state=absent)
        it defaults to the value recorded in the state directory when the host was booted.
    type: str
  veth:
    description:
      - Controller-side veth name (at most 15 characters); the host side is C(eth0).
        Required and recorded like O(netns).
    type: str
  bridge:
    description: Bridge the veth joins. Required when O(state=running).
    type: str
  address:
    description: IPv4 address of the host. Required when O(state=running).
    type: str
  prefixlen:
    description: Prefix length of the lab subnet.
    type: int
    default: 24
  data_size:
    description: Size cap of the data directory in bytes (0 = a plain directory without a cap).
    type: int
    default: 0
  data_path:
    description: Where the data directory appears inside the host.
    type: path
    default: /data
  memory_max:
    description: Memory cap in bytes (0 = none).
    type: int
    default: 0
  bandwidth:
    description: Link bandwidth cap in bit/s, applied in both directions (0 = none).
    type: int
    default: 0
  admin_user:
    description: Administrator of the image whose C(authorized_keys) gets O(authorized_key).
    type: str
    default: lab
  authorized_key:
    description: Public key allowed to log in as O(admin_user). Required when O(state=running).
    type: str
  boot_timeout:
    description: Seconds to wait for SSH to answer after start (returns as soon as it does; fails at once when the
      host's nspawn process is gone).
    type: int
    default: 600
  apt_sources:
    description:
      - The host's only apt source (deb822), written to C(/etc/apt/sources.list.d/llamarpc-lab.sources), is
        the lab's local repository (see M(llamarpc.lab.lab_apt_repo)). Lab hosts reach nothing beyond
        the lab, so the image itself has no apt source.
    type: str
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
seealso:
  - module: llamarpc.lab.lab_plan
  - module: llamarpc.lab.lab_image
  - module: llamarpc.lab.lab_network
"""

EXAMPLES = r"""
- name: Boot a lab host with a 2 GiB data disk
  llamarpc.lab.lab_host:
    name: node1
    state_dir: /var/lib/llamarpc-lab/demo/hosts/node1
    image: /var/cache/llamarpc/lab/bookworm-0123456789abcdef/rootfs
    netns: llrpc-demo-node1
    veth: llv0123456789a
    bridge: llrpc0
    address: 10.213.0.11
    data_size: 2147483648
    authorized_key: "{{ lookup('ansible.builtin.file', '/var/lib/llamarpc-lab/demo/ssh/id_ed25519.pub') }}"

- name: Remove it
  llamarpc.lab.lab_host:
    name: node1
    state: absent
    state_dir: /var/lib/llamarpc-lab/demo/hosts/node1
    netns: llrpc-demo-node1
    veth: llv0123456789a
"""

RETURN = r"""
host_key:
  description: The host's public SSH host key (C(ssh-ed25519 ...)), for a known_hosts file.
  returned: state is running
  type: str
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...
pid:
  description: PID of the host's systemd-nspawn process.
  returned: state is running and not in check mode
  type: int
  sample: 4242
actions:
  description: What was done (or would be done in check mode).
  returned: always
  type: list
  elements: str
  sample: [create netns, mount overlay, start]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.lab.plugins.module_utils._lab_host import run


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["running", "stopped", "absent"], "default": "running"},
            "state_dir": {"type": "path", "required": True},
            "image": {"type": "path"},
            "netns": {"type": "str"},
            "veth": {"type": "str"},
            "bridge": {"type": "str"},
            "address": {"type": "str"},
            "prefixlen": {"type": "int", "default": 24},
            "data_size": {"type": "int", "default": 0},
            "data_path": {"type": "path", "default": "/data"},
            "memory_max": {"type": "int", "default": 0},
            "bandwidth": {"type": "int", "default": 0},
            "admin_user": {"type": "str", "default": "lab"},
            "authorized_key": {"type": "str", "no_log": False},
            "boot_timeout": {"type": "int", "default": 600},
            "apt_sources": {"type": "str"},
        },
        required_if=[("state", "running", ["image", "netns", "veth", "bridge", "address", "authorized_key"])],
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
