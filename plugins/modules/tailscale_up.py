#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tailscale_up
short_description: Join Tailscale or a Headscale server with a host name, tags and DNS setting, when they differ
version_added: 0.1.0
description:
  - Reads the node's state (C(tailscale status --json), C(tailscale ip), C(tailscale debug prefs)) and compares it
    with the wanted control server, host name, tags and DNS acceptance. Only when the node is not running or one
    of them differs, runs C(tailscale up --reset) with every managed setting spelled out (and the auth key when the
    node has to log in), then reads the state again.
  - The auth key is never logged or returned.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - The C(tailscale) command and a running C(tailscaled) on the host.
options:
  auth_key:
    description:
      - Auth key (C(tskey-auth-...)), OAuth client secret (C(tskey-client-...)), Headscale pre-auth key (with
        O(login_server)) or C(file:/path) of a file holding one.
      - Needed only when the node is not logged in.
    type: str
  hostname:
    description: Host name in the tailnet. Empty leaves the one Tailscale picks (the OS host name).
    type: str
    default: ""
  tags:
    description: ACL tags to advertise (C(tag:name)); the auth key or the ACL must allow them.
    type: list
    elements: str
    default: []
  login_server:
    description: URL of the control server, for example a Headscale server. Empty means Tailscale's own.
    type: str
    default: ""
  accept_dns:
    description: Accept the tailnet's DNS settings (MagicDNS). Off by default, so the host's resolver stays as it is.
    type: bool
    default: false
  timeout:
    description: Seconds C(tailscale up) may take.
    type: int
    default: 60
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Predicts C(changed) from the state it reads; runs nothing that changes the node.
  diff_mode:
    details: Shows the managed settings before and after.
seealso:
  - module: llamarpc.cluster.tailscale_facts
  - name: tailscale up
    description: Tailscale's command line reference.
    link: https://tailscale.com/kb/1241/tailscale-up
"""

EXAMPLES = r"""
- name: Join the tailnet
  llamarpc.cluster.tailscale_up:
    auth_key: "{{ tailscale_auth_key }}"
    hostname: node1
    tags: [tag:llamarpc]

- name: Join a Headscale server
  llamarpc.cluster.tailscale_up:
    auth_key: "{{ headscale_preauth_key }}"
    login_server: https://headscale.example.net
"""

RETURN = r"""
differences:
  description: What differed before the run (running, login_server, hostname, tags, accept_dns).
  returned: always
  type: list
  elements: str
  sample: [running, tags]
tailscale:
  description: The node after the run, as M(llamarpc.cluster.tailscale_facts) returns it (before it in check mode).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import _tailscale


def main():
    module = AnsibleModule(
        argument_spec={
            "auth_key": {"type": "str", "no_log": True},
            "hostname": {"type": "str", "default": ""},
            "tags": {"type": "list", "elements": "str", "default": []},
            "login_server": {"type": "str", "default": ""},
            "accept_dns": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    p = module.params
    problems = [
        problem
        for problem in [
            _tailscale.auth_key_problem(p["auth_key"], p["login_server"]),
            _tailscale.hostname_problem(p["hostname"]),
        ]
        if problem
    ] + _tailscale.tag_problems(p["tags"])
    if problems:
        module.fail_json(msg="; ".join(problems))

    tailscale = module.get_bin_path("tailscale", required=True)
    status, prefs = _tailscale.read_node(module, tailscale)
    want = _tailscale.wanted(p["hostname"], p["tags"], p["login_server"], p["accept_dns"])
    diffs = _tailscale.differences(status, prefs, want)
    result = {"changed": bool(diffs), "differences": diffs, "tailscale": dict(status, prefs=prefs)}
    if module._diff:
        before = {key: prefs[key] for key in want}
        before["running"] = "running" not in diffs
        result["diff"] = {"before": before, "after": dict(want, running=True)}
    if not diffs or module.check_mode:
        module.exit_json(**result)

    needs_login = status["backend_state"] in ("NeedsLogin", "NoState") or prefs["logged_out"]
    if needs_login and not p["auth_key"]:
        module.fail_json(msg="the node is not logged in to Tailscale: give an auth key (tailscale_auth_key)", **result)
    if "login_server" in diffs and not p["auth_key"]:
        module.fail_json(msg="moving the node to another control server needs an auth key", **result)
    key = p["auth_key"] if needs_login or "login_server" in diffs else None
    argv = _tailscale.up_argv(tailscale, want, key, p["timeout"])
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"tailscale up failed (rc={rc}): {err.strip() or out.strip()}", **result)
    status, prefs = _tailscale.read_node(module, tailscale)
    result["tailscale"] = dict(status, prefs=prefs)
    if status["backend_state"] != "Running":
        module.fail_json(msg=f"tailscale up returned but the node is {status['backend_state']}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
