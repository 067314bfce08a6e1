#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wireguard_interface
short_description: Keep a wg-quick WireGuard interface running as its configuration says
version_added: 0.1.0
description:
  - Reads wg-quick's unit (C(systemctl)), the interface's addresses and MTU (C(ip -json -details address)) and its
    keys, port and peers (C(wg show INTERFACE dump)), and compares them with O(address), O(mtu), O(port) and
    O(peers).
  - A unit that does not start at boot is enabled; a unit that is not running is started. A running unit whose
    interface is gone (wireguard-go ended) or lost its private key, or whose address or MTU differ, is restarted
    (only C(wg-quick up) sets those). Peers or a port that differ, or O(config_changed), are applied in place with
    O(sync_helper) (C(wg syncconf) keeping the private key), without taking the interface down.
  - Returns the interface as the fact C(wireguard_status); the private key is never read into the result.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - systemd, C(ip) (iproute2) and C(wg) (wireguard-tools) on the host; wg-quick's configuration in place.
options:
  name:
    description: The interface (also the instance of C(wg-quick@.service)).
    type: str
    required: true
  unit:
    description: wg-quick's unit for the interface. Default C(wg-quick@NAME.service).
    type: str
  address:
    description: The interface's IPv4 address with its prefix length, as the configuration's C(Address).
    type: str
    required: true
  mtu:
    description: The configuration's C(MTU).
    type: int
    required: true
  port:
    description: The configuration's C(ListenPort).
    type: int
    required: true
  peers:
    description:
      - The configuration's peers, as the P(llamarpc.cluster.wireguard_peers#filter) filter returns them. Compared by
        C(public_key), C(allowed_ips) and C(keepalive) (endpoints roam, so they are not compared); other keys are
        ignored.
    type: list
    elements: dict
    default: []
  key:
    description: The private key file, passed to O(sync_helper).
    type: path
    required: true
  sync_helper:
    description: Program run as C(SYNC_HELPER NAME KEY) to apply the configuration in place.
    type: path
    required: true
  config_changed:
    description:
      - The configuration file was just rewritten - apply it in place even when what the interface shows matches
        (an endpoint changed). Ignored when the unit is started or restarted (that applies it).
    type: bool
    default: false
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Reads everything and predicts RV(actions); changes nothing. A unit that is not installed yet (a fresh
      host) is predicted to be enabled and started.
  diff_mode:
    details: The unit's state, addresses, MTU, port and peers' public keys, before and as configured.
seealso:
  - module: llamarpc.cluster.wireguard_key
  - name: wg-quick(8)
    description: Set up a WireGuard interface simply.
    link: https://git.zx2c4.com/wireguard-tools/about/src/man/wg-quick.8
"""

EXAMPLES = r"""
- name: The mesh interface runs as configured and starts at boot
  llamarpc.cluster.wireguard_interface:
    name: wg-llamarpc
    address: 10.99.0.11/24
    mtu: 1420
    port: 51820
    peers: "{{ groups['all'] | llamarpc.cluster.wireguard_peers(hostvars, inventory_hostname, 25) }}"
    key: /etc/wireguard/wg-llamarpc.key
    sync_helper: /usr/local/lib/llamarpc/wireguard-sync
    config_changed: "{{ _config is changed }}"
"""

RETURN = r"""
actions:
  description: What was done (or would be, in check mode), in order - V(enable), then V(start), V(restart) or V(sync).
  returned: always
  type: list
  elements: str
  sample: [sync]
reasons:
  description: Why, one sentence each.
  returned: always
  type: list
  elements: str
  sample: ["1 peer missing"]
unit:
  description: wg-quick's unit.
  returned: always
  type: str
  sample: wg-quick@wg-llamarpc.service
ansible_facts:
  description: Facts.
  returned: when the interface is up (after the run; before it in check mode)
  type: dict
  contains:
    wireguard_status:
      description:
        - The interface (C(public_key), C(has_private_key), C(listen_port), C(fwmark)), its peers (C(public_key),
          C(endpoint), C(allowed_ips), C(latest_handshake), C(rx_bytes), C(tx_bytes), C(persistent_keepalive)) and
          C(implementation) (V(kernel), or V(userspace) for wireguard-go, from the link's kind).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh._wireguard_interface import ARGUMENT_SPEC, run


def main():
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
