#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sync_hazard_facts
short_description: Find lsyncd and other syncers that could delete files in a model directory
version_added: 0.1.0
description:
  - Finds lsyncd wherever it runs (system units, the units of every user manager including lingering users, bare
    processes, crontabs) and reads its configuration with a Lua reader that never executes it; for every C(sync{}) it
    reports the source, the target and whether lsyncd deletes there (in lsyncd 2.x it does by default).
  - With O(hygiene), also reports other syncers that delete (C(rsync --delete) in crontabs, units, timers and
    processes; syncthing folders; unison profiles) and tmpfiles.d lines that remove files, when their paths reach a
    model directory.
  - Every finding says whether it reaches one of O(model_dirs) and whether it is neutralised; the result is what
    M(llamarpc.cluster.sync_hazard) (the P(llamarpc.cluster.lsyncd_neutralize#role) role's module) acts on, including
    the rewrite of each lsyncd config that excludes the model directories.
  - Changes nothing. To act on the findings, use M(llamarpc.cluster.sync_hazard).
author:
  - llamarpc.cluster contributors (@llamarpc)
options: {}
extends_documentation_fragment:
  - llamarpc.cluster.sync_scan
  - llamarpc.cluster.attributes
  - llamarpc.cluster.attributes.facts
attributes:
  check_mode:
    details: The module only reads; check mode scans exactly as a normal run does.
requirements:
  - Linux with C(/proc); systemd for unit discovery (without it, processes, crontabs and files are still read).
  - Root, to read every user's files and ask every user manager (C(runuser) is used to run
    C(systemctl --user) as each user). Without root only what the current user can read is scanned, and a
    warning says so.
notes:
  - A running lsyncd whose config file changed after it started is reported as running the old config (stale), and it
    is not neutralised until it is restarted.
  - Why every lsyncd restart deletes, what the Lua reader understands, what the exclude rewrite writes and refuses,
    and units that cannot be masked in place - C(docs/modules.md).
seealso:
  - name: lsyncd manual, default configurations
    description: The C(delete) and C(exclude) settings of C(default.rsync).
    link: https://lsyncd.github.io/lsyncd/manual/config/layer4/
  - name: tmpfiles.d(5)
    description: Ages, C(D) and C(R) lines that remove files.
    link: https://www.freedesktop.org/software/systemd/man/latest/tmpfiles.d.html
"""

EXAMPLES = r"""
- name: Find what could delete model shards
  llamarpc.cluster.sync_hazard_facts:
    model_dirs:
      - /data/models

- name: Show the findings
  ansible.builtin.debug:
    msg: "{{ ansible_facts.sync_hazards.summary_lines }}"

- name: Fail when something unneutralised can still delete in a model directory
  ansible.builtin.assert:
    that: ansible_facts.sync_hazards.unresolved | length == 0
    fail_msg: "{{ ansible_facts.sync_hazards.unresolved | map(attribute='where') | list }}"

- name: Only pool's user units and home, and an extra lsyncd config
  llamarpc.cluster.sync_hazard_facts:
    model_dirs: [/data/home/pool/work/models]
    users: [pool]
    config_paths: [/opt/mirror/lsyncd.lua]
    hygiene: false
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: complex
  contains:
    sync_hazards:
      description: Everything found.
      returned: always
      type: complex
      contains:
        root:
          description: Whether the scan ran as root (without root it sees only the current user's part).
          returned: always
          type: bool
          sample: true
        model_dirs:
          description: The model directories, normalised.
          returned: always
          type: list
          elements: str
          sample: [/data/home/pool/work/models]
        hazards:
          description:
            - One entry per finding. C(tool) is lsyncd, rsync, syncthing, unison or tmpfiles; C(kind) is unit,
              process, cron, config or tmpfiles.
            - C(deletes) is true, false, V(startup), V(running) or null (unknown); C(paths) are the places it
              deletes in (C(host) null for this host); C(overlaps_model_dir) is true when C(model_dirs_reached)
              is not empty.
          returned: always
          type: list
          elements: dict
          sample:
            - id: lsyncd:unit:user:pool:lsyncd.service
              tool: lsyncd
              kind: unit
              scope: user
              user: pool
              unit: lsyncd.service
              where: user unit lsyncd.service of pool
              detail: "lsyncd active (running), enabled, Restart=always; sync /data/home/pool/work/ ->
                {host}:/data/home/pool/work/ deletes (not set: lsyncd 2.x default.rsync deletes by default)"
              deletes: true
              paths: [{host: "{host}", path: /data/home/pool/work/}]
              model_dirs_reached: [/data/home/pool/work/models]
              overlaps_model_dir: true
              neutralised: false
        unresolved:
          description: The hazards that reach a model directory and are not neutralised.
          returned: always
          type: list
          elements: dict
        units:
          description:
            - Units of deleting syncers (every lsyncd unit; other tools' units only when they reach a model
              directory), with what acting on them needs.
            - C(mask_path) is where C(systemctl mask) puts its link; C(relocate_from)/C(relocate_to) are set
              when the unit file sits at that very path. C(wants_links) are the enablement links of a user
              unit whose manager is not running. C(configs) are the lsyncd configs the unit uses; C(pids) its
              processes.
            - C(masked_and_stopped) is true for a unit that is masked and not running (nothing is left to stop
              or mask).
            - C(run_in_exclude_mode) is true for an lsyncd unit that was running, enabled or masked (the exclude
              mode starts it), C(enable_in_exclude_mode) for one that was enabled or masked.
          returned: always
          type: list
          elements: dict
          sample:
            - tool: lsyncd
              scope: user
              user: pool
              uid: 1001
              unit: lsyncd.service
              timers: []
              manager_running: true
              active_state: active
              sub_state: running
              unit_file_state: enabled
              masked: false
              masked_and_stopped: false
              restart: always
              fragment_path: /data/home/pool/.config/systemd/user/lsyncd.service
              mask_path: /data/home/pool/.config/systemd/user/lsyncd.service
              relocate_from: /data/home/pool/.config/systemd/user/lsyncd.service
              relocate_to: /data/home/pool/.local/share/systemd/user/lsyncd.service
              wants_links: []
              configs: [/data/home/pool/.lsyncd.conf.lua]
              overlaps_model_dir: true
              neutralised: false
              pids: [574]
              n_restarts: 1
              run_in_exclude_mode: true
              enable_in_exclude_mode: true
        processes:
          description: Deleting syncer processes that no service unit manages (started by hand, cron, a session).
          returned: always
          type: list
          elements: dict
          sample:
            - {tool: lsyncd, pid: 4242, user: pool, argv: [lsyncd, /home/pool/sync.lua], cgroup_unit: cron.service}
        cron_lines:
          description:
            - Crontab lines that run lsyncd, or another deleting syncer that reaches a model directory.
            - C(disabled) when the line is already commented out by the role; C(disabled_line) is the line as the
              role writes it to disable it.
          returned: always
          type: list
          elements: dict
          sample:
            - tool: rsync
              file: /var/spool/cron/crontabs/pool
              line_no: 2
              line: "*/5 * * * * rsync -a --delete /srv/m/ /data/models/"
              disabled_line: "# disabled by llamarpc.cluster.lsyncd_neutralize: */5 * * * * rsync -a --delete ..."
              user: pool
              disabled: false
              overlaps_model_dir: true
        lsyncd_configs:
          description:
            - Every lsyncd config read. C(syncs) as read (C(source), C(target), C(target_parts), C(delete),
              C(delete_reason), C(excludes), C(protection) per model directory reached); C(settings);
              C(problems) of the reader.
            - C(excluded_content) is the exclude-mode rewrite and C(exclude_changes) whether it differs;
              C(rewrite_problems) are the syncs it cannot protect. C(validate) is a syntax check command for
              ansible.builtin.copy (C(luac -p %s)) or null when no Lua compiler is installed.
          returned: always
          type: list
          elements: dict
        summary_lines:
          description: A readable line per finding, unresolved hazards first.
          returned: always
          type: list
          elements: str
          sample:
            - "[HAZARD] user unit lsyncd.service of pool: lsyncd active (running) ... (reaches /data/models)"
        summary:
          description: C(summary_lines) joined with newlines.
          returned: always
          type: str
        warnings:
          description: What could not be scanned (a user manager that did not answer, not root...).
          returned: always
          type: list
          elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync._sync_scan import (
    ARGUMENT_SPEC,
    Scanner,
    validate_params,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    validate_params(module)
    scanner = Scanner(module)
    scanner.scan()
    facts = scanner.facts()
    for warning in facts["warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"sync_hazards": facts})


if __name__ == "__main__":
    main()
