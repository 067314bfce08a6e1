#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: managed_files
short_description: Directories and whole files on a host in one call
version_added: 0.2.0
description:
  - Makes the O(directories) and writes the O(files) of one role in a single module run, where
    M(ansible.builtin.file), M(ansible.builtin.copy) and M(ansible.builtin.template) take one run per path (two for
    an unchanged copy or template) - a rerun that changes nothing costs one task, not one per path.
  - A directory is created like M(ansible.builtin.file) with C(state=directory) - every missing component of its path
    with the entry's owner, group and mode; an existing one gets them.
  - A file is written only when its bytes differ from O(files[].content) - to a temporary file beside it, checked by
    O(files[].validate) when given, then renamed into place (a failed validation leaves the file in place as it
    was). Its owner, group and mode are set either way. A file with O(files[].state=absent) is removed when it is
    there.
  - O(users) come first - system users made as M(ansible.builtin.user) makes them with C(system=true) and
    C(create_home=false), each with a group of its name; a user that exists gets the entry's home and shell when they
    differ. Then directories, so a directory may belong to a user of the same call and a file may go into a directory
    of the same call.
  - Entries may carry a O(directories[].label) or O(files[].label) - RV(changed_labels) then says which paths of each
    label changed, so that one call can hold files whose changes call for different actions (a handler's C(when)
    on a label).
  - Render templates on the controller with the C(ansible.builtin.template) lookup and read role files with the
    C(ansible.builtin.file) lookup (C(rstrip=false), to keep their last newline).
author:
  - llamarpc.cluster contributors (@llamarpc)
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  check_mode:
    details: Reports the paths that would be created, written or given other attributes; nothing is validated.
  diff_mode:
    details: For each path that changes, a file's text before and after, or a directory's state and attributes.
options:
  users:
    description: System users to make (C(useradd --system --user-group --no-create-home)), or to give the home and
      shell given (C(usermod)). Listed in RV(changed_paths) as C(user:NAME).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The user's name.
        type: str
        required: true
      home:
        description: Its home directory in the passwd database (not made).
        type: path
        required: true
      shell:
        description: Its login shell.
        type: path
        default: /usr/sbin/nologin
      label:
        description: A name for the kind of entry this is; when the user changes it is listed under this name in
          RV(changed_labels).
        type: str
  directories:
    description: Directories to make (absolute paths).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      owner:
        description: Its owner (name or uid); omitted - left as it is (a new one is the caller's).
        type: str
      group:
        description: Its group (name or gid); omitted - left as it is.
        type: str
      mode:
        description: Its mode, octal as a string (V('0750')) or symbolic; omitted - left as it is (a new one by umask).
        type: raw
      label:
        description: A name for the kind of path this is; when the path changes it is listed under this name in
          RV(changed_labels).
        type: str
  files:
    description: Files to write, each in a directory that exists (or is in O(directories)).
    type: list
    elements: dict
    default: []
    suboptions:
      dest:
        description: The file.
        type: path
        required: true
      state:
        description: V(present) - written with O(files[].content); V(absent) - removed when it is there (a directory
          there fails the task).
        type: str
        choices: [present, absent]
        default: present
      content:
        description: Its whole text (UTF-8); required when O(files[].state=present).
        type: str
      validate:
        description: A command run on the new text before it replaces the file, C(%s) standing for its temporary
          path (split like a shell would, never run by one), for example V(/usr/sbin/nft --check --file %s).
          A command that does not exit 0 fails the task.
        type: str
      owner:
        description: Its owner (name or uid); omitted - left as it is.
        type: str
      group:
        description: Its group (name or gid); omitted - left as it is.
        type: str
      mode:
        description: Its mode, octal as a string (V('0644')) or symbolic; omitted - left as it is.
        type: raw
      label:
        description: A name for the kind of path this is; when the path changes it is listed under this name in
          RV(changed_labels).
        type: str
seealso:
  - module: ansible.builtin.file
  - module: ansible.builtin.copy
  - module: ansible.builtin.template
"""

EXAMPLES = r"""
- name: A service's user, directories, helper script and units
  llamarpc.cluster.managed_files:
    users:
      - {name: example, home: /var/cache/example}
    directories:
      - {path: /var/cache/example, owner: example, group: example, mode: "0750"}
      - {path: /usr/local/lib/example, owner: root, group: root, mode: "0755"}
    files:
      - dest: /usr/local/lib/example/prune.py
        content: "{{ lookup('ansible.builtin.file', 'prune.py', rstrip=false) }}"
        owner: root
        group: root
        mode: "0644"
  register: example_files

- name: Firewall rules, checked by nft before they replace the file
  llamarpc.cluster.managed_files:
    files:
      - dest: /etc/example/rules.nft
        content: "{{ lookup('ansible.builtin.template', 'rules.nft.j2') }}"
        validate: /usr/sbin/nft --check --file %s
        owner: root
        group: root
        mode: "0644"
  notify: example firewall changed

- name: Units and the service's environment, whose changes call for different handlers
  llamarpc.cluster.managed_files:
    files:
      - dest: /etc/systemd/system/example.service
        content: "{{ lookup('ansible.builtin.template', 'example.service.j2') }}"
        label: units
      - dest: /etc/example/example.env
        content: "{{ lookup('ansible.builtin.template', 'example.env.j2') }}"
        label: restart
      - dest: /etc/example/legacy.conf
        state: absent
        label: restart
  register: example_files
  notify: example files changed  # a handler listening to it runs when "'units' in example_files.changed_labels"
"""

RETURN = r"""
changed_paths:
  description: The users (C(user:NAME)), directories and files created, written or given other attributes (in check
    mode, that would be), in the order of the options - users first, then directories.
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/example.service]
changed_labels:
  description: For each label of an entry that changed (in check mode, would), the paths of that label that changed,
    in the order of RV(changed_paths); a label none of whose paths changed is not there.
  returned: always
  type: dict
  sample: {units: [/etc/systemd/system/example.service]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.files._managed_files import ARGUMENT_SPEC, run_module


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
