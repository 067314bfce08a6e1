# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Several system units running and enabled at boot in one module call (what ansible.builtin.systemd_service with
``state: started`` and ``enabled: true`` does for one unit), with a failed enable or start tried again; and others
stopped and disabled in the same call (``state: stopped``, ``enabled: false``).

A start right after ``daemon-reload`` on a loaded host has failed with 219/CGROUP (systemd could not attach the new
process to the unit's cgroup) and succeeded when tried again: each action is tried up to ``retries`` more times.
"""

from __future__ import annotations

import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import (
    ENABLED_STATES,
    RUNNING_STATES,
    Systemctl,
)

ARGUMENT_SPEC = {
    "units": {"type": "list", "elements": "str", "required": True},
    "stopped": {"type": "list", "elements": "str", "default": []},
    "retries": {"type": "int", "default": 3},
    "delay": {"type": "float", "default": 2.0},
}

# What systemd_service counts as running (it does not start an activating unit again).
RUNNING = ("active", "activating")
PROPERTIES = ("LoadState", "ActiveState")


def unit_state(systemctl, unit):
    """``{"loaded", "active", "enabled"}`` of ``unit``; the module fails for a unit systemd does not know."""
    shown = systemctl.show(unit, PROPERTIES)
    if shown.get("LoadState") == "not-found":
        systemctl.module.fail_json(msg=f"Could not find the requested unit {unit}: is its unit file in place?")
    # is-enabled exits 0 for enabled, enabled-runtime, static, alias, indirect, generated and transient units.
    rc, out, _err = systemctl.run("is-enabled", unit)
    return {"active": shown.get("ActiveState", "unknown"), "enabled": rc == 0, "unit_file": out.strip()}


def actions_for(state):
    """The systemctl verbs a unit in ``state`` needs, in systemd_service's order: enable, then start."""
    actions = []
    if not state["enabled"]:
        actions.append("enable")
    if state["active"] not in RUNNING:
        actions.append("start")
    return actions


def stop_actions_for(state):
    """The systemctl verbs a unit to stop in ``state`` needs, in systemd_service's order: disable (only what
    ``disable`` undoes: not a static unit), then stop (a unit that runs or is about to)."""
    actions = []
    if state["unit_file"] in ENABLED_STATES:
        actions.append("disable")
    if state["active"] in RUNNING_STATES:
        actions.append("stop")
    return actions


def tried(systemctl, verb, unit, retries, delay, sleep=time.sleep):
    """``systemctl VERB UNIT``, tried again ``retries`` times after a failure, ``delay`` seconds apart:
    ``(rc, tries, said)`` of the last try (``said``: systemctl's message)."""
    tries = 0
    while True:
        rc, out, err = systemctl.run(verb, unit)
        if rc == 0 or tries == retries:
            return rc, tries, (err or out).strip()
        sleep(delay)
        tries += 1


def attempt(systemctl, verb, unit, retries, delay, sleep=time.sleep):
    """``systemctl VERB UNIT``, tried again ``retries`` times after a failure; the module fails after the last."""
    rc, tries, said = tried(systemctl, verb, unit, retries, delay, sleep)
    if rc == 0:
        return tries
    systemctl.module.fail_json(
        msg=f"systemctl {verb} {unit} failed ({retries + 1} attempts): {said}; "
        f"see systemctl status {unit} and journalctl -u {unit}",
        rc=rc,
    )
    return None


def after_actions(state, needed):
    """``{"active", "enabled"}`` of a unit in ``state`` once ``needed`` is done."""
    active = {"start": "active", "stop": "inactive"}
    enabled = {"enable": True, "disable": False}
    return {
        "active": next((active[verb] for verb in needed if verb in active), state["active"]),
        "enabled": next((enabled[verb] for verb in needed if verb in enabled), state["enabled"]),
    }


def run_module(module, sleep=time.sleep):
    """Read every unit's state (an unknown unit fails before anything is done), then enable and start what is not,
    and disable and stop the units to stop; the module's result."""
    systemctl = Systemctl(module, required=True)
    params = module.params
    states = [(unit, unit_state(systemctl, unit), actions_for) for unit in params["units"]]
    states += [(unit, unit_state(systemctl, unit), stop_actions_for) for unit in params["stopped"]]
    units, done, before, after = [], [], {}, {}
    for unit, state, wanted in states:
        needed = wanted(state)
        units.append({"name": unit, "active": state["active"], "enabled": state["enabled"], "actions": needed})
        before[unit] = {"active": state["active"], "enabled": state["enabled"]}
        after[unit] = after_actions(state, needed)
        for verb in needed:
            if not module.check_mode:
                attempt(systemctl, verb, unit, params["retries"], params["delay"], sleep)
            done.append(f"{verb} {unit}")
    result = {"changed": bool(done), "actions": done, "units": units}
    if module._diff:
        result["diff"] = {"before": before, "after": after}
    return result
