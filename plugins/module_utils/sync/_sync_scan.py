# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host scan of sync_hazard_facts: what on this host could delete files in a model directory.

``Scanner`` judges what ``_sync_host`` reads (systemd units of every manager, processes, crontabs) together
with lsyncd configs, tmpfiles.d, syncthing and unison profiles, and returns the facts. The parsing is in
``_syncers``, the lsyncd judgement in ``_lsyncd``, path overlap in ``_sync_paths``. ``summary_lines`` makes
the readable summary.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import posixpath
import pwd
import re
import stat

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _lsyncd, _sync_host, _sync_paths, _syncers
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import Systemctl

_ENABLED_STATES = {"enabled", "enabled-runtime", "linked", "linked-runtime", "alias", "generated"}

# The options of the scan: sync_hazard_facts' whole spec, and part of sync_hazard's.
ARGUMENT_SPEC = {
    "model_dirs": {"type": "list", "elements": "path", "default": ["/data/models"]},
    "users": {"type": "list", "elements": "str", "default": []},
    "config_paths": {"type": "list", "elements": "path", "default": []},
    "exclude_patterns": {"type": "list", "elements": "str", "default": []},
    "hygiene": {"type": "bool", "default": True},
}


class Scanner:
    """Finds and judges every deleting syncer on the host (``scan``), then returns the facts (``facts``)."""

    def __init__(self, module):
        self.module = module
        params = module.params
        self.model_dirs = [_sync_paths.normalize(p) for p in params["model_dirs"]]
        self.extra_patterns = params["exclude_patterns"]
        self.hygiene = params["hygiene"]
        self.extra_configs = params["config_paths"]
        self.warnings = []
        self.root = os.geteuid() == 0
        luac = module.get_bin_path("luac") or module.get_bin_path("luac5.4") or module.get_bin_path("luac5.3")
        self.validate = f"{luac} -p %s" if luac else None
        self.users = _sync_host.select_users(params["users"], self.root, self.warnings)
        self.boot_time = _sync_host.read_boot_time()
        self.clock_ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.configs = {}  # path -> config record
        self.hazards = []
        self.units = []
        self.processes = []
        self.cron_lines = []

    # -- systemd ----------------------------------------------------------------------------------------

    def systemctl(self, user):
        """systemctl for the system manager (``user`` None) or for ``user``'s manager."""
        return Systemctl(self.module, user, root=self.root)

    # -- lsyncd configs ---------------------------------------------------------------------------------

    def config(self, path, origin):
        """The record of an lsyncd config file (read once)."""
        path = posixpath.normpath(path)
        if path in self.configs:
            if origin not in self.configs[path]["origins"]:
                self.configs[path]["origins"].append(origin)
            return self.configs[path]
        record = {"path": path, "exists": False, "origins": [origin]}
        self.configs[path] = record
        text = _sync_host.read_text(path)
        if text is None:
            record["exists"] = os.path.exists(path)
            record["problems"] = ["unreadable or not a regular file"] if record["exists"] else []
            record["syncs"] = []
            return record
        info = os.stat(path)
        parsed = _lsyncd.read_lsyncd_config(text)
        rewrite = _lsyncd.exclude_rewrite(text, self.model_dirs, self.extra_patterns)
        syncs = []
        for read in parsed["syncs"]:
            sync = {k: v for k, v in read.items() if k != "table"}
            sync["protection"] = _lsyncd.sync_protection(sync, self.model_dirs)
            syncs.append(sync)
        record.update(
            {
                "exists": True,
                "owner": _sync_host.user_name(info.st_uid) or str(info.st_uid),
                "group": _sync_host.group_name(info.st_gid),
                "mode": f"{stat.S_IMODE(info.st_mode):04o}",
                "mtime": info.st_mtime,
                "syncs": syncs,
                "settings": parsed["settings"],
                "problems": parsed["problems"],
                "excluded_content": rewrite["content"],
                "exclude_changes": rewrite["changed"],
                "exclude_report": rewrite["syncs"],
                "rewrite_problems": rewrite["problems"],
                "rewrite_notes": rewrite["notes"],
                "validate": self.validate,
            }
        )
        return record

    def standard_configs(self):
        paths = sorted(p for p in glob.glob("/etc/lsyncd/*") if os.path.isfile(p) and not _sync_host.is_backup(p))
        paths += [p for p in ("/etc/lsyncd.conf", "/etc/lsyncd.conf.lua") if os.path.isfile(p)]
        for user in self.users:
            paths += [f"{user['home']}/.lsyncd.conf.lua", f"{user['home']}/.lsyncd.conf"]
            paths += sorted(p for p in glob.glob(f"{user['home']}/.config/lsyncd/*") if not _sync_host.is_backup(p))
        paths += self.extra_configs
        for path in paths:
            if os.path.exists(path) or path in self.extra_configs:
                self.config(path, "standard location" if path not in self.extra_configs else "config_paths")

    # -- judgement --------------------------------------------------------------------------------------

    def lsyncd_syncs(self, argv_list, cwd, origin):
        """(config records, command-line syncs) of lsyncd command lines."""
        configs = []
        syncs = []
        for argv in argv_list:
            info = _lsyncd.lsyncd_argv(argv)
            syncs.extend(info["syncs"])
            if info["config"]:
                path = info["config"] if info["config"].startswith("/") else posixpath.join(cwd or "/", info["config"])
                configs.append(self.config(path, origin))
        for sync in syncs:
            sync["protection"] = _lsyncd.sync_protection(sync, self.model_dirs)
        return configs, syncs

    def lsyncd_verdict(self, configs, cmdline_syncs, started=None):
        """(reached model dirs, protected?, detail, deletes, paths, stale) of one lsyncd instance."""
        reached = []
        unprotected = []
        details = []
        unreadable = False
        paths = []
        stale = False
        syncs = list(cmdline_syncs)
        for record in configs:
            syncs.extend(record.get("syncs", []))
            if record.get("exists") and started and record.get("mtime", 0) > started + 1:
                stale = True
            if record.get("exists") and not record.get("syncs") and record.get("problems"):
                # A config the reader could not make sense of: assume the worst.
                reached.extend(m for m in self.model_dirs if m not in reached)
                unprotected.append(record["path"])
                details.append(f"{record['path']} could not be read ({'; '.join(record['problems'][:2])})")
                unreadable = True
            elif not record.get("exists"):
                details.append(f"config {record['path']} does not exist (nothing to sync)")
        for sync in syncs:
            parts = sync.get("target_parts") or {}
            paths.append({"host": parts.get("host"), "path": parts.get("path") or sync.get("target")})
            state = (
                "deletes"
                if sync.get("delete")
                else ("does not delete" if sync.get("delete") is False else "may delete")
            )
            details.append(f"sync {sync.get('source')} -> {sync.get('target')} {state} ({sync.get('delete_reason')})")
            for finding in sync.get("protection", []):
                if finding["model_dir"] not in reached:
                    reached.append(finding["model_dir"])
                if not finding["protected"]:
                    unprotected.append(finding["model_dir"])
                elif finding["excluded"]:
                    details.append(f"{finding['model_dir']} excluded")
        if stale:
            details.append("running with an older config (the file changed after lsyncd started)")
        values = [sync.get("delete") for sync in syncs]
        if any(value not in (False, None) for value in values):
            deletes = True
        elif unreadable or None in values:
            deletes = None
        else:
            deletes = False
        return reached, not unprotected and not stale, "; ".join(details), deletes, paths, stale

    def scan(self):
        managers = []
        system = self.systemctl(None)
        if system.available and os.path.isdir("/run/systemd/system"):
            managers.append((None, _sync_host.manager_units(None, system, self.warnings)))
        for user in self.users:
            systemctl = self.systemctl(user)
            if user["manager_running"] and systemctl.available:
                managers.append((user, _sync_host.manager_units(user, systemctl, self.warnings)))
            else:
                managers.append((user, _sync_host.dormant_user_units(user)))
        processes = _sync_host.processes_now(self.boot_time, self.clock_ticks)
        self.standard_configs()
        crons = _sync_host.crontabs()

        claimed = set()
        for user, units in managers:
            for unit in units:
                self.judge_unit(user, unit, processes, claimed)
        for proc in processes:
            if proc["pid"] not in claimed and self.wanted(proc["tool"]):
                self.judge_process(proc)
        for entry in crons:
            self.judge_cron(entry)
        for record in self.configs.values():
            if not any(o.startswith(("unit ", "process ", "cron ")) for o in record["origins"]):
                self.judge_orphan_config(record)
        if self.hygiene:
            self.tmpfiles()
            self.syncthing(managers, processes)
            self.unison(processes)

    def wanted(self, tool):
        return tool is not None and (tool == "lsyncd" or self.hygiene)

    def add_hazard(self, **hazard):
        hazard.setdefault("scope", None)
        hazard.setdefault("user", None)
        hazard.setdefault("unit", None)
        hazard["model_dirs_reached"] = sorted(set(hazard.get("model_dirs_reached") or []))
        hazard["overlaps_model_dir"] = bool(hazard["model_dirs_reached"])
        self.hazards.append(hazard)
        return hazard

    def judge_unit(self, user, unit, processes, claimed):
        name = unit.get("Id", "")
        argv_list = [a for key in ("ExecStart", "ExecStartPre", "ExecStartPost") for a in unit.get(key, [])]
        argv_list += _sync_host.script_commands(argv_list)
        tool = next((t for t in (_sync_host.classify_argv(a) for a in argv_list) if t), None)
        if tool is None and re.match(r"^(syncthing|unison)", name):
            tool = name.split("@")[0].split(".")[0].split("-")[0]
        if not self.wanted(tool):
            return
        scope = "system" if user is None else "user"
        pids = unit_pids(unit, scope, None if user is None else user["uid"], processes)
        claimed.update(pids)
        started = min((p["started"] for p in processes if p["pid"] in pids and p["started"]), default=None)
        active = unit.get("ActiveState", "")
        masked = bool(unit.get("masked")) or unit.get("UnitFileState", "").startswith("masked")
        label = f"system unit {name}" if user is None else f"user unit {name} of {user['name']}"
        file_state = unit.get("UnitFileState") or "no unit file"
        state = f"{active} ({unit.get('SubState', '')}), {file_state}, Restart={unit.get('Restart') or 'no'}"
        configs = []
        if tool == "lsyncd":
            cwd = "/" if user is None else user["home"]
            configs, cmdline = self.lsyncd_syncs(
                [a for a in argv_list if _lsyncd.is_lsyncd_argv(a)], cwd, f"unit {label}"
            )
            reached, protected, detail, deletes, paths, _stale = self.lsyncd_verdict(configs, cmdline, started)
        else:
            reached, deletes, paths, detail = self.other_reach(tool, argv_list, user)
            protected = False
        inactive = active not in {"active", "activating", "reloading", "deactivating"}
        # Neutralised: stopped and masked (nothing can start it), or - lsyncd only - running with a config
        # whose every sync that reaches a model directory is protected (delete off or the directory excluded).
        neutralised = (masked and inactive) or (tool == "lsyncd" and bool(reached) and protected)
        timers = [t for t in unit.get("TriggeredBy", "").split() if t.endswith(".timer")]
        hazard = self.add_hazard(
            id=f"{tool}:unit:{scope}:{user['name'] + ':' if user else ''}{name}",
            tool=tool,
            kind="unit",
            scope=scope,
            user=None if user is None else user["name"],
            unit=name,
            where=label + (f" (timer {', '.join(timers)})" if timers else ""),
            detail=f"{tool} {state}" + (f"; {detail}" if detail else ""),
            deletes=deletes,
            paths=paths,
            model_dirs_reached=reached,
            neutralised=neutralised,
        )
        if tool != "lsyncd" and not hazard["overlaps_model_dir"]:
            return
        record = unit_record(unit, user, hazard, masked=masked, inactive=inactive)
        record.update({"timers": timers, "configs": [c["path"] for c in configs], "pids": sorted(pids)})
        self.units.append(record)

    def judge_process(self, proc):
        tool = proc["tool"]
        label = f"{tool} process {proc['pid']} of {proc['user'] or proc['uid']}"
        where = proc["cgroup"]["unit"] or "no service"
        if tool == "lsyncd":
            configs, cmdline = self.lsyncd_syncs([proc["argv"]], proc["cwd"], f"process {proc['pid']}")
            reached, protected, detail, deletes, paths, _stale = self.lsyncd_verdict(configs, cmdline, proc["started"])
        else:
            reached, deletes, paths, detail = self.other_reach(tool, [proc["argv"]], None)
            protected = False
        hazard = self.add_hazard(
            id=f"{tool}:process:{proc['pid']}",
            tool=tool,
            kind="process",
            user=proc["user"],
            where=f"{label} (in {where}, not managed by a service unit)",
            detail=" ".join(proc["argv"])[:300] + (f"; {detail}" if detail else ""),
            deletes=deletes,
            paths=paths,
            model_dirs_reached=reached,
            neutralised=bool(reached) and protected,
        )
        if tool == "lsyncd" or hazard["overlaps_model_dir"]:
            self.processes.append(
                {
                    "tool": tool,
                    "pid": proc["pid"],
                    "user": proc["user"],
                    "argv": proc["argv"],
                    "cgroup_unit": proc["cgroup"]["unit"],
                    "overlaps_model_dir": hazard["overlaps_model_dir"],
                    "neutralised": hazard["neutralised"],
                }
            )

    def judge_cron(self, entry):
        words = _syncers.shell_words(entry["command"])
        commands = [words, *_sync_host.script_commands([words])]
        tool = next((t for t in (_sync_host.classify_argv(c) for c in commands) if t), None)
        if not self.wanted(tool):
            return
        owner = _sync_host.pwd_entry(entry["user"])
        label = f"{entry['file']}:{entry['line_no']}"
        if tool == "lsyncd":
            configs, cmdline = self.lsyncd_syncs(
                [c for c in commands if _lsyncd.is_lsyncd_argv(c)],
                owner["home"] if owner else "/",
                f"cron {label}",
            )
            reached, protected, detail, deletes, paths, _stale = self.lsyncd_verdict(configs, cmdline)
        else:
            user = self.user_record(entry["user"])
            reached, deletes, paths, detail = self.other_reach(tool, commands, user)
            protected = False
        neutralised = entry["disabled"] or (bool(reached) and protected)
        hazard = self.add_hazard(
            id=f"{tool}:cron:{label}",
            tool=tool,
            kind="cron",
            user=entry["user"],
            where=f"crontab {label}" + (" (disabled)" if entry["disabled"] else ""),
            detail=entry["command"][:300] + (f"; {detail}" if detail else ""),
            deletes=deletes,
            paths=paths,
            model_dirs_reached=reached,
            neutralised=neutralised,
        )
        if tool == "lsyncd" or hazard["overlaps_model_dir"]:
            self.cron_lines.append(
                {
                    "tool": tool,
                    "file": entry["file"],
                    "line_no": entry["line_no"],
                    "line": entry["line"],
                    "disabled_line": _syncers.CRON_DISABLED_MARKER + entry["line"].strip(),
                    "user": entry["user"],
                    "disabled": entry["disabled"],
                    "overlaps_model_dir": hazard["overlaps_model_dir"],
                    "neutralised": neutralised,
                }
            )

    def judge_orphan_config(self, record):
        """An lsyncd config nothing runs right now: reported (it starts with the next lsyncd), not a hazard."""
        if not record.get("exists") or not (record.get("syncs") or record.get("problems")):
            return
        reached, _protected, detail, deletes, paths, _stale = self.lsyncd_verdict([record], [])
        self.add_hazard(
            id=f"lsyncd:config:{record['path']}",
            tool="lsyncd",
            kind="config",
            user=record.get("owner"),
            where=f"lsyncd config {record['path']} (no unit, process or crontab runs it)",
            detail=detail or "no sync",
            deletes=deletes,
            paths=paths,
            model_dirs_reached=reached,
            neutralised=True,
        )

    def other_reach(self, tool, commands, user):
        """(reached, deletes, paths, detail) of an rsync / syncthing / unison command."""
        reached = []
        paths = []
        details = []
        for argv in commands:
            if tool == "rsync":
                found = _syncers.rsync_deletes(argv)
                if not found:
                    continue
                parts = _sync_paths.split_target(found["destination"])
                paths.append({"host": parts.get("host"), "path": parts.get("path")})
                reached.extend(_sync_paths.reached(parts.get("path"), self.model_dirs))
                details.append(f"rsync {' '.join(found['flags'])} into {found['destination']}")
            elif tool == "unison":
                roots = [a for a in argv[1:] if a.startswith(("/", "ssh://", "socket://"))]
                if not roots and user:
                    profile = next((a for a in argv[1:] if not a.startswith("-")), "default")
                    roots = _syncers.unison_roots(_sync_host.read_text(f"{user['home']}/.unison/{profile}.prf") or "")
                for root in roots:
                    host, path = _syncers.unison_root_path(root)
                    paths.append({"host": host, "path": path})
                    reached.extend(_sync_paths.reached(path, self.model_dirs))
                if not roots:
                    reached.extend(self.model_dirs)
                details.append(f"unison roots {', '.join(roots) or 'unknown'} (deletions propagate both ways)")
        if tool == "syncthing":
            details.append("syncthing (see its folders)")
        return sorted(set(reached)), bool(paths) or None, paths, "; ".join(details)

    def user_record(self, name):
        return next((u for u in self.users if u["name"] == name), None)

    def tmpfiles(self):
        chosen = {}
        for directory in ("/usr/lib/tmpfiles.d", "/usr/local/lib/tmpfiles.d", "/run/tmpfiles.d", "/etc/tmpfiles.d"):
            for path in sorted(glob.glob(f"{directory}/*.conf")):
                chosen[posixpath.basename(path)] = path  # later directories override earlier ones
        entries = []
        for path in sorted(chosen.values()):
            for entry in _syncers.parse_tmpfiles(_sync_host.read_text(path) or ""):
                entries.append({**entry, "file": path})
        ignored = [e["path"] for e in entries if e["base_type"] in {"x", "X"}]
        for entry in entries:
            effect = _syncers.tmpfiles_effect(entry)
            if effect is None:
                continue
            reached = []
            for model_dir in self.model_dirs:
                rel = glob_relation(entry["path"], model_dir)
                if rel is None or (rel == "contains" and effect == "ages" and is_ignored(ignored, model_dir)):
                    continue
                reached.append(model_dir)
            if not reached:
                continue  # tmpfiles lines are listed only when they reach a model directory
            self.add_hazard(
                id=f"tmpfiles:{entry['file']}:{entry['line_no']}",
                tool="tmpfiles",
                kind="tmpfiles",
                where=f"tmpfiles {entry['file']}:{entry['line_no']}",
                detail=f"{entry['type']} {entry['path']} age {entry['age']}: {effect} files",
                deletes=True,
                paths=[{"host": None, "path": entry["path"]}],
                model_dirs_reached=reached,
                neutralised=False,
            )

    def syncthing(self, managers, processes):
        running_users = {p["user"] for p in processes if p["tool"] == "syncthing"}
        for user, units in managers:
            for unit in units:
                if unit.get("Id", "").startswith("syncthing") and unit.get("ActiveState") == "active":
                    owner = unit["Id"].partition("@")[2].rpartition(".")[0] if user is None else user["name"]
                    running_users.add(owner)
        homes = [(u["name"], u["home"]) for u in self.users] + [("syncthing", "/var/lib/syncthing")]
        for name, home in homes:
            for path in (f"{home}/.config/syncthing/config.xml", f"{home}/.local/state/syncthing/config.xml"):
                text = _sync_host.read_text(path)
                if text is None:
                    continue
                for folder in _syncers.syncthing_folders(text):
                    folder_path = (
                        folder["path"].replace("~", home, 1) if folder["path"].startswith("~") else folder["path"]
                    )
                    receives = folder["type"] != "sendonly"
                    reached = _sync_paths.reached(folder_path, self.model_dirs) if receives else []
                    self.add_hazard(
                        id=f"syncthing:{path}:{folder['id']}",
                        tool="syncthing",
                        kind="config",
                        user=name,
                        where=f"syncthing folder {folder['id']} in {path}",
                        detail=f"{folder['type']} folder {folder_path}; syncthing "
                        + ("runs" if name in running_users else "is not running")
                        + " (deletions on a peer propagate here)",
                        deletes=receives,
                        paths=[{"host": None, "path": folder_path}],
                        model_dirs_reached=reached,
                        neutralised=name not in running_users,
                    )

    def unison(self, processes):
        running_users = {p["user"] for p in processes if p["tool"] == "unison"}
        for user in self.users:
            for path in sorted(glob.glob(f"{user['home']}/.unison/*.prf")):
                roots = _syncers.unison_roots(_sync_host.read_text(path) or "")
                reached = []
                paths = []
                for root in roots:
                    host, root_path = _syncers.unison_root_path(root)
                    paths.append({"host": host, "path": root_path})
                    reached.extend(_sync_paths.reached(root_path, self.model_dirs) if root_path else [])
                self.add_hazard(
                    id=f"unison:profile:{path}",
                    tool="unison",
                    kind="config",
                    user=user["name"],
                    where=f"unison profile {path}",
                    detail=f"roots {', '.join(roots) or 'none'}; unison "
                    + ("runs" if user["name"] in running_users else "is not running")
                    + " (runs started by hand or cron are listed separately)",
                    deletes=True,
                    paths=paths,
                    model_dirs_reached=reached,
                    neutralised=user["name"] not in running_users,
                )

    def facts(self):
        unresolved = [h for h in self.hazards if h["overlaps_model_dir"] and not h["neutralised"]]
        lines = summary_lines(self.hazards, self.model_dirs)
        configs = sorted(self.configs.values(), key=lambda c: c["path"])
        for record in configs:
            record.pop("mtime", None)
        return {
            "root": self.root,
            "model_dirs": self.model_dirs,
            "hazards": sorted(self.hazards, key=lambda h: h["id"]),
            "unresolved": sorted(unresolved, key=lambda h: h["id"]),
            "units": sorted(self.units, key=lambda u: (u["scope"], u["user"] or "", u["unit"])),
            "processes": sorted(self.processes, key=lambda p: p["pid"]),
            "cron_lines": sorted(self.cron_lines, key=lambda c: (c["file"], c["line_no"])),
            "lsyncd_configs": configs,
            "summary_lines": lines,
            "summary": "\n".join(lines),
            "warnings": self.warnings,
        }


def unit_pids(unit, scope, uid, processes):
    """PIDs running in a unit's cgroup (of that scope and user), and its MainPID."""
    name = unit.get("Id", "")
    pids = sorted(
        p["pid"]
        for p in processes
        if p["cgroup"]["unit"] == name and p["cgroup"]["scope"] == scope and (uid is None or p["cgroup"]["uid"] == uid)
    )
    main_pid = int(unit.get("MainPID") or 0)
    if main_pid and main_pid not in pids:
        pids.append(main_pid)
    return pids


def unit_record(unit, user, hazard, masked, inactive):
    """The ``units`` entry of a judged unit: its state, and where the role masks or relocates it."""
    tool = hazard["tool"]
    name = hazard["unit"]
    mask_dir = "/etc/systemd/system" if user is None else f"{user['home']}/.config/systemd/user"
    low_dir = "/usr/local/lib/systemd/system" if user is None else f"{user['home']}/.local/share/systemd/user"
    fragment = unit.get("FragmentPath") or ""
    relocate = posixpath.dirname(fragment) == mask_dir and (os.path.isfile(fragment) or os.path.islink(fragment))
    if relocate and os.path.islink(fragment) and os.path.realpath(fragment) == "/dev/null":
        relocate = False
    enabled = unit.get("UnitFileState") in _ENABLED_STATES
    return {
        "tool": tool,
        "scope": hazard["scope"],
        "user": None if user is None else user["name"],
        "uid": None if user is None else user["uid"],
        "unit": name,
        "timers": [],
        "manager_running": user is None or user["manager_running"],
        "active_state": unit.get("ActiveState", ""),
        "sub_state": unit.get("SubState", ""),
        "unit_file_state": unit.get("UnitFileState", ""),
        "masked": masked,
        "masked_and_stopped": masked and inactive,
        "restart": unit.get("Restart", ""),
        "n_restarts": int(unit.get("NRestarts") or 0) if str(unit.get("NRestarts", "")).isdigit() else 0,
        "fragment_path": fragment,
        "mask_path": f"{mask_dir}/{name}",
        "relocate_from": fragment if relocate else None,
        "relocate_to": f"{low_dir}/{name}" if relocate else None,
        "wants_links": unit.get("wants_links", []),
        "configs": [],
        "pids": [],
        "overlaps_model_dir": hazard["overlaps_model_dir"],
        "neutralised": hazard["neutralised"],
        "run_in_exclude_mode": tool == "lsyncd" and (not inactive or masked or enabled),
        "enable_in_exclude_mode": tool == "lsyncd" and (masked or enabled),
    }


def glob_relation(pattern, model_dir):
    """relation() for a tmpfiles path that may contain shell globs."""
    if not any(c in pattern for c in "*?["):
        return _sync_paths.relation(pattern, model_dir)
    parts = model_dir.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        ancestor = "/" + "/".join(parts[:depth])
        if fnmatch.fnmatchcase(ancestor, pattern):
            return "same" if depth == len(parts) else "contains"
    return None


def is_ignored(patterns, model_dir):
    """True when an x/X tmpfiles line covers the model directory or one of its ancestors."""
    return any(glob_relation(p, model_dir) in {"same", "contains"} for p in patterns)


def validate_params(module):
    problems = []
    for path in module.params["model_dirs"]:
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append(f"model directory {path!r} is not an absolute path")
        elif _sync_paths.normalize(path) == "/":
            problems.append("the model directory cannot be / itself")
    if not module.params["model_dirs"]:
        problems.append("model_dirs is empty: give at least one directory to protect")
    for name in module.params["users"]:
        try:
            pwd.getpwnam(name)
        except KeyError:
            problems.append(f"user {name!r} does not exist on this host")
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems)


# -- summary ---------------------------------------------------------------------------------------------


def summary_lines(hazards, model_dirs):
    """Readable lines, one per finding, overlapping and unneutralised first."""
    if not hazards:
        return [f"no deleting syncer found that could reach {', '.join(model_dirs)}"]

    def rank(h):
        return (not h["overlaps_model_dir"] or h["neutralised"], not h["overlaps_model_dir"], h["id"])

    lines = []
    for hazard in sorted(hazards, key=rank):
        if hazard["overlaps_model_dir"] and not hazard["neutralised"]:
            state = "HAZARD"
        elif hazard["overlaps_model_dir"]:
            state = "neutralised"
        else:
            state = "elsewhere"
        reach = ", ".join(hazard["model_dirs_reached"]) or "no model directory"
        lines.append(f"[{state}] {hazard['where']}: {hazard['detail']} (reaches {reach})")
    return lines
