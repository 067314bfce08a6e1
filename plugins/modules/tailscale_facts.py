#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tailscale_facts
short_description: The host's Tailscale addresses, its peers and whether each peer connection is direct or relayed
version_added: 0.1.0
description:
  - Reads C(tailscale status --json), C(tailscale ip) and C(tailscale debug prefs) and returns them as the fact
    C(tailscale).
  - Each peer's connection is V(direct) (a current UDP path, C(CurAddr)), V(relayed) (through a DERP relay),
    V(peer-relay) (through a Tailscale peer relay) or V(idle) (no recent traffic; its relay is only its home
    region), as C(tailscale status) shows it.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - The C(tailscale) command and a running C(tailscaled) on the host.
options: {}
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.facts]
attributes:
  check_mode:
    details: The module only reads.
seealso:
  - module: llamarpc.cluster.tailscale_up
"""

EXAMPLES = r"""
- name: Tailscale state of the host
  llamarpc.cluster.tailscale_facts:

- name: Warn about relayed peers
  ansible.builtin.debug:
    msg: "Relayed: {{ ansible_facts.tailscale.relayed_peers }}"
  when: ansible_facts.tailscale.relayed_peers | length > 0
"""

RETURN = r"""
ansible_facts:
  description: Facts.
  returned: always
  type: dict
  contains:
    tailscale:
      description: The node and its peers.
      returned: always
      type: dict
      contains:
        backend_state:
          description: C(BackendState) (V(Running), V(NeedsLogin), V(Stopped), ...).
          type: str
          sample: Running
        ipv4:
          description: The node's Tailscale IPv4 address (V(null) before it joined).
          type: str
          sample: 100.101.102.103
        ipv6:
          description: The node's Tailscale IPv6 address.
          type: str
          sample: fd7a:115c:a1e0::1
        hostname:
          description: The node's host name in the tailnet.
          type: str
        dns_name:
          description: The node's MagicDNS name (without the final dot).
          type: str
        tags:
          description: The node's ACL tags.
          type: list
          elements: str
        version:
          description: Version of tailscaled.
          type: str
        tailnet:
          description: Name of the tailnet.
          type: str
        health:
          description: Health warnings of tailscaled.
          type: list
          elements: str
        peers:
          description: Peers sorted by DNS name, each with hostname, dns_name, os, ipv4, ipv6, online, active,
            connection (direct, relayed, peer-relay, idle), cur_addr, relay, tags, rx_bytes, tx_bytes.
          type: list
          elements: dict
        relayed_peers:
          description: Names of the peers whose traffic goes through a DERP relay now.
          type: list
          elements: str
        direct_peers:
          description: Names of the peers reached directly now.
          type: list
          elements: str
        prefs:
          description: The managed settings (control_url, hostname, tags, accept_dns, want_running, logged_out).
          type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh._tailscale import read_node


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    tailscale = module.get_bin_path("tailscale", required=True)
    status, prefs = read_node(module, tailscale)
    status["prefs"] = prefs
    module.exit_json(changed=False, ansible_facts={"tailscale": status})


if __name__ == "__main__":
    main()
