# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sync_hazard: scan, decide per mode, act, scan again (the lsyncd_neutralize role's one task).

- ``plan``: the decision table, pure - the scan's facts (``_sync_scan.Scanner.facts``), the mode and
  ``disable_other_syncers`` in; the units to stop and mask, crontab lines to disable, processes to end, configs
  to rewrite and units to start again out. ``unit_off_steps`` and ``unit_on_steps`` are the steps per unit.
- ``Neutralizer``: carries a plan out through ``_systemd.Systemctl`` (user units in their user's manager) and
  plain file operations; every write is skipped in check mode, and each is listed in ``actions`` and in the diff.
- ``run_module``: the whole module - validate, scan, refuse, act, settle, scan again, check.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import pwd
import shutil
import signal
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _sync_host, _sync_scan
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import (
    ENABLE_DONE_STATES,
    ENABLED_STATES,
    RUNNING_STATES,
    Systemctl,
)

MODES = ("audit", "disable", "exclude")
# Seconds a process has to end after SIGTERM.
TERM_WAIT = 15

ARGUMENT_SPEC = {
    "state": {"type": "str", "required": True, "choices": list(MODES)},
    **_sync_scan.ARGUMENT_SPEC,
    "disable_other_syncers": {"type": "bool", "default": False},
    "backup": {"type": "bool", "default": True},
    "settle_seconds": {"type": "int", "default": 3},
}


# -- the decision table -------------------------------------------------------------------------------------


def _chosen(entries, mode, others):
    """lsyncd's entries in the disable mode; other tools' entries that reach a model directory when ``others``."""
    return [
        e
        for e in entries
        if (e["tool"] == "lsyncd" and mode == "disable")
        or (e["tool"] != "lsyncd" and others and e["overlaps_model_dir"])
    ]


def plan(facts, mode, disable_other_syncers):
    """What ``mode`` does on the host the scan ``facts`` describe; empty lists where nothing is left to do.

    ``units_off``: units to stop, disable and mask (already masked and stopped ones are done);
    ``cron_off``: crontab lines to disable (not those already disabled); ``kill``: processes no unit manages,
    to end; ``unprotectable``: why the exclude mode cannot protect some sync (it then refuses to act);
    ``rewrite``: configs the exclude rewrite changes; ``units_on``: lsyncd units the exclude mode runs again,
    each with its ``steps``.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    others = bool(disable_other_syncers) and mode != "audit"
    exclude = mode == "exclude"
    configs = [c for c in facts["lsyncd_configs"] if c.get("exists")] if exclude else []
    rewrite = [c for c in configs if c.get("exclude_changes")]
    rewritten = {c["path"] for c in rewrite}
    units_on = []
    for unit in facts["units"] if exclude else []:
        if unit["tool"] == "lsyncd" and unit["run_in_exclude_mode"]:
            steps = unit_on_steps(unit, rewritten)
            if steps:
                units_on.append({**unit, "steps": steps})
    units_off = []
    for unit in _chosen(facts["units"], mode, others):
        if not unit["masked_and_stopped"]:
            units_off.append({**unit, "steps": unit_off_steps(unit)})
    return {
        "units_off": units_off,
        "cron_off": [c for c in _chosen(facts["cron_lines"], mode, others) if not c["disabled"]],
        "kill": _chosen(facts["processes"], mode, others),
        "unprotectable": [p for c in configs for p in c.get("rewrite_problems") or []],
        "rewrite": rewrite,
        "units_on": units_on,
    }


def work_left(decided):
    """Whether a plan has anything to change (the refusal is not a change)."""
    return any(decided[key] for key in ("units_off", "cron_off", "kill", "rewrite", "units_on"))


def unit_off_steps(unit):
    """Steps that stop a unit for good, in order. Killing is not enough (Restart=always brings it back), so:
    stop and disable it, clear its failed state (lsyncd exits 143 on SIGTERM), stop and disable its timers, move a
    unit file that sits where the mask link must go one level down the search path, mask it. A user unit whose
    manager is not running gets the links systemctl would write: enablement links removed, the mask link made."""
    steps = []
    if unit["manager_running"]:
        if unit["active_state"] in RUNNING_STATES:
            steps.append("stop")
        if unit["unit_file_state"] in ENABLED_STATES:
            steps.append("disable")
        if steps:
            steps.append("reset-failed")
        if unit["timers"]:
            steps.append("timers")
    elif unit["wants_links"]:
        steps.append("unlink-wants")
    if unit["relocate_from"]:
        steps.append("relocate")
    if not unit["masked"]:
        steps.append("mask" if unit["manager_running"] else "mask-link")
    return steps


def unit_on_steps(unit, rewritten):
    """Steps that run an lsyncd unit again in the exclude mode: unmask it, enable it when it was enabled (or
    masked), restart it when one of its configs is rewritten, else start it when it is not running. A user unit
    whose manager is not running is only unmasked (it starts at the next login)."""
    if not unit["manager_running"]:
        return ["unmask-link"] if unit["masked"] else []
    steps = []
    if unit["masked"]:
        steps.append("unmask")
    if unit["enable_in_exclude_mode"] and (unit["masked"] or unit["unit_file_state"] not in ENABLE_DONE_STATES):
        steps.append("enable")
    if set(unit["configs"]) & set(rewritten):
        steps.append("restart")
    elif unit["active_state"] not in {"active", "activating", "reloading"}:
        steps.append("start")
    return steps


def unit_label(unit):
    return f"system unit {unit['unit']}" if unit["scope"] == "system" else f"user unit {unit['unit']} of {unit['user']}"


def lsyncd_down(facts):
    """lsyncd units the exclude mode runs that are not running (a user unit of a manager that is not running is
    left to start at the next login)."""
    return [
        u
        for u in facts["units"]
        if u["tool"] == "lsyncd" and u["run_in_exclude_mode"] and u["manager_running"] and u["active_state"] != "active"
    ]


# -- acting -------------------------------------------------------------------------------------------------


class Neutralizer:
    """Carries out a plan on the host. ``users``: the scan's user records (name, uid, home, runtime_dir).

    systemctl goes through ``_systemd.Systemctl``; files and processes through this file's functions below
    (``move``, ``mask_link``, ``remove``, ``write_file``, ``terminate``...), the seam the unit tests fake.
    """

    def __init__(self, module, users, backup=True):
        self.module = module
        self.check = module.check_mode
        self.users = {u["name"]: u for u in users}
        self.backup = backup
        self.actions = []
        self.diffs = []
        self.managers = {}
        self.settle = False

    def fail(self, msg, **extra):
        self.module.fail_json(msg=msg, actions=self.actions, **extra)

    def act(self, description, function, *args):
        """Record ``description``; run ``function(*args)`` unless in check mode."""
        self.actions.append(description)
        if not self.check:
            function(*args)

    def systemctl(self, unit):
        """systemctl of the unit's manager: the system's, or its user's (through runuser, as that user)."""
        key = unit["user"] if unit["scope"] == "user" else None
        if key not in self.managers:
            user = None
            if key is not None:
                user = self.users.get(key)
                if user is None:
                    self.fail(f"the user manager of {key} was not scanned")
            self.managers[key] = Systemctl(self.module, user, required=True, failure={"actions": self.actions})
        return self.managers[key]

    # -- units off ------------------------------------------------------------------------------------------

    def unit_off(self, unit):
        label = unit_label(unit)
        systemctl = self.systemctl(unit) if unit["manager_running"] else None
        owner = owner_of(unit)
        for step in unit["steps"]:
            if step in {"stop", "disable"}:
                self.act(f"{step} {label}", systemctl.check, step, "--", unit["unit"])
            elif step == "reset-failed" and not self.check:
                systemctl.reset_failed(unit["unit"])
            elif step == "timers":
                self.timers_off(unit, systemctl)
            elif step == "unlink-wants":
                for link in unit["wants_links"]:
                    self.act(f"remove the enablement link {link} of {label}", remove, link)
            elif step == "relocate":
                source, target = unit["relocate_from"], unit["relocate_to"]
                if lexists(target):
                    self.fail(f"cannot move {source} out of the way of the mask of {label}: {target} exists")
                self.act(f"move {source} to {target} (out of the mask's way)", move, source, target, owner)
            elif step == "mask":
                if "relocate" in unit["steps"] and not self.check:
                    systemctl.check("daemon-reload")
                self.act(f"mask {label}", systemctl.check, "mask", "--", unit["unit"])
            elif step == "mask-link":
                self.act(f"mask {label} (link {unit['mask_path']} to /dev/null)", mask_link, unit["mask_path"], owner)
        self.unit_diff(label, unit, {"ActiveState": "inactive", "UnitFileState": "masked"})

    def timers_off(self, unit, systemctl):
        for timer in unit["timers"]:
            shown = systemctl.show(timer, ["ActiveState", "UnitFileState"])
            if shown.get("ActiveState") in RUNNING_STATES:
                self.act(f"stop timer {timer} of {unit_label(unit)}", systemctl.check, "stop", "--", timer)
            if shown.get("UnitFileState") in ENABLED_STATES:
                self.act(f"disable timer {timer} of {unit_label(unit)}", systemctl.check, "disable", "--", timer)

    # -- crontab lines and processes ------------------------------------------------------------------------

    def cron_off(self, lines):
        by_file = {}
        for line in lines:
            by_file.setdefault(line["file"], []).append(line)
        for path, entries in sorted(by_file.items()):
            before = self.read(path)
            after = disable_cron_lines(before, entries)
            if after == before:
                continue
            self.actions.extend(f"disable crontab line {path}:{entry['line_no']}" for entry in entries)
            self.diffs.append({"before_header": path, "after_header": path, "before": before, "after": after})
            if not self.check:
                self.write(path, after)

    def kill(self, processes):
        ended = []
        for proc in processes:
            if not alive(proc["pid"]):
                continue
            self.actions.append(
                f"end {proc['tool']} process {proc['pid']} of {proc['user']} (SIGTERM, no unit runs it)"
            )
            if not self.check and terminate(proc["pid"]):
                ended.append(proc)
        deadline = time.monotonic() + TERM_WAIT
        for proc in ended:
            while alive(proc["pid"]):
                if time.monotonic() > deadline:
                    self.fail(f"{proc['tool']} process {proc['pid']} did not end within {TERM_WAIT} s of SIGTERM")
                time.sleep(0.2)

    # -- exclude mode ---------------------------------------------------------------------------------------

    def rewrite(self, record):
        path = record["path"]
        before = self.read(path)
        after = record["excluded_content"]
        if after == before:
            return
        self.actions.append(f"rewrite {path} with the model directories excluded and delete off")
        self.diffs.append({"before_header": path, "after_header": path, "before": before, "after": after})
        if self.check:
            return
        if self.backup:
            self.module.backup_local(path)
        self.write(path, after, validate=record.get("validate"))

    def unit_on(self, unit):
        label = unit_label(unit)
        if unit["steps"] == ["unmask-link"]:
            self.act(
                f"unmask {label} (remove {unit['mask_path']}; it starts at the next login)", remove, unit["mask_path"]
            )
            return
        systemctl = self.systemctl(unit)
        for step in unit["steps"]:
            # Unmasked, the unit may be enabled already (an init script's generated unit always is).
            if step == "enable" and "unmask" in unit["steps"] and not self.check and self.enabled(systemctl, unit):
                continue
            self.act(f"{step} {label}", systemctl.check, step, "--", unit["unit"])
            self.settle = True  # something changed in a running manager: let lsyncd settle before the scan
        file_state = "enabled" if "enable" in unit["steps"] else unit["unit_file_state"]
        self.unit_diff(label, unit, {"ActiveState": "active", "UnitFileState": file_state})

    @staticmethod
    def enabled(systemctl, unit):
        return systemctl.show(unit["unit"], ["UnitFileState"]).get("UnitFileState") in ENABLE_DONE_STATES

    # -- files ----------------------------------------------------------------------------------------------

    def read(self, path):
        text = _sync_host.read_text(path)
        if text is None:
            self.fail(f"cannot read {path} (gone, unreadable or too large since the scan)")
        return text

    def write(self, path, content, validate=None):
        problem = write_file(self.module, path, content, validate)
        if problem:
            self.fail(problem)

    def unit_diff(self, label, unit, after):
        before = {"ActiveState": unit["active_state"] or "unknown", "UnitFileState": unit["unit_file_state"] or "none"}
        self.diffs.append(
            {
                "before_header": label,
                "after_header": label,
                "before": "".join(f"{k}={v}\n" for k, v in before.items()),
                "after": "".join(f"{k}={v}\n" for k, v in after.items()),
            }
        )


def disable_cron_lines(text, entries):
    """``text`` with each entry's line (``line_no``, ``line``, ``disabled_line``) replaced by its disabled form; a
    line that moved since the scan is found by its text (the last one, as ansible.builtin.lineinfile would)."""
    lines = text.splitlines(keepends=True)
    for entry in entries:
        index = entry["line_no"] - 1
        if not (0 <= index < len(lines) and lines[index].rstrip("\r\n") == entry["line"]):
            found = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == entry["line"]]
            if not found:
                continue
            index = found[-1]
        ending = lines[index][len(lines[index].rstrip("\r\n")) :] or "\n"
        lines[index] = entry["disabled_line"] + ending
    return "".join(lines)


# -- what touches the host (the unit tests' seam) -----------------------------------------------------------


def owner_of(unit):
    """(uid, gid) that new files of the unit's scope belong to: root's, or the unit's user's."""
    if unit["scope"] == "system":
        return 0, 0
    entry = pwd.getpwnam(unit["user"])
    return entry.pw_uid, entry.pw_gid


def lexists(path):
    return os.path.lexists(path)


def remove(path):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def make_dirs(path, owner):
    """Create ``path`` and its missing parents (mode 0755), each owned by ``owner`` (uid, gid)."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        path = posixpath.dirname(path)
    for directory in reversed(missing):
        os.mkdir(directory, 0o755)
        os.chown(directory, *owner)


def move(source, target, owner):
    """Move a unit file (or link) to ``target``, creating its directory for ``owner``; the file keeps its owner."""
    make_dirs(posixpath.dirname(target), owner)
    try:
        os.rename(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        info = os.lstat(source)
        shutil.copy2(source, target, follow_symlinks=False)
        os.lchown(target, info.st_uid, info.st_gid)
        os.unlink(source)


def mask_link(path, owner):
    """The link ``systemctl mask`` writes (to /dev/null), owned by ``owner``."""
    make_dirs(posixpath.dirname(path), owner)
    os.symlink("/dev/null", path)
    os.lchown(path, *owner)


class _Refused(Exception):
    """A new file's validation failed (``write_file`` returns the reason)."""


def write_file(module, path, content, validate=None):
    """Replace ``path`` atomically with ``content``, keeping its owner and mode; ``validate`` (a command with
    ``%s``) checks the new file first. Returns why it did not, or None."""

    def prepare(tmp):
        if validate:
            rc, out, err = module.run_command(validate % tmp)
            if rc != 0:
                raise _Refused(f"the new {path} failed validation ({validate % path}): {(err or out).strip()}")
        info = os.stat(path)
        os.chmod(tmp, info.st_mode & 0o7777)
        os.chown(tmp, info.st_uid, info.st_gid)

    try:
        _atomic.write_atomic(path, content, prepare=prepare, move=module.atomic_move)
    except _Refused as refused:
        return str(refused)
    return None


def alive(pid):
    return os.path.exists(f"/proc/{pid}")


def terminate(pid):
    """SIGTERM to ``pid``: True when sent, False when the process is already gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


# -- the module ---------------------------------------------------------------------------------------------


def scan(module, scanner=None):
    """The scan's facts (``_sync_scan.Scanner``), and the scanner."""
    scanner = scanner or _sync_scan.Scanner(module)
    scanner.scan()
    return scanner, scanner.facts()


def run_module(module):
    """Scan, act in the mode ``state`` says, scan again; the module's result."""
    params = module.params
    mode = params["state"]
    _sync_scan.validate_params(module)
    scanner = _sync_scan.Scanner(module)
    if mode != "audit" and not scanner.root:
        module.fail_json(msg=f"the {mode} mode needs root on the host: run it with become")
    scanner, facts = scan(module, scanner)
    decided = plan(facts, mode, params["disable_other_syncers"])
    if decided["unprotectable"]:
        module.fail_json(
            msg="the exclude mode cannot protect these lsyncd syncs (use the disable mode, or fix the config): "
            + "; ".join(decided["unprotectable"]),
            unprotectable=decided["unprotectable"],
        )
    worker = Neutralizer(module, scanner.users, backup=params["backup"])
    if work_left(decided):
        for scope in ("system", "user"):
            for unit in decided["units_off"]:
                if unit["scope"] == scope:
                    worker.unit_off(unit)
        worker.cron_off(decided["cron_off"])
        worker.kill(decided["kill"])
        for record in decided["rewrite"]:
            worker.rewrite(record)
        for unit in decided["units_on"]:
            worker.unit_on(unit)
        if worker.settle and not module.check_mode:
            time.sleep(max(params["settle_seconds"], 0))
        if worker.actions and not module.check_mode:
            _scanner, facts = scan(module)
    for warning in facts["warnings"]:
        module.warn(warning)
    result = {"changed": bool(worker.actions), "actions": worker.actions, "ansible_facts": {"sync_hazards": facts}}
    if module._diff and worker.diffs:
        result["diff"] = worker.diffs
    down = lsyncd_down(facts) if mode == "exclude" and not module.check_mode else []
    if down:
        module.fail_json(
            msg="lsyncd did not come back after its config was rewritten (check its log and journal): "
            + ", ".join(u["unit"] for u in down),
            **result,
        )
    return result
