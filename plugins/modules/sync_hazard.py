#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sync_hazard
short_description: Stop lsyncd and other syncers from deleting files in the model directories
version_added: 0.2.0
description:
  - Scans the host as M(llamarpc.cluster.sync_hazard_facts) does (lsyncd in system units, in the units of every user
    manager, as bare processes and in crontabs, its configs; with O(hygiene) other deleting syncers), decides what
    O(state) requires, acts, scans again and returns what is left in the C(sync_hazards) fact.
  - O(state=disable) stops, disables and masks every lsyncd unit in the scope where it runs (the system manager or
    the user's own manager), stops and disables its timers, disables crontab lines that start lsyncd and ends lsyncd
    processes that no unit manages (SIGTERM). Killing alone is useless when systemd restarts it (C(Restart=always)).
  - O(state=exclude) keeps lsyncd syncing but rewrites each config so that every sync that could reach a model
    directory has C(delete = false) and the model directories excluded, then restarts the lsyncd units whose config
    changed and starts (unmasks, enables) those that ran, were enabled or were masked. It refuses, before changing
    anything, a config it cannot protect that way.
  - O(state=audit) only scans.
  - With O(disable_other_syncers), the disable and exclude states also stop, disable and mask the units of other
    syncers that reach a model directory, disable their crontab lines and end their processes.
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  state:
    description: What to do with what the scan finds (see the description).
    type: str
    required: true
    choices: [audit, disable, exclude]
  disable_other_syncers:
    description:
      - With O(state=disable) or O(state=exclude), also stop, disable and mask the units (and stop and disable the
        timers) of other syncers that reach a model directory, disable their crontab lines and end their processes.
      - Off, they are only reported.
    type: bool
    default: false
  backup:
    description: With O(state=exclude), keep a timestamped copy of each config before rewriting it.
    type: bool
    default: true
  settle_seconds:
    description: With O(state=exclude), seconds to wait after starting lsyncd before the second scan checks it runs.
    type: int
    default: 3
extends_documentation_fragment:
  - llamarpc.cluster.sync_scan
  - llamarpc.cluster.attributes
  - llamarpc.cluster.attributes.check_diff
attributes:
  check_mode:
    details: Scans, and lists in RV(actions) what it would do; nothing is changed and no second scan is made.
  diff_mode:
    details: Crontabs and lsyncd configs as text before and after; each unit's C(ActiveState) and C(UnitFileState).
requirements:
  - Linux with C(/proc); systemd for units.
  - Root for O(state=disable) and O(state=exclude) (C(runuser) reaches each user's manager as that user).
notes:
  - A unit file in C(/etc/systemd/system) or C(~/.config/systemd/user) sits where the mask link must go; it is moved one
    level down the unit search path (C(/usr/local/lib/systemd/system), C(~/.local/share/systemd/user)) first, so the
    unit can be masked and later unmasked by the exclude state. A user unit whose manager is not running gets the
    links systemctl would write (its enablement links removed, the mask link made, owned by the user).
  - Crontab lines are disabled by prefixing them with C(# disabled by llamarpc.cluster.lsyncd_neutralize:).
  - What the scan reports and the exclude rewrite - M(llamarpc.cluster.sync_hazard_facts) and C(docs/modules.md).
seealso:
  - module: llamarpc.cluster.sync_hazard_facts
    description: The same scan, read-only.
  - name: lsyncd manual, default configurations
    description: The C(delete) and C(exclude) settings of C(default.rsync).
    link: https://lsyncd.github.io/lsyncd/manual/config/layer4/
"""

EXAMPLES = r"""
- name: Stop every lsyncd that could delete in the model directories, and deleting syncers that reach them
  llamarpc.cluster.sync_hazard:
    state: disable
    model_dirs: [/data/models, /home/pool/work/models]
    disable_other_syncers: true
  become: true

- name: Keep lsyncd syncing, without deleting in the model directories
  llamarpc.cluster.sync_hazard:
    state: exclude
    model_dirs: [/data/models]
    exclude_patterns: ["*.gguf"]
  become: true

- name: Fail when something can still delete in a model directory
  ansible.builtin.assert:
    that: ansible_facts.sync_hazards.unresolved | length == 0
    fail_msg: "{{ ansible_facts.sync_hazards.unresolved | map(attribute='where') | list }}"
"""

RETURN = r"""
actions:
  description: What was done (in check mode, what would be done), in order.
  returned: always
  type: list
  elements: str
  sample:
    - stop user unit lsyncd.service of pool
    - disable user unit lsyncd.service of pool
    - move /home/pool/.config/systemd/user/lsyncd.service to /home/pool/.local/share/systemd/user/lsyncd.service
      (out of the mask's way)
    - mask user unit lsyncd.service of pool
ansible_facts:
  description: Facts set by the module.
  returned: always
  type: dict
  contains:
    sync_hazards:
      description:
        - The scan after acting (the first scan when nothing was done, or in check mode), as
          M(llamarpc.cluster.sync_hazard_facts) returns it - C(hazards), C(unresolved) (what can still delete in a
          model directory), C(units), C(processes), C(cron_lines), C(lsyncd_configs), C(summary_lines), C(warnings).
      returned: always
      type: dict
      sample:
        root: true
        model_dirs: [/data/models]
        unresolved: []
        summary_lines:
          - "[neutralised] user unit lsyncd.service of pool: lsyncd inactive (dead), masked ... (reaches /data/models)"
unprotectable:
  description: With O(state=exclude), the syncs the rewrite cannot protect (the module then fails without acting).
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync._neutralize import ARGUMENT_SPEC, run_module


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
