#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_units
short_description: Several system units running and enabled at boot, in one call
version_added: 0.2.0
description:
  - For each of O(units), in order - C(systemctl enable) when C(systemctl is-enabled) says it is not, then
    C(systemctl start) when its C(ActiveState) is neither C(active) nor C(activating) - what
    M(ansible.builtin.systemd_service) does with C(state=started) and C(enabled=true) for one unit; a rerun that
    changes nothing costs one module run for all of them.
  - A failed C(enable), C(start), C(disable) or C(stop) is tried again O(retries) times, O(delay) seconds apart (a
    start right after C(daemon-reload) on a loaded host has failed with 219/CGROUP and succeeded when tried again);
    after the last the task fails with systemctl's message.
  - Then each of O(stopped) - C(systemctl disable) when it is enabled (not a static unit), then C(systemctl stop)
    when it runs or is about to - what M(ansible.builtin.systemd_service) does with C(state=stopped) and
    C(enabled=false).
  - A unit systemd does not know (no unit file loaded) fails the task. No unit is ever restarted here.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - systemd as the host's system manager.
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Reads every unit's state and reports the actions a real run takes.
  diff_mode:
    details: Each unit's C(active) state and whether it is enabled, before and after.
options:
  units:
    description: Unit names with their suffix (V(example.service), V(example.timer)), handled in this order.
    type: list
    elements: str
    required: true
  stopped:
    description: Unit names with their suffix to stop and disable at boot, handled in this order after O(units).
    type: list
    elements: str
    default: []
  retries:
    description: How many more times a failed C(enable), C(start), C(disable) or C(stop) is tried.
    type: int
    default: 3
  delay:
    description: Seconds between two tries.
    type: float
    default: 2.0
seealso:
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
- name: Firewall, service and its timer run and start at boot
  llamarpc.cluster.systemd_units:
    units: [example-firewall.service, example.service, example-prune.timer]

- name: A service runs, its optional timer is off
  llamarpc.cluster.systemd_units:
    units: [example.service]
    stopped: [example-watch.timer]
"""

RETURN = r"""
actions:
  description: The actions taken (in check mode, to take), C(VERB UNIT) in order.
  returned: always
  type: list
  elements: str
  sample: [start example.service]
units:
  description: Each unit as it was found - C(name), C(active) (its C(ActiveState)), C(enabled) (bool) - and the
    C(actions) it needed.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: example.service, active: failed, enabled: true, actions: [start]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd_units import ARGUMENT_SPEC, run_module


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
