# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Directories and whole files on a host in one module call: what the file, copy and template modules do for one path
each (two module runs per unchanged file), for a list of them.

A directory is made like ``file state=directory``: every missing component of its path is created with its owner,
group and mode. A file is written only when its bytes differ - to a temporary file beside it, checked by its
``validate`` command when given, then renamed into place (fsynced before, its directory after: ``_atomic``) - and its
owner, group and mode are set either way. A file with ``state: absent`` is removed (its directory fsynced after).

System ``users`` come first, made like ``ansible.builtin.user`` with ``system: true`` and ``create_home: false`` (a
group of the same name with each): a directory of the same call may belong to one. The passwd database is read for
each (``pwd``); ``useradd`` or ``usermod`` run only when the user is missing or its home or shell differ.

Each entry may carry a ``label``: the result's ``changed_labels`` maps every label to the paths of that label that
changed, so that one call can hold files whose changes call for different actions (a unit wants a daemon-reload, a
script a restart) and the caller acts on each kind by its label. A user is listed as ``user:<name>``.
"""

from __future__ import annotations

import os
import pwd
import shlex

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic

ENTRY_OPTIONS = {
    "owner": {"type": "str"},
    "group": {"type": "str"},
    "mode": {"type": "raw"},
    "label": {"type": "str"},
}

ARGUMENT_SPEC = {
    "users": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "name": {"type": "str", "required": True},
            "home": {"type": "path", "required": True},
            "shell": {"type": "path", "default": "/usr/sbin/nologin"},
            "label": {"type": "str"},
        },
    },
    "directories": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {"path": {"type": "path", "required": True}, **ENTRY_OPTIONS},
    },
    "files": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "dest": {"type": "path", "required": True},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
            "content": {"type": "str"},
            "validate": {"type": "str"},
            **ENTRY_OPTIONS,
        },
        "required_if": [("state", "present", ("content",))],
    },
}


def file_args(path, entry):
    """What AnsibleModule.set_fs_attributes_if_different takes for ``path`` with ``entry``'s owner, group and mode."""
    return {
        "path": path,
        "owner": entry.get("owner"),
        "group": entry.get("group"),
        "mode": entry.get("mode"),
        "secontext": [None, None, None],
        "attributes": None,
    }


def missing_components(path):
    """The components of an absolute ``path`` that do not exist, outermost first (ensure_directory of ``file``)."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.insert(0, current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return missing


def read_bytes(path):
    """The bytes of a regular file at ``path`` (symlinks followed), or None when there is none."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        return handle.read()


def ensure_directory(module, entry, report):
    """Create ``entry['path']`` (and every missing parent, each with the entry's attributes); set its attributes."""
    path = entry["path"]
    if os.path.lexists(path) and not os.path.isdir(path):
        module.fail_json(msg=f"{path} exists and is not a directory: move it away or choose another path")
    created = missing_components(path)
    if created:
        report.add(
            path, {"before": {"path": path, "state": "absent"}, "after": {"path": path, "state": "directory"}}, entry
        )
        if module.check_mode:
            return
        for component in created:
            try:
                os.mkdir(component)
            except FileExistsError:
                continue  # made meanwhile (another task, a parallel run): its attributes are set below
            except OSError as error:
                module.fail_json(msg=f"cannot create the directory {component}: {error}")
            module.set_fs_attributes_if_different(file_args(component, entry), True, expand=False)
        return
    diff = {"before": {"path": path}, "after": {"path": path}}
    if module.set_fs_attributes_if_different(file_args(os.path.realpath(path), entry), False, diff, expand=False):
        report.add(path, diff, entry)


def remove_file(module, entry, report):
    """Remove ``entry['dest']`` when it exists (a file or a link; a directory fails), its directory fsynced after."""
    dest = entry["dest"]
    if os.path.isdir(dest) and not os.path.islink(dest):
        module.fail_json(msg=f"{dest} is a directory: state=absent removes files only")
    if not os.path.lexists(dest):
        return
    report.add(dest, {"before": {"path": dest, "state": "file"}, "after": {"path": dest, "state": "absent"}}, entry)
    if module.check_mode:
        return
    try:
        os.unlink(dest)
    except FileNotFoundError:
        return  # removed meanwhile
    except OSError as error:
        module.fail_json(msg=f"cannot remove {dest}: {error}")
    _atomic.fsync_dir(os.path.dirname(os.path.abspath(dest)))


def write_file(module, entry, report):
    """Give ``entry['dest']`` the bytes of ``entry['content']`` (validated first) and the entry's attributes."""
    dest = entry["dest"]
    wanted = entry["content"].encode("utf-8")
    if os.path.isdir(dest):
        module.fail_json(msg=f"{dest} is a directory: a file cannot replace it")
    current = read_bytes(dest)
    if current == wanted:
        diff = {"before": {"path": dest}, "after": {"path": dest}}
        if module.set_fs_attributes_if_different(file_args(os.path.realpath(dest), entry), False, diff, expand=False):
            report.add(dest, diff, entry)
        return
    report.add(
        dest,
        {
            "before_header": dest,
            "after_header": dest,
            "before": "" if current is None else current.decode("utf-8", errors="replace"),
            "after": entry["content"],
        },
        entry,
    )
    if module.check_mode:
        return
    directory = os.path.dirname(dest)
    if not os.path.isdir(directory):
        module.fail_json(msg=f"cannot write {dest}: its directory {directory} does not exist")
    validate = entry.get("validate")
    _atomic.write_atomic(
        os.path.realpath(dest),
        wanted,
        prepare=(lambda temporary: check_validates(module, dest, validate, temporary)) if validate else None,
        move=module.atomic_move,
    )
    module.set_fs_attributes_if_different(file_args(os.path.realpath(dest), entry), True, expand=False)


def check_validates(module, dest, validate, temporary):
    """Run ``validate`` (``%s`` = the new file) and fail, naming ``dest``, when it does not exit 0."""
    if "%s" not in validate:
        module.fail_json(msg=f"validate for {dest} must contain %s (the new file's path): {validate!r}")
    argv = [temporary if word == "%s" else word.replace("%s", temporary) for word in shlex.split(validate)]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(
            msg=f"the new {dest} failed its validation ({validate}, rc={rc}); the file in place is unchanged",
            stdout=out,
            stderr=err,
        )


class Report:
    """The paths that changed (or would) in order, each with its diff, and by the label of their entry."""

    def __init__(self):
        self.changed = []
        self.diffs = []
        self.labels = {}

    def add(self, path, diff, entry):
        if path not in self.changed:
            self.changed.append(path)
            self.diffs.append(diff)
        label = entry.get("label")
        if label is not None and path not in self.labels.setdefault(label, []):
            self.labels[label].append(path)


def ensure_user(module, entry, report):
    """The system user ``entry['name']`` exists (with a group of its name) with ``entry``'s home and shell; no home
    directory is made."""
    name, home, shell = entry["name"], entry["home"], entry["shell"]
    try:
        current = pwd.getpwnam(name)
    except KeyError:
        current = None
    if current is None:
        before = {"user": name, "state": "absent"}
        argv = [module.get_bin_path("useradd", required=True), "--system", "--user-group", "--no-create-home"]
        argv += ["--home-dir", home, "--shell", shell, name]
    else:
        before = {"user": name, "home": current.pw_dir, "shell": current.pw_shell}
        options = (["--home", home] if current.pw_dir != home else []) + (
            ["--shell", shell] if current.pw_shell != shell else []
        )
        if not options:
            return
        argv = [module.get_bin_path("usermod", required=True), *options, name]
    report.add(f"user:{name}", {"before": before, "after": {"user": name, "home": home, "shell": shell}}, entry)
    if module.check_mode:
        return
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"{argv[0]} failed for the user {name} (rc={rc}): {(err or out).strip()}", rc=rc)


def run_module(module):
    """Users first (a directory may belong to one), then directories (a file may go into one of them), then the files;
    the module's result."""
    report = Report()
    for entry in module.params["users"]:
        ensure_user(module, entry, report)
    for entry in module.params["directories"]:
        ensure_directory(module, entry, report)
    for entry in module.params["files"]:
        (remove_file if entry["state"] == "absent" else write_file)(module, entry, report)
    result = {"changed": bool(report.changed), "changed_paths": report.changed, "changed_labels": report.labels}
    if module._diff:
        result["diff"] = report.diffs
    return result
