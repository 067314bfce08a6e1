#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_server_gate
short_description: Answer new clients of llama-server with 503 and Retry-After while a play restarts it
version_added: 0.4.0
description:
  - O(state=open) starts the gate responder O(unit) (it answers every request with 503 and a C(Retry-After) header),
    waits until it listens on O(address) at O(gate_port), then loads the nftables table C(inet) O(table), whose nat
    chains send each new TCP connection to O(address) at O(port) on to O(gate_port) (in prerouting for other hosts, in
    output for local clients; root's own local connections are exempt, so that the play's health checks and smoke
    completion still reach llama-server). The connections already open keep going to llama-server; the module waits
    until none is left, or until llama-server reports no request in progress on looks 0.1 s apart with none in
    between (C(/slots), the connections left are idle keep-alive ones), or O(drain_timeout) seconds - then the caller
    restarts llama-server.
  - When nothing listens on O(address) at O(port) (a first deploy, a stopped llama-server), O(state=open) opens no gate
    and changes nothing - nobody is served, nobody can be dropped.
  - O(state=closed) deletes the table, then stops O(unit).
  - O(state=restarted) is a whole switch window in one run, with no play's task inside it - the gate opens and drains
    as for O(state=open) (or stays, when the play opened it before it stopped llama-server), O(server_unit) restarts,
    the run waits until llama-server's C(/health) answers 200 (up to O(health_timeout) seconds), then the gate closes,
    also when the restart or the wait failed. Without a gate (nothing listened) it restarts O(server_unit) only, and
    the caller waits.
  - Decides on what is there - the table (C(nft list table)), the unit (C(systemctl is-active)) and the sockets of
    C(/proc/net/tcp) and C(/proc/net/tcp6).
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Reports what it would change and changes nothing (no drain either).
options:
  state:
    description:
      - V(open) - new connections are answered by the gate; V(closed) - by llama-server; V(restarted) - by the gate
        while O(server_unit) restarts and loads, then by llama-server again.
    type: str
    choices: [open, closed, restarted]
    default: open
  server_unit:
    description: llama-server's systemd unit, which O(state=restarted) restarts (required then).
    type: str
  health_timeout:
    description: Seconds O(state=restarted) waits for C(/health) to answer 200 after the restart.
    type: int
    default: 600
  pause_units:
    description:
      - Units that O(state=restarted) stops first, when active, and starts again after the gate closed, whatever
        happened - the supervisor's timer and its check, which would otherwise restart llama-server a second time
        while this run restarts it.
    type: list
    elements: str
    default: []
  address:
    description: llama-server's listening address (V(0.0.0.0) or V(::) - every address).
    type: str
    required: true
  port:
    description: llama-server's port.
    type: int
    required: true
  gate_port:
    description: The port the gate responder listens on, at O(address).
    type: int
    required: true
  unit:
    description: The systemd unit of the gate responder.
    type: str
    required: true
  table:
    description: The name of the gate's nftables table (family C(inet)).
    type: str
    default: llamarpc_gate
  drain_timeout:
    description: Seconds O(state=open) waits for the connections open before the gate to end.
    type: int
    default: 120
  api_key:
    description: llama-server's API key, for its C(/slots) during the drain; empty - none.
    type: str
    default: ""
  listen_timeout:
    description: Seconds O(state=open) waits for the responder to listen.
    type: int
    default: 30
  interval:
    description:
      - Seconds between two looks during the drain and the wait for C(/health). Each look late is time the clients
        wait at 503.
    type: float
    default: 0.02
requirements:
  - nftables (C(nft)) on the host when the gate opens.
notes:
  - Runs as root (the nftables table, the unit).
seealso:
  - module: llamarpc.cluster.llama_server_serving
    description: Waits until llama-server serves again, before the gate closes.
"""

EXAMPLES = r"""
- name: New clients get 503 with Retry-After; wait for the open requests to end
  llamarpc.cluster.llama_server_gate:
    state: open
    address: 10.77.0.11
    port: 8080
    gate_port: 8079
    unit: llamarpc-server-gate.service
    drain_timeout: 120

- name: Restart llama-server (a play's cutover in between)
  ansible.builtin.systemd_service:
    name: llamarpc-server.service
    state: restarted

- name: Close the gate once llama-server serves again
  llamarpc.cluster.llama_server_gate:
    state: closed
    address: 10.77.0.11
    port: 8080
    gate_port: 8079
    unit: llamarpc-server-gate.service

- name: The whole window in one run - gate, drain, restart, /health 200, gate closed
  llamarpc.cluster.llama_server_gate:
    state: restarted
    address: 10.77.0.11
    port: 8080
    gate_port: 8079
    unit: llamarpc-server-gate.service
    server_unit: llamarpc-server.service
    pause_units: [llamarpc-server-supervisor.timer, llamarpc-server-supervisor.service]
    health_timeout: 900
"""

RETURN = r"""
open:
  description: Whether the gate is open after this run.
  returned: always
  type: bool
  sample: true
drained:
  description: Whether the connections open before the gate ended (or only idle ones were left); null when the run
    did not drain (O(state=closed), no gate, check mode).
  returned: always
  type: bool
  sample: true
how:
  description: How the drain ended - V(none_open) (no connection left), V(idle) (llama-server reported no request in
    progress twice in a row), V(timeout); null when the run did not drain.
  returned: always
  type: str
  sample: none_open
connections:
  description: Connections to llama-server still open when the drain ended.
  returned: always
  type: int
  sample: 0
waited:
  description: Seconds the drain waited.
  returned: always
  type: float
  sample: 2.0
restarted:
  description: Whether O(server_unit) was restarted (or would be, in check mode).
  returned: state is restarted
  type: bool
  sample: true
loaded:
  description: Seconds from the restart until C(/health) answered 200; null without a gate (no wait) and in check mode.
  returned: state is restarted
  type: float
  sample: 3.5
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._server_gate import (
    ARGUMENT_SPEC,
    REQUIRED_IF,
    run_module,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
