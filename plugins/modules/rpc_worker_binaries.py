#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rpc_worker_binaries
short_description: Check the RPC server's flags and install and prove the tensor cache verifier's hashing helper
version_added: 0.4.0
description:
  - Runs C(O(server) --help) and fails when it does, or when its text does not name every one of O(flags) (the RPC
    server prints its usage on an unknown flag and exits, and systemd would restart it in a loop).
  - With O(helper_src) - installs it at O(helper) (owner root, mode 0755, written atomically) when the bytes differ.
  - With O(helper) - asks the helper for the FNV-1a 64 of C(foobar) and fails unless it answers as llama.cpp's
    C(fnv_hash) does (C(85944171f73967e8)). On every run, not only after a copy - a helper that fails once (no C++
    runtime on the host) fails again.
  - One module run for what the worker's role checked and installed in three tasks.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: The flags are checked and a helper already in place is proven (both only read); a copy that would happen
      is reported, and neither a server nor a helper that this run's install has not put there yet is asked.
options:
  server:
    description: The RPC server binary (C(rpc-server) or C(ggml-rpc-server)). Missing - a failure, except in check
      mode before the first install.
    type: path
    required: true
  flags:
    description: Flags the server's C(--help) must name (those the worker's unit passes).
    type: list
    elements: str
    default: []
  helper:
    description: Where the hashing helper is installed; omitted - no helper is installed or proven.
    type: path
  helper_src:
    description: The helper as llama.cpp's build brings it, on the host; omitted - O(helper) is proven as it is
      (built on the host by other means).
    type: path
  service:
    description:
      - The worker's service (V(llamarpc-rpc-worker.service)); omitted - not asked.
      - Given - RV(running) is the executable of its main process now and RV(switch) whether that is another binary
        than O(server), as when a new llama.cpp is installed beside the one the worker runs. Only read; the service is
        never restarted here.
    type: str
  cutover:
    description:
      - Whether a worker that switches (RV(switch)) is left running for the coordinator's cutover (RV(waits)), instead
        of being restarted by its role.
    type: bool
    default: false
  check_unit:
    description:
      - The worker's tensor-cache check (a oneshot unit), returned as RV(check_unit) for the coordinator's cutover,
        which starts it before its window (M(llamarpc.cluster.rpc_worker_cutover)). Not started here.
    type: str
seealso:
  - module: llamarpc.cluster.llama_server_check
  - module: llamarpc.cluster.tensor_cache_seed
"""

EXAMPLES = r"""
- name: The RPC server knows its unit's flags; the verifier's hashing helper, from llama.cpp's binaries, hashes right
  llamarpc.cluster.rpc_worker_binaries:
    server: /opt/llamarpc/llama.cpp/KEY/bin/ggml-rpc-server
    flags: [--cache, --device]
    helper: /usr/local/lib/llamarpc/llamarpc-fnv1a
    helper_src: /opt/llamarpc/llama.cpp/KEY/bin/llamarpc-fnv1a
    service: llamarpc-rpc-worker.service
    cutover: true
    check_unit: llamarpc-rpc-worker-cache-verify.service
"""

RETURN = r"""
checked:
  description: What was checked and passed - C(flags) (the server's help), C(helper) (the helper's proof).
  returned: always
  type: list
  elements: str
  sample: [flags, helper]
service:
  description: O(service), for the plays that restart it later.
  returned: when O(service) is given
  type: str
  sample: llamarpc-rpc-worker.service
running:
  description: The executable the main process of O(service) runs now; empty when it does not run.
  returned: when O(service) is given
  type: str
  sample: /opt/llamarpc/llama.cpp/0f3a.../bin/ggml-rpc-server
switch:
  description: Whether O(service) runs, and another binary than O(server) (a new llama.cpp waits for its start).
  returned: when O(service) is given
  type: bool
  sample: false
waits:
  description: RV(switch) and O(cutover) - the worker keeps its old binaries until the coordinator's cutover restarts
    it.
  returned: when O(service) is given
  type: bool
  sample: false
check_unit:
  description: O(check_unit), for the coordinator's cutover.
  returned: when O(service) and O(check_unit) are given
  type: str
  sample: llamarpc-rpc-worker-cache-verify.service
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc._worker_binaries import (
    ARGUMENT_SPEC,
    run_module,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
