# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The serving host's side of an SSHFS export (the role sshfs_shard_export).

``sshfs_export_preflight``: what sshd and the export user need of the exported directory and of the chroot
(``problems`` is pure over a stat function; ``preflight`` runs it). ``sshfs_export_view``: the read-only bind mount (a
systemd mount unit) that shows the exported directory inside the chroot (``decide`` is pure; ``run`` reads the unit,
the two directories and the mount table, acts through ``_systemd`` and checks that the view is read-only)."""

from __future__ import annotations

import os
import pwd
import stat as stat_module

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sshfs
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import Systemctl

ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "src": {"type": "path", "required": True},
    "unit_changed": {"type": "bool", "default": False},
}


def unit_of(path):
    """The mount unit systemd names after its ``Where=`` path."""
    return f"{_sshfs.systemd_escape_path(os.path.normpath(path))}.mount"


def decide(unit, src_id, view_id, unit_changed=False):
    """The systemctl actions that mount the view as its unit says, and why: ``(actions, reasons)``.

    ``unit``: ``{"enabled", "active"}``; ``src_id`` / ``view_id``: ``(st_dev, st_ino)`` of the exported directory and
    of the view (None: it does not exist yet; systemd makes the mount point). A view that shows another directory
    than the exported one (the directory was removed and made again: the old bind still shows the removed one; or
    the bare mount point: not mounted) is mounted anew, like a changed unit.
    """
    actions, reasons = [], []
    if unit_changed:
        actions.append("daemon-reload")
        reasons.append("the unit changed")
    if not unit["enabled"]:
        actions.append("enable")
        reasons.append("the view is not mounted at boot")
    stale = view_id is not None and view_id != src_id
    if unit_changed or stale:
        actions.append("restart")
        if stale:
            reasons.append("the view shows another directory than the exported one")
    elif not unit["active"]:
        actions.append("start")
        reasons.append("the view is not mounted")
    return actions, reasons


def _identity(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def _mount_options(path):
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        entry = _sshfs.find_mount(_sshfs.parse_mountinfo(handle.read()), path)
    return entry["options"] if entry else None


def run(module):
    p = module.params
    path = os.path.normpath(p["path"])
    unit = unit_of(path)
    result = {"changed": False, "actions": [], "reasons": [], "unit": unit}
    if module.check_mode and p["unit_changed"]:
        # A unit not written yet (check mode) cannot be asked about: the unit's change is the report.
        result.update(changed=True, actions=["daemon-reload", "restart"], reasons=["the unit changed"])
        module.exit_json(**result)
    systemctl = Systemctl(module, required=True, failure=result)
    if p["unit_changed"]:
        # Before asking about the unit: systemd answers from the unit it has loaded.
        systemctl.check("daemon-reload")
    properties = systemctl.show(unit, ["LoadState", "ActiveState", "UnitFileState"])
    if properties.get("LoadState") == "not-found" and not p["unit_changed"]:
        module.fail_json(msg=f"{unit} is not installed: write it first (and set unit_changed)", **result)
    state = {
        "enabled": properties.get("UnitFileState") in ("enabled", "enabled-runtime"),
        "active": properties.get("ActiveState") == "active",
    }
    actions, reasons = decide(state, _identity(p["src"]), _identity(path), p["unit_changed"])
    result.update(changed=bool(actions), actions=actions, reasons=reasons)
    if module._diff:
        result["diff"] = {"before": dict(state), "after": {"enabled": True, "active": True}}
    if module.check_mode:
        module.exit_json(**result)
    for action in actions:
        if action != "daemon-reload":  # done above
            systemctl.check(action, unit)
    options = _mount_options(path)
    result["options"] = options
    if not options or "ro" not in options:
        module.fail_json(
            msg=f"{path} is not a read-only mount ({','.join(options) if options else 'not mounted'}); "
            f"see journalctl -u {unit}",
            **result,
        )
    module.exit_json(**result)


PREFLIGHT_ARGUMENT_SPEC = {
    "dir": {"type": "path", "required": True},
    "root": {"type": "path", "required": True},
    "user": {"type": "str", "required": True},
}


def _lstat(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _owner(st):
    try:
        return pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        return str(st.st_uid)


def _mode(st):
    return f"{stat_module.S_IMODE(st.st_mode):04o}"


def chain(root):
    """The export root and every directory above it, from ``/`` down."""
    parts = [part for part in os.path.normpath(root).split("/") if part]
    return ["/" + "/".join(parts[:index]) for index in range(len(parts) + 1)]


def problems(directory, root, user, lstat=_lstat, owner=_owner):
    """What stops the export, one message per rule broken (empty: nothing). Neither path is changed by the role.

    The exported directory must be a directory that others may read and search (the export user is nobody's group
    member). The export root and each directory above it must be a directory owned by root and writable by nobody
    else, or not exist yet (the role makes it): sshd refuses an SFTP chroot otherwise.
    """
    found = []
    st = lstat(directory)
    need = (
        f"{directory} must be an existing directory that others may read and search: the export user {user} reads "
        "it. Its owner can make it so with chmod o+rx; this role does not change it"
    )
    if st is None:
        found.append(f"{need} (found missing).")
    elif not stat_module.S_ISDIR(st.st_mode):
        found.append(f"{need} (found not a directory, owner {owner(st)}, mode {_mode(st)}).")
    elif not (st.st_mode & stat_module.S_IROTH and st.st_mode & stat_module.S_IXOTH):
        found.append(f"{need} (found owner {owner(st)}, mode {_mode(st)}).")
    for path in chain(root):
        st = lstat(path)
        if st is None:
            continue
        why = "sshd refuses an SFTP chroot otherwise"
        if not stat_module.S_ISDIR(st.st_mode):
            found.append(f"{path} must be a directory, or not exist yet: {why} (found not a directory).")
        elif st.st_uid != 0:
            found.append(f"{path} must be owned by root: {why} (found owner uid {st.st_uid}, mode {_mode(st)}).")
        elif st.st_mode & (stat_module.S_IWGRP | stat_module.S_IWOTH):
            found.append(f"{path} must be writable by root alone: {why} (found mode {_mode(st)}).")
    return found


def preflight(module):
    p = module.params
    found = problems(p["dir"], p["root"], p["user"], lstat=_lstat)
    if found:
        module.fail_json(msg=" ".join(found), problems=found)
    module.exit_json(changed=False, problems=[])
