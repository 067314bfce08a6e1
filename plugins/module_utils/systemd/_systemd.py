# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""systemctl for the collection's modules: the system manager or one user's, in one place.

A user's manager listens on a socket in its runtime directory, so ``systemctl --user`` needs
``XDG_RUNTIME_DIR`` pointing there; and it answers only its own user, so root asks it through ``runuser``.
"""

from __future__ import annotations

import os

# Output that parsers can read whatever the host's locale, and never a pager.
ENVIRONMENT = {"LC_ALL": "C", "SYSTEMD_PAGER": ""}
# ActiveState values of a unit that runs or is about to: ``stop`` has something to do.
RUNNING_STATES = frozenset({"active", "activating", "deactivating", "reloading"})
# UnitFileState values ``disable`` undoes (``systemctl is-enabled`` answers 0 and the unit has links to remove;
# a generated unit is an init script that systemd-sysv-install disables).
ENABLED_STATES = frozenset({"enabled", "enabled-runtime", "generated"})
# UnitFileState values where ``enable`` has nothing to add (``systemctl is-enabled`` answers 0).
ENABLE_DONE_STATES = ENABLED_STATES | {"static", "transient"}


def command(systemctl, args, user=None, runuser=None):
    """The argv of ``systemctl ARGS``: for the system manager (``user`` None) or for ``user``'s manager.

    ``user`` is a dict with ``name`` and ``runtime_dir``; ``runuser`` (a path) runs the command as that user,
    which root needs to reach another user's manager.
    """
    if user is None:
        return [systemctl, *args]
    argv = ["env", f"XDG_RUNTIME_DIR={user['runtime_dir']}", systemctl, "--user", *args]
    return [runuser, "-u", user["name"], "--", *argv] if runuser else argv


def parse_properties(text):
    """``systemctl show --property=...`` output of one unit as a dict (``Key=value`` lines)."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


class Systemctl:
    """systemctl run by ``module`` against the system manager, or against ``user``'s manager.

    ``user``: a dict with ``name``, ``uid`` and ``runtime_dir`` (a user scope), or None (the system scope).
    ``required``: fail the module when systemctl (or runuser, when it is needed) is not installed; otherwise
    ``available`` says whether the manager can be asked. ``root``: whether this process is root (default:
    its effective uid). ``failure``: what every failure reported by ``check`` and ``show`` returns besides
    ``msg`` and ``rc`` (for example the actions taken so far).
    """

    def __init__(self, module, user=None, *, required=False, root=None, failure=None):
        self.module = module
        self.user = user
        self.failure = failure if failure is not None else {}
        self.binary = module.get_bin_path("systemctl", required=required)
        root = os.geteuid() == 0 if root is None else root
        self.needs_runuser = user is not None and root and user["uid"] != 0
        self.runuser = module.get_bin_path("runuser", required=required) if self.needs_runuser else None

    @property
    def available(self):
        """Whether systemctl (and runuser, when needed) is installed."""
        return bool(self.binary) and (bool(self.runuser) or not self.needs_runuser)

    def argv(self, *args):
        return command(self.binary, args, self.user, self.runuser)

    def run(self, *args):
        """``(rc, stdout, stderr)`` of ``systemctl ARGS``, whatever the exit code."""
        return self.module.run_command(self.argv(*args), environ_update=ENVIRONMENT)

    def check(self, *args):
        """``systemctl ARGS``; the module fails when it does."""
        rc, out, err = self.run(*args)
        if rc != 0:
            self.module.fail_json(
                msg=f"systemctl {' '.join(args)} failed: {(err or out).strip()}", rc=rc, **self.failure
            )
        return out

    def show(self, unit, properties):
        """The ``properties`` of ``unit`` as a dict of strings; the module fails when systemctl does."""
        rc, out, err = self.run("show", "--property=" + ",".join(properties), unit)
        if rc != 0:
            self.module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}", rc=rc, **self.failure)
        return parse_properties(out)

    def reset_failed(self, unit):
        """Clear ``unit``'s failed state: True when systemctl did, False when the unit is not loaded (a stopped
        unit nothing refers to is unloaded at once: there is no failed state to clear); the module fails on any
        other error."""
        rc, out, err = self.run("reset-failed", "--", unit)
        if rc == 0:
            return True
        if "not loaded" in err:
            return False
        self.module.fail_json(
            msg=f"systemctl reset-failed {unit} failed: {(err or out).strip()}", rc=rc, **self.failure
        )
        return False
