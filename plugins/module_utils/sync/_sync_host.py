# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What sync_hazard_facts reads on the host: users, systemd units (running managers and dormant user units),
processes that run a deleting syncer, crontabs and the scripts they call. Nothing is judged here (_sync_scan).
"""

from __future__ import annotations

import glob
import grp
import os
import posixpath
import pwd
import re
import stat

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _lsyncd, _syncers

_SYSTEM_UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/run/systemd/generator.early",
    "/run/systemd/generator",
    "/run/systemd/generator.late",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
_GLOBAL_USER_UNIT_DIRS = ("/etc/systemd/user", "/usr/local/lib/systemd/user", "/usr/lib/systemd/user")
_SHOW_PROPERTIES = (
    "Id",
    "ExecStart",
    "ExecStartPre",
    "ExecStartPost",
    "FragmentPath",
    "UnitFileState",
    "LoadState",
    "ActiveState",
    "SubState",
    "Restart",
    "MainPID",
    "NRestarts",
    "TriggeredBy",
)
_MAX_SCRIPT_BYTES = 64 * 1024
_CHUNK = 150


def read_text(path, limit=_lsyncd.MAX_CONFIG_BYTES):
    """File content as text (None if unreadable, not a regular file or larger than ``limit``)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, TypeError):
        return None


def select_users(names, root, warnings):
    """The users whose units, crontabs and configs are scanned (only the current user when not root)."""
    if not root:
        warnings.append("not root: only the current user's units and readable files were scanned")
    if names:
        chosen = [pwd.getpwnam(name) for name in names]
    else:
        lingering = set(os.listdir("/var/lib/systemd/linger")) if os.path.isdir("/var/lib/systemd/linger") else set()
        running = {int(d) for d in os.listdir("/run/user") if d.isdigit()} if os.path.isdir("/run/user") else set()
        chosen = [
            p
            for p in pwd.getpwall()
            if p.pw_uid == 0 or 1000 <= p.pw_uid < 65534 or p.pw_name in lingering or p.pw_uid in running
        ]
    if not root:
        chosen = [p for p in chosen if p.pw_uid == os.geteuid()]
    users = []
    seen = set()
    for entry in chosen:
        if entry.pw_uid in seen:
            continue
        seen.add(entry.pw_uid)
        runtime = f"/run/user/{entry.pw_uid}"
        users.append(
            {
                "name": entry.pw_name,
                "uid": entry.pw_uid,
                "home": entry.pw_dir,
                "runtime_dir": runtime,
                "manager_running": os.path.exists(f"{runtime}/systemd/private"),
                "lingering": os.path.exists(f"/var/lib/systemd/linger/{entry.pw_name}"),
            }
        )
    return users


def read_boot_time():
    """Boot time (epoch seconds) from /proc/stat (0 when unknown)."""
    text = read_text("/proc/stat", limit=1 << 22) or ""
    match = re.search(r"^btime (\d+)$", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def manager_units(user, systemctl, warnings):
    """Units of one manager (None = system) as dicts from ``systemctl show``."""
    where = "the system manager" if user is None else f"the user manager of {user['name']}"
    names = set()
    rc, out, err = systemctl.run("list-unit-files", "--type=service", "--no-legend", "--no-pager")
    if rc != 0:
        warnings.append(f"could not list the units of {where}: {err.strip() or out.strip()}")
        return []
    masked = set()
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0].endswith(".service") and "@." not in fields[0]:
            names.add(fields[0])
            if len(fields) > 1 and fields[1].startswith("masked"):
                masked.add(fields[0])
    rc, out, _err = systemctl.run("list-units", "--all", "--type=service", "--no-legend", "--no-pager", "--plain")
    for line in out.splitlines() if rc == 0 else []:
        fields = line.replace("\u25cf", " ").split()
        if fields and fields[0].endswith(".service"):
            names.add(fields[0])
    units = []
    ordered = sorted(names)
    for start in range(0, len(ordered), _CHUNK):
        chunk = ordered[start : start + _CHUNK]
        args = ["show", "--no-pager", "-p", ",".join(_SHOW_PROPERTIES), "--", *chunk]
        rc, out, err = systemctl.run(*args)
        if rc != 0:
            warnings.append(f"systemctl show failed for {where}: {err.strip()}")
            continue
        units.extend(_syncers.parse_systemctl_show(out))
    for unit in units:
        if unit.get("Id") in masked or unit.get("LoadState") == "masked":
            unit["masked"] = True
            fill_from_disk(unit, user)
    return units


def unit_dirs(user):
    """Unit directories of the system manager (``user`` None) or of ``user``'s manager, first wins."""
    if user is None:
        return list(_SYSTEM_UNIT_DIRS)
    home = user["home"]
    return [
        f"{home}/.config/systemd/user",
        "/etc/systemd/user",
        f"{user['runtime_dir']}/systemd/user",
        f"{home}/.local/share/systemd/user",
        *_GLOBAL_USER_UNIT_DIRS[1:],
    ]


def specifiers(user):
    """The unit file specifiers (%h, %u, %U, %t) that ExecStart lines of this manager may use."""
    if user is None:
        return {"h": "/root", "u": "root", "U": "0", "t": "/run"}
    return {"h": user["home"], "u": user["name"], "U": str(user["uid"]), "t": user["runtime_dir"]}


def fill_from_disk(unit, user):
    """A masked unit shows no ExecStart: read it from the unit file below the mask."""
    name = unit.get("Id")
    for directory in unit_dirs(user):
        path = posixpath.join(directory, name)
        if os.path.islink(path) and os.path.realpath(path) == "/dev/null":
            continue
        text = read_text(path)
        if text is None:
            continue
        service = _syncers.parse_unit_file(text).get("Service", {})
        unit["ExecStart"] = [_syncers.unit_exec_argv(v, specifiers(user)) for v in service.get("ExecStart", [])]
        unit["FragmentPath"] = path
        unit["Restart"] = (service.get("Restart") or [""])[-1]
        return
    script = f"/etc/init.d/{name[: -len('.service')]}"
    if user is None and name.endswith(".service") and os.path.isfile(script):
        # systemd-sysv-generator writes no unit for a masked init script: the script is what would run.
        unit["ExecStart"] = [[script, "start"]]
        unit["FragmentPath"] = ""


def dormant_user_units(user):
    """User units on disk of a user whose manager is not running (they start at the next login)."""
    units = []
    config_dir = f"{user['home']}/.config/systemd/user"
    for directory in (config_dir, f"{user['home']}/.local/share/systemd/user"):
        for path in sorted(glob.glob(f"{directory}/*.service")):
            name = posixpath.basename(path)
            if os.path.islink(path) and os.path.realpath(path) == "/dev/null":
                continue
            text = read_text(path)
            if text is None or any(u["Id"] == name for u in units):
                continue
            service = _syncers.parse_unit_file(text).get("Service", {})
            mask = f"{config_dir}/{name}"
            masked = os.path.islink(mask) and os.path.realpath(mask) == "/dev/null"
            wants = sorted(
                link
                for link in glob.glob(f"{config_dir}/*.wants/{name}") + glob.glob(f"{config_dir}/*.requires/{name}")
                if os.path.islink(link)
            )
            units.append(
                {
                    "Id": name,
                    "ExecStart": [_syncers.unit_exec_argv(v, specifiers(user)) for v in service.get("ExecStart", [])],
                    "FragmentPath": path,
                    "UnitFileState": "masked" if masked else ("enabled" if wants else "disabled"),
                    "ActiveState": "inactive",
                    "SubState": "dead",
                    "Restart": (service.get("Restart") or ["no"])[-1],
                    "MainPID": "0",
                    "TriggeredBy": "",
                    "masked": masked,
                    "wants_links": wants,
                }
            )
    return units


def processes_now(boot_time, clock_ticks):
    """Processes that run a deleting syncer: argv, user, cgroup unit, working directory and start time."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        base = f"/proc/{entry}"
        try:
            with open(f"{base}/cmdline", "rb") as handle:
                raw = handle.read(65536)
        except OSError:
            continue
        argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
        if not argv:
            continue
        tool = classify_argv(argv)
        if tool is None:
            continue
        status = read_text(f"{base}/status", limit=1 << 16) or ""
        uid_match = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
        uid = int(uid_match.group(1)) if uid_match else None
        cgroup = _syncers.cgroup_unit(read_text(f"{base}/cgroup", limit=1 << 16) or "")
        try:
            cwd = os.readlink(f"{base}/cwd")
        except OSError:
            cwd = None
        found.append(
            {
                "pid": int(entry),
                "argv": argv,
                "tool": tool,
                "uid": uid,
                "user": user_name(uid),
                "cgroup": cgroup,
                "cwd": cwd,
                "started": process_start(entry, boot_time, clock_ticks),
            }
        )
    return found


def process_start(pid, boot_time, clock_ticks):
    """Start time (epoch seconds) of a process, from /proc/PID/stat and the boot time."""
    text = read_text(f"/proc/{pid}/stat", limit=1 << 16) or ""
    fields = text.rpartition(")")[2].split()
    if len(fields) < 20 or not boot_time:
        return None
    return boot_time + int(fields[19]) / float(clock_ticks)


def crontabs():
    """Entries of the system crontabs and of every user crontab, with the file they are in."""
    entries = []
    system = ["/etc/crontab"] + sorted(glob.glob("/etc/cron.d/*"))
    for path in system:
        for entry in _syncers.parse_crontab(read_text(path) or "", system=True):
            entries.append({**entry, "file": path})
    for path in sorted(glob.glob("/var/spool/cron/crontabs/*")):
        owner = posixpath.basename(path)
        for entry in _syncers.parse_crontab(read_text(path) or "", owner=owner):
            entries.append({**entry, "file": path})
    return entries


def script_commands(commands):
    """Commands inside small shell scripts run by ``commands`` (a unit's ExecStart, a cron line)."""
    found = []
    for argv in commands:
        for word in argv[:3]:
            if not word.startswith("/") or posixpath.basename(word) in {"sh", "bash", "dash", "env"}:
                continue
            text = read_text(word, limit=_MAX_SCRIPT_BYTES)
            if text is None or "\0" in text:
                continue
            for raw in text.splitlines():
                line = raw.strip()
                if line and not line.startswith("#") and classify_argv(_syncers.shell_words(line)):
                    found.append(_syncers.shell_words(line))
    return found


def is_backup(path):
    """Editor, dpkg and ansible backup copies are not configs anything runs."""
    return path.endswith(("~", ".dpkg-old", ".dpkg-dist", ".dpkg-new", ".bak", ".orig"))


def classify_argv(argv):
    """Which deleting syncer a command line runs: lsyncd, rsync (with a delete option), syncthing, unison."""
    if _lsyncd.is_lsyncd_argv(argv):
        return "lsyncd"
    if _syncers.rsync_deletes(argv):
        return "rsync"
    for word in argv[:3]:
        base = posixpath.basename(word)
        if base == "syncthing":
            return "syncthing"
        if base == "unison" or base.startswith("unison-"):
            return "unison"
    return None


def group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def pwd_entry(name):
    try:
        entry = pwd.getpwnam(name)
    except (KeyError, TypeError):
        return None
    return {"name": entry.pw_name, "home": entry.pw_dir, "uid": entry.pw_uid}
