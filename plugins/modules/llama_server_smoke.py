#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_server_smoke
short_description: Prove a llama.cpp build on this host - a greedy completion of a quantised model on its CPU
version_added: 0.2.0
description:
  - Starts O(server) (C(llama-server)) on loopback with a port of its own, on O(model), computing on this host's
    CPU with weight repacking on (as a coordinator or a single process runs), asks for a short greedy completion
    and stops the server again.
  - Fails, with the server's exit status and the end of its log, when the server dies (for example SIGILL, an
    instruction this CPU or kernel does not allow), is not ready within O(timeout), or answers without tokens.
  - A build whose C(llama-server) knows C(--rpc-tensor-hashes) (the C(llama_cpp) role's patch) is given a file
    naming every tensor of O(model) with its size, and must say that it read them all. Without an RPC device the
    hashes are never offered (they are zeros), so the completion proves that the flag and the file leave a load
    as it was.
  - Changes nothing on the host.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
options:
  server:
    description: Path of the C(llama-server) binary to prove.
    type: path
    required: true
  model:
    description: A quantised GGUF model on this host (the first file of a split model).
    type: path
    required: true
  prompt:
    description: The prompt of the completion.
    type: str
    default: The capital of France is
  n_predict:
    description: Tokens to generate.
    type: int
    default: 8
  threads:
    description: CPU threads of the server.
    type: int
    default: 2
  timeout:
    description: Seconds the whole test may take (start, model load and completion).
    type: int
    default: 300
  record:
    description:
      - A file that remembers a passed test of this O(server) with this O(model) (their paths, sizes and mtimes),
        for example in the build's cache entry. When it already records them, the test is not run again; after a
        pass it is written (not in check mode). A failed test is never recorded, so the next run tests again.
    type: path
seealso:
  - module: llamarpc.cluster.llama_cpp_build
"""

EXAMPLES = r"""
- name: Prove the new build with a small quantised model
  llamarpc.cluster.llama_server_smoke:
    server: /var/cache/llamarpc/llama-cpp/KEY/bin/llama-server
    model: /srv/models/gemma-3-270m-q4_k_m.gguf
"""

RETURN = r"""
content:
  description: The completion's text.
  returned: when the server answered
  type: str
  sample: " the capital of the country of France."
tokens_predicted:
  description: Tokens generated.
  returned: when the server answered
  type: int
  sample: 8
predicted_per_second:
  description: Generation speed the server reported (tokens/s).
  returned: when the server answered
  type: float
  sample: 41.5
seconds:
  description: Seconds the test took.
  returned: when the test ran
  type: float
  sample: 3.2
recorded:
  description: The test had passed before (O(record)) and was not run again.
  returned: always
  type: bool
  sample: false
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_smoke


def main():
    module = AnsibleModule(
        argument_spec={
            "server": {"type": "path", "required": True},
            "model": {"type": "path", "required": True},
            "prompt": {"type": "str", "default": _llama_smoke.PROMPT},
            "n_predict": {"type": "int", "default": 8},
            "threads": {"type": "int", "default": 2},
            "timeout": {"type": "int", "default": 300},
            "record": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    for name in ("server", "model"):
        if not os.path.isfile(p[name]):
            module.fail_json(msg=f"{name} {p[name]} is not a file on this host")
    identity = {name: _identity(p[name]) for name in ("server", "model")}
    if p["record"] and _read(p["record"]) == identity:
        module.exit_json(changed=False, recorded=True)
    options = {key: p[key] for key in ("timeout", "prompt", "n_predict", "threads")}
    with tempfile.TemporaryDirectory(prefix="llamarpc-smoke-") as scratch:
        options.update(_llama_smoke.hashes_options(module, p["server"], p["model"], scratch))
        result = _llama_smoke.smoke(p["server"], p["model"], **options)
    if not result.pop("ok"):
        module.fail_json(msg=f"smoke test of {p['server']} failed: {result.pop('error')}", recorded=False, **result)
    if p["record"] and not module.check_mode:
        _atomic.write_atomic(p["record"], json.dumps(identity), move=module.atomic_move)
    module.exit_json(changed=False, recorded=False, **result)


def _identity(path):
    info = os.stat(path)
    return {"path": path, "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    main()
