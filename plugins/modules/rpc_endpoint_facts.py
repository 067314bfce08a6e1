#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rpc_endpoint_facts
short_description: Probe llama.cpp RPC workers and report their protocol version, devices and memory
version_added: 0.1.0
description:
  - Speaks the ggml RPC wire protocol of llama.cpp's RPC worker (C(ggml-rpc-server), C(rpc-server) in older releases)
    to each endpoint and reports whether it is ready, its protocol version, and the free and total memory, alignment
    and largest buffer of every device it serves.
  - Per endpoint - a TCP connect (its round-trip time is reported), C(HELLO) (the form of protocol 4 and later, else
    that of protocol 1 to 3), C(DEVICE_COUNT), then the memory, alignment and maximum size of each device.
  - Sends only read-only commands and changes nothing. The client is pure Python (standard library only), so llama.cpp
    is not needed where it runs.
  - Endpoints are probed concurrently; an endpoint listed twice is probed once.
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  endpoints:
    description:
      - The workers to probe.
      - "A string is C(host:port), C([ipv6]:port), or a host name or address alone, which takes
        O(default_port). A bare IPv6 address (without brackets) also takes O(default_port)."
      - "A dictionary has C(host) (required), C(port) (default O(default_port)) and C(name) (a label
        returned with the result, default the C(host:port) form)."
      - A comma-separated string is split into a list, so the value of llama-server's C(--rpc) option
        works as it is.
    type: list
    elements: raw
    required: true
  default_port:
    description: Port of endpoints that do not give one. C(50052) is the worker's own default.
    type: int
    default: 50052
  connect_timeout:
    description:
      - Seconds to wait for the TCP connection. An endpoint whose connect does not finish in time is in
        state C(timeout).
    type: float
    default: 3.0
  timeout:
    description:
      - Seconds to wait for each reply once connected.
      - A worker that accepts the connection but does not answer C(HELLO) within this time is C(busy).
        A reply that starts but does not finish in time makes the endpoint C(malformed).
    type: float
    default: 3.0
  fail_on:
    description:
      - Fail the task when an endpoint ends in one of these states. Facts are returned all the same.
      - The default never fails, whatever the states are.
      - "For example V([busy, refused, timeout, unreachable, incompatible, malformed]) requires every
        worker to be ready; without V(busy) in the list a worker already held by a running llama-server
        passes."
    type: list
    elements: str
    choices: [busy, refused, timeout, unreachable, incompatible, malformed]
    default: []
  skip_connected:
    description:
      - For a worker probed on its own host - an endpoint whose port has an established TCP connection on this host
        (llama-server connected to the worker) is reported C(busy) without a connection, as C(ss state established)
        would show it. A worker serves one client at a time, and a probe left in its backlog of one makes the next
        connects time out.
      - Any local address counts; leave it off where the endpoints are on other hosts.
    type: bool
    default: false
    version_added: 0.2.0
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.facts]
attributes:
  check_mode:
    details: The module only reads; check mode probes exactly as a normal run does.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
requirements:
  - Python 3.8 or later on the host the module runs on (standard library only).
  - TCP reach from that host to the endpoints. To probe from the controller, use C(delegate_to) with
    C(localhost) and C(run_once).
notes:
  - States - C(ready), C(busy) (connected, but C(HELLO) got no answer within O(timeout) - usually a coordinator holds
    the worker, which serves one client at a time), C(refused), C(timeout) (the connect did not finish within
    O(connect_timeout)), C(unreachable), C(incompatible) (an unknown protocol major, or not a ggml RPC server),
    C(malformed) (a reply of the wrong size, short, stalled, or with impossible values).
  - Every connection is closed abortively (RST), so a probe never kills a worker with SIGPIPE nor keeps a worker that
    llama-server needs.
  - CPU workers report free memory equal to their total RAM - plan memory from the host's C(MemAvailable), not from
    these numbers.
  - Protocol majors 1 to 7 are understood (verified against llama.cpp at protocol 7.0.0). Busy workers, their listen
    backlog and SIGPIPE safety in detail - C(docs/modules.md).
seealso:
  - module: ansible.builtin.wait_for
    description: Waits for a TCP port without speaking the protocol; it cannot tell ready from busy.
  - name: llama.cpp RPC worker
    description: The RPC worker's documentation, with its security warning.
    link: https://github.com/ggml-org/llama.cpp/tree/master/tools/rpc
"""

EXAMPLES = r"""
- name: Probe two workers from the controller
  llamarpc.cluster.rpc_endpoint_facts:
    endpoints:
      - 10.77.0.11:50052
      - "[fd00:77::12]:50052"
  delegate_to: localhost
  run_once: true

- name: Probe every worker of the inventory group rpc_workers at its ansible_host, default port
  llamarpc.cluster.rpc_endpoint_facts:
    endpoints: "{{ groups['rpc_workers'] | map('extract', hostvars, 'ansible_host') | list }}"
    default_port: 50052
  delegate_to: localhost
  run_once: true

- name: Same, with the inventory names as labels (items {name, host}, port from default_port)
  llamarpc.cluster.rpc_endpoint_facts:
    endpoints: >-
      {{ dict(groups['rpc_workers'] | zip(groups['rpc_workers'] | map('extract', hostvars, 'ansible_host')))
         | dict2items(key_name='name', value_name='host') }}
  delegate_to: localhost
  run_once: true

- name: On the coordinator itself, probe the workers of llama-server's --rpc value
  llamarpc.cluster.rpc_endpoint_facts:
    endpoints: "10.77.0.11:50052,10.77.0.12:50052"

- name: Before starting the coordinator, require every worker to be ready (not even held by another one)
  llamarpc.cluster.rpc_endpoint_facts:
    endpoints: "{{ groups['rpc_workers'] | map('extract', hostvars, 'ansible_host') | list }}"
    timeout: 2
    fail_on: [busy, refused, timeout, unreachable, incompatible, malformed]
  delegate_to: localhost
  run_once: true

- name: Show free memory per worker
  ansible.builtin.debug:
    msg: >-
      {{ item.endpoint }}: {{ item.state }},
      {{ item.devices | map(attribute='free') | sum | human_readable }} free
  loop: "{{ ansible_facts.rpc_endpoints }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
ansible_facts:
  description: Facts set by the module.
  returned: always
  type: dict
  contains:
    rpc_endpoints:
      description: One item per endpoint, in the order of O(endpoints).
      returned: always
      type: list
      elements: dict
      contains:
        name:
          description: The C(name) given with the endpoint, else its C(host:port) form.
          type: str
          sample: node2
        endpoint:
          description: C(host:port), with an IPv6 address in brackets.
          type: str
          sample: 10.77.0.12:50052
        host:
          description: Host name or address probed.
          type: str
          sample: 10.77.0.12
        port:
          description: TCP port probed.
          type: int
          sample: 50052
        state:
          description: Outcome of the probe.
          type: str
          choices: [ready, busy, refused, timeout, unreachable, incompatible, malformed]
          sample: ready
        protocol:
          description: RPC protocol version the worker announced in its HELLO reply; null without one.
          type: str
          sample: 7.0.0
        major:
          description: Protocol major version; null without a HELLO reply.
          type: int
          sample: 7
        minor:
          description: Protocol minor version; null without a HELLO reply.
          type: int
          sample: 0
        patch:
          description: Protocol patch version; null without a HELLO reply.
          type: int
          sample: 0
        hello_form:
          description:
            - Which HELLO the worker answered; null without a HELLO reply.
            - C(conn_caps) is the 24-byte form of protocol 4 and later, C(legacy) the empty form of 1 to 3.
          type: str
          choices: [conn_caps, legacy]
          sample: conn_caps
        device_count:
          description: Number of devices the worker serves (1 for protocol 1 and 2); null unless ready.
          type: int
          sample: 1
        devices:
          description: Each device the worker serves; empty unless ready.
          type: list
          elements: dict
          contains:
            index:
              description: Device index on the worker (C(RPC<n>) devices of a coordinator count across workers).
              type: int
              sample: 0
            free:
              description: Free memory in bytes, as the worker states it.
              type: int
              sample: 25190473728
            total:
              description: Total memory in bytes.
              type: int
              sample: 25190473728
            alignment:
              description: Buffer alignment in bytes.
              type: int
              sample: 64
            max_size:
              description: Largest single buffer in bytes.
              type: int
              sample: 18446744073709551615
        connect_rtt_ms:
          description: Time the TCP connect took, in milliseconds; null when it failed.
          type: float
          sample: 0.183
        error:
          description: Why the endpoint is not ready; null when it is.
          type: str
          sample: null
summary:
  description: Number of endpoints in each state, and C(total).
  returned: always
  type: dict
  sample:
    total: 3
    ready: 2
    busy: 1
    refused: 0
    timeout: 0
    unreachable: 0
    incompatible: 0
    malformed: 0
msg:
  description: One line per endpoint that is not ready, after a count per state.
  returned: always
  type: str
  sample: "3 endpoints: 2 ready, 1 busy; 10.77.0.13:50052 busy: connected, but no HELLO reply within 3 s"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc._rpc_endpoints import ARGUMENT_SPEC, run_module


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
