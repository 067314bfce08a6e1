#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rpc_worker_cutover
short_description: Restart an RPC worker onto its new llama.cpp the moment its coordinator lets go of it
version_added: 0.4.0
description:
  - Run on the worker, in the background (C(async) with C(poll=0)), before the coordinator restarts llama-server for a
    new llama.cpp. It queues a connection on the worker's RPC port O(endpoint) and sends HELLO. A worker serves one
    client at a time, so the old worker answers only once llama-server has let go of it.
  - Holding that connection - the old worker then answers nobody else - it restarts O(service), whose unit already
    runs the new binary. A HELLO that llama-server's start sends meanwhile waits in the queue and is reset with the old
    worker, so llama-server meets only the new one, and no task of the play runs between llama-server's stop and its
    start.
  - When nothing listens on O(endpoint), it restarts O(service) at once (nobody is served by it).
  - With O(armed_file), it writes C(armed RUN_ID) there once its connection is queued, then C(done RUN_ID) or
    C(failed RUN_ID) and the reason (O(run_id)). The play waits for C(armed) or C(done) with
    M(ansible.builtin.wait_for) before it restarts llama-server.
  - Fails, restarting nothing, when the worker's client still holds it after O(timeout) seconds; fails when the
    restart fails after three tries, 2 s apart.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Reports the restart it would make and waits for nothing.
options:
  endpoint:
    description: The worker's RPC endpoint, C(host:port) as llama-server's C(--rpc) names it, from the worker itself.
    type: str
    required: true
  service:
    description: The worker's systemd service (V(llamarpc-rpc-worker.service)).
    type: str
    required: true
  timeout:
    description: Seconds to wait for the worker's client to let go of it, the O(check_unit) run included (a module
      run never outlasts it by more than the restart, so an C(async) of O(timeout) and a minute holds).
    type: int
    default: 600
  armed_file:
    description: Where the module says C(armed), C(done) or C(failed), with O(run_id); omitted - nowhere.
    type: path
  run_id:
    description: What names this cutover in O(armed_file), so that a word left by an earlier one is not taken for it.
    type: str
    default: ""
  check_unit:
    description:
      - A oneshot unit started, and waited for, before the connection queues, while the old worker still serves - the
        worker's tensor-cache check (V(llamarpc-rpc-worker-cache-verify.service)). The cache's files it finds good are
        recorded, so the check in the worker's own start, inside the window, hashes none of them again.
      - When it fails, the module fails with C(failed) in O(armed_file), and nothing is queued or restarted.
    type: str
seealso:
  - module: llamarpc.cluster.rpc_worker_binaries
  - module: llamarpc.cluster.llama_server_gate
"""

EXAMPLES = r"""
- name: Each worker restarts on its new llama.cpp once llama-server lets go of it
  llamarpc.cluster.rpc_worker_cutover:
    endpoint: 100.64.0.2:50052
    service: llamarpc-rpc-worker.service
    timeout: 600
    armed_file: /run/llamarpc-rpc-worker-cutover
    run_id: "20261207T115452.409211"
    check_unit: llamarpc-rpc-worker-cache-verify.service
  async: 660
  poll: 0
  register: cutover_jobs
"""

RETURN = r"""
waited:
  description: Seconds from the queued connection to the old worker's answer.
  returned: success, not in check mode
  type: float
  sample: 41.207
protocol:
  description: The old worker's RPC protocol, from its HELLO reply; null when nothing listened.
  returned: success, not in check mode
  type: str
  sample: 3.4.0
tries:
  description: How many times the restart was tried again after a failure.
  returned: success, not in check mode
  type: int
  sample: 0
service:
  description: O(service).
  returned: success, not in check mode
  type: str
  sample: llamarpc-rpc-worker.service
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc._worker_cutover import (
    ARGUMENT_SPEC,
    run_module,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
