# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers of what runs deleting syncers, read from text: ``systemctl show`` output, unit files,
``/proc/PID/cgroup``, rsync command lines, crontabs, tmpfiles.d lines, syncthing folders and unison profiles.

Standard library only: this file is shipped to the managed host with the module.
"""

from __future__ import annotations

import posixpath
import re
import shlex

# Marker the role writes in front of a crontab line it disables.
CRON_DISABLED_MARKER = "# disabled by llamarpc.cluster.lsyncd_neutralize: "


RSYNC_DELETE_FLAGS = re.compile(r"^--(?:del|delete(?:-before|-during|-delay|-after|-excluded|-missing-args)?)$")
_RSYNC_REMOVE_SOURCE = "--remove-source-files"
# rsync options whose value is the next word (when not written as --option=value).
_RSYNC_VALUE_OPTIONS = {
    "-e",
    "--rsh",
    "-f",
    "--filter",
    "--exclude",
    "--include",
    "--exclude-from",
    "--include-from",
    "--files-from",
    "--rsync-path",
    "-T",
    "--temp-dir",
    "--backup-dir",
    "--bwlimit",
    "--timeout",
    "--chmod",
    "--chown",
    "--log-file",
    "--password-file",
    "--partial-dir",
    "--compare-dest",
    "--link-dest",
    "--copy-dest",
    "--suffix",
    "--max-size",
    "--min-size",
    "--port",
    "--info",
    "--debug",
    "--out-format",
    "-B",
    "--block-size",
    "-M",
    "--remote-option",
    "--usermap",
    "--groupmap",
    "--sockopts",
    "--contimeout",
}


# -- systemd ---------------------------------------------------------------------------------------------


def parse_systemctl_show(text):
    """Units from ``systemctl show -p ... UNIT...``: one dict per blank-line separated block.

    ``ExecStart`` (and other ``Exec*``) become lists of argv lists (split on whitespace, as systemctl
    prints them).
    """
    units = []
    current = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                units.append(current)
                current = {}
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key.startswith("Exec"):
            current.setdefault(key, []).extend(parse_exec_property(value))
        else:
            current[key] = value
    if current:
        units.append(current)
    return units


def parse_exec_property(value):
    """argv lists from a ``{ path=... ; argv[]=... ; ... }`` property value of ``systemctl show``."""
    commands = []
    for match in re.finditer(r"argv\[\]=(.*?) ; (?:ignore_errors|flags)=", value):
        commands.append(match.group(1).split())
    return commands


def parse_unit_file(text):
    """``{section: {key: [values]}}`` of a unit file (continuation lines joined, an empty value resets)."""
    sections = {}
    section = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
            continue
        if section is None:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip()
        value = value.strip()
        if value == "":
            section[key] = []
        else:
            section.setdefault(key, []).append(value)
    return sections


def unit_exec_argv(value, specifiers=None):
    """argv of one ``ExecStart=`` value of a unit file: prefixes dropped, specifiers expanded."""
    value = value.lstrip()
    while value[:1] in {"-", "@", ":", "+", "!"}:
        value = value[1:]
    for key, replacement in (specifiers or {}).items():
        value = value.replace("%" + key, replacement)
    value = value.replace("%%", "%")
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def cgroup_unit(text):
    """``{scope, uid, unit}`` of the service a process runs in, from ``/proc/PID/cgroup``.

    ``scope`` is system or user; ``unit`` is the innermost ``.service`` (None for session scopes and
    processes outside a service).
    """
    path = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "" and parts[2] not in {"", "/"}:
            path = parts[2]
            break
        if parts[1] == "name=systemd":
            path = parts[2]
    if not path:
        return {"scope": None, "uid": None, "unit": None}
    segments = [s for s in path.split("/") if s]
    user_manager = next((i for i, s in enumerate(segments) if re.fullmatch(r"user@\d+\.service", s)), None)
    if user_manager is not None:
        uid = int(segments[user_manager][5:-8])
        inner = [s for s in segments[user_manager + 1 :] if s.endswith(".service")]
        return {"scope": "user", "uid": uid, "unit": inner[-1] if inner else None}
    services = [s for s in segments if s.endswith(".service")]
    return {"scope": "system", "uid": None, "unit": services[-1] if services else None}


# -- rsync, cron, tmpfiles, syncthing, unison ------------------------------------------------------------


def rsync_deletes(argv):
    """When ``argv`` contains an rsync call that deletes on its destination: {source, destination, flags}."""
    for start, arg in enumerate(argv):
        if posixpath.basename(arg) != "rsync":
            continue
        flags = []
        operands = []
        skip = False
        for item in argv[start + 1 :]:
            if skip:
                skip = False
                continue
            if item in {"&&", "||", ";", "|"} or item.endswith(";"):
                break
            if item in _RSYNC_VALUE_OPTIONS:
                skip = True
                continue
            if item.startswith("--"):
                name = item.split("=", 1)[0]
                if RSYNC_DELETE_FLAGS.match(name) or name == _RSYNC_REMOVE_SOURCE:
                    flags.append(name)
            elif item.startswith("-") and len(item) > 1:
                continue
            else:
                operands.append(item)
        deleting = [f for f in flags if f != _RSYNC_REMOVE_SOURCE]
        if deleting and operands:
            return {"source": operands[:-1], "destination": operands[-1], "flags": deleting}
    return None


def shell_words(command):
    """Words of a shell command line, tolerant of unbalanced quotes."""
    try:
        return shlex.split(command, comments=False)
    except ValueError:
        return command.split()


def parse_crontab(text, system=False, owner=None):
    """Entries of a crontab: ``{line_no, line, user, command, disabled}``.

    ``system`` crontabs (/etc/crontab, /etc/cron.d) have a user field; user crontabs belong to ``owner``.
    Lines disabled by the role (prefixed with CRON_DISABLED_MARKER) come back with ``disabled: True``.
    """
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        disabled = False
        if line.startswith(CRON_DISABLED_MARKER.strip()):
            disabled = True
            line = line[len(CRON_DISABLED_MARKER.strip()) :].strip()
        if not line or line.startswith("#"):
            continue
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*\s*=", line):
            continue  # environment assignment
        fields = line.split(None, 6 if system else 5)
        if line.startswith("@"):
            fields = line.split(None, 2 if system else 1)
            schedule_len = 1
        else:
            schedule_len = 5
        need = schedule_len + (2 if system else 1)
        if len(fields) < need:
            continue
        user = fields[schedule_len] if system else owner
        command = fields[-1] if len(fields) == need else " ".join(fields[need - 1 :])
        entries.append({"line_no": number, "line": raw, "user": user, "command": command, "disabled": disabled})
    return entries


_TMPFILES_CLEANING = {"d", "D", "e", "v", "q", "Q", "C"}
_TMPFILES_REMOVING = {"r", "R"}


def parse_tmpfiles(text):
    """Lines of a tmpfiles.d file: ``{line_no, type, path, age, line}`` (specifier-free paths only)."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = shell_words(line)
        if len(fields) < 2:
            continue
        kind = fields[0].rstrip("!+-=~^$")[:1]
        age = fields[5] if len(fields) > 5 else "-"
        entries.append({"line_no": number, "type": fields[0], "base_type": kind, "path": fields[1], "age": age})
    return entries


def tmpfiles_effect(entry):
    """What a tmpfiles line does to files below its path: 'ages' (cleanup by age), 'empties', 'removes'."""
    kind = entry["base_type"]
    if kind in _TMPFILES_REMOVING:
        return "removes"
    if kind == "D":
        # D: contents removed whenever systemd-tmpfiles runs with --remove (at every boot).
        return "empties"
    if kind in _TMPFILES_CLEANING and entry["age"] not in {"-", "", "0"}:
        return "ages"
    return None


def syncthing_folders(text):
    """``[{id, path, type}]`` of the folders in a syncthing config.xml (regex, no XML parser needed)."""
    folders = []
    for match in re.finditer(r"<folder\b([^>]*)>", text):
        attributes = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if "path" in attributes:
            folders.append(
                {
                    "id": attributes.get("id"),
                    "path": attributes["path"],
                    "type": attributes.get("type", "sendreceive"),
                }
            )
    return folders


def unison_roots(text):
    """Roots of a unison profile (``root = /path`` or ``root = ssh://host//path``)."""
    roots = []
    for line in text.splitlines():
        match = re.match(r"^\s*root\s*=\s*(.+?)\s*$", line)
        if match:
            roots.append(match.group(1))
    return roots


def unison_root_path(root):
    """``(host, path)`` of a unison root: ``ssh://host//abs``, ``ssh://host/rel`` or a local path."""
    match = re.match(r"^(?:ssh|socket|rsh)://(?:[^@/]+@)?([^/]+)/(.*)$", root)
    if match:
        path = match.group(2)
        return match.group(1), path if path.startswith("/") else None
    return None, root
