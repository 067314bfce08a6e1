#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: link_throughput
short_description: Measure a link, a mount or a host's memory for the benchmark
version_added: 0.1.0
description:
  - O(mode=serve) sends one file over one plain TCP connection (sendfile) to the first reader, then exits. Run it
    with C(async) on the sending host, and O(mode=read) on the receiving host; the pair gives the raw TCP throughput
    of the link between them, the baseline that an SSHFS mount over the same link is compared with.
  - O(mode=read_file) reads a file (through an SSHFS mount, say) and times it.
  - O(mode=memory) measures single-thread memory copy bandwidth, an input of the performance model.
  - Throughput is in MB/s (10^6 bytes). The module only measures; it changes nothing on the host.
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes]
attributes:
  check_mode:
    support: partial
    details: Nothing is measured in check mode (measuring is the whole point); the module reports that it skipped.
  diff_mode:
    support: none
options:
  mode:
    description: What to measure.
    type: str
    choices: [serve, read, read_file, memory]
    required: true
  path:
    description: The file to send (O(mode=serve); without it, O(size_mb) zero bytes are sent) or to read
      (O(mode=read_file)).
    type: path
  port:
    description: TCP port to listen on (O(mode=serve)) or to connect to (O(mode=read)).
    type: int
  host:
    description: Address of the sending host (O(mode=read)).
    type: str
  bind:
    description: Address to listen on (O(mode=serve)), the sending host's mesh or private address (never all).
    type: str
  allowed:
    description: Only these reader addresses are served (O(mode=serve)); others are disconnected. Empty means any.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait for the reader (O(mode=serve)) or for the whole read (O(mode=read)).
    type: float
    default: 120
  drop_cache:
    description: Drop the file's cached pages before reading (O(mode=read_file)), so that a file on an SSHFS mount
      crosses the link again.
    type: bool
    default: false
  limit_mb:
    description: Read at most this many MB (O(mode=read_file)); 0 reads the whole file.
    type: int
    default: 0
  size_mb:
    description: Zero bytes to send (O(mode=serve) without O(path)), or the buffer size of O(mode=memory).
    type: int
    default: 64
  rounds:
    description: Copies for O(mode=memory); the fastest counts.
    type: int
    default: 5
"""

EXAMPLES = r"""
- name: Send a shard once over plain TCP (in the background)
  llamarpc.cluster.link_throughput:
    mode: serve
    path: /data/models/model/model-00002-of-00003.gguf
    port: 50199
    bind: "{{ node3_address }}"
    allowed: ["{{ coordinator_address }}"]
  delegate_to: node3
  async: 180
  poll: 0
  register: sender

- name: Read it on the coordinator
  llamarpc.cluster.link_throughput:
    mode: read
    host: "{{ node3_address }}"
    port: 50199
  register: raw_tcp

- name: Memory bandwidth of every node
  llamarpc.cluster.link_throughput:
    mode: memory
"""

RETURN = r"""
bytes:
  description: Bytes moved (sent, received or read; for O(mode=memory) read plus written).
  returned: success
  type: int
  sample: 5272160
seconds:
  description: Seconds the transfer took.
  returned: success
  type: float
mb_per_s:
  description: Throughput in MB/s (10^6 bytes).
  returned: success
  type: float
  sample: 11.8
peer:
  description: The reader's address (O(mode=serve)).
  returned: when O(mode=serve)
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.bench._link import (
    LinkError,
    memory_bandwidth,
    read_file,
    read_stream,
    serve_file,
    serve_zeros,
)

REQUIRED = {"serve": ("port", "bind"), "read": ("host", "port"), "read_file": ("path",), "memory": ()}


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": sorted(REQUIRED), "required": True},
            "path": {"type": "path"},
            "port": {"type": "int"},
            "host": {"type": "str"},
            "bind": {"type": "str"},
            "allowed": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "float", "default": 120},
            "drop_cache": {"type": "bool", "default": False},
            "limit_mb": {"type": "int", "default": 0},
            "size_mb": {"type": "int", "default": 64},
            "rounds": {"type": "int", "default": 5},
        },
        supports_check_mode=True,
    )
    p = module.params
    mode = p["mode"]
    missing = [name for name in REQUIRED[mode] if p[name] in (None, "")]
    if missing:
        module.fail_json(msg=f"mode={mode} needs {', '.join(missing)}")
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="nothing is measured in check mode")
    try:
        if mode == "serve":
            allowed = set(p["allowed"]) or None
            if p["path"]:
                result = serve_file(p["path"], p["port"], p["bind"], p["timeout"], allowed)
            else:
                result = serve_zeros(p["size_mb"] * 1000 * 1000, p["port"], p["bind"], p["timeout"], allowed)
        elif mode == "read":
            result = read_stream(p["host"], p["port"], p["timeout"])
        elif mode == "read_file":
            result = read_file(p["path"], p["limit_mb"] * 1000 * 1000 or None, p["drop_cache"])
        else:
            result = memory_bandwidth(p["size_mb"], p["rounds"])
    except (LinkError, OSError) as exc:
        module.fail_json(msg=f"{mode}: {exc}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
