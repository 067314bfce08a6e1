# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The runs of ``wireguard_interface`` (read wg-quick's unit and the interface, decide, act, read again) and of
``wireguard_implementation`` (kernel or userspace).

The decision itself is ``_wireguard.decide`` (pure); this file talks to the host (systemctl through ``_systemd``,
``ip``, ``wg`` and the role's sync helper).
"""

from __future__ import annotations

import os
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import _wireguard
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import Systemctl

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "unit": {"type": "str"},
    "address": {"type": "str", "required": True},
    "mtu": {"type": "int", "required": True},
    "port": {"type": "int", "required": True},
    "peers": {"type": "list", "elements": "dict", "default": []},
    "key": {"type": "path", "required": True},
    "sync_helper": {"type": "path", "required": True},
    "config_changed": {"type": "bool", "default": False},
}


def read_unit(systemctl, unit):
    """``{"found", "enabled", "active"}`` of ``unit``."""
    properties = systemctl.show(unit, ["LoadState", "ActiveState"])
    found = properties.get("LoadState") not in ("not-found", "", None)
    enabled = found and systemctl.run("is-enabled", "--quiet", unit)[0] == 0
    return {"found": found, "enabled": enabled, "active": properties.get("ActiveState") == "active"}


def read_interface(module, name):
    """``(link, dump)`` of the interface (``parse_link``, ``parse_dump``); each None when there is none."""
    ip = module.get_bin_path("ip", required=True)
    rc, out, err = module.run_command([ip, "-json", "-details", "address", "show", "dev", name])
    if rc != 0:
        return None, None
    link = _parse(module, _wireguard.parse_link, out)
    wg = module.get_bin_path("wg")
    if not wg:
        return link, None
    rc, out, err = module.run_command([wg, "show", name, "dump"])
    if rc != 0:
        return link, None
    private = out.split("\t", 1)[0].strip()
    if private and private != "(none)":
        module.no_log_values.add(private)
    return link, _parse(module, _wireguard.parse_dump, out)


def remove_leftover(module, name, unit, result):
    """Delete the interface ``name`` when it is still there with ``unit`` stopped, as wg-quick down would have.

    Left by a stop whose ExecStop never ran (systemd in a container can refuse to start the control process of an
    exited oneshot unit: status 219/CGROUP, seen in the lab), or by a unit that failed: wg-quick up then fails with
    "already exists" at every start. The configuration has no PostDown, so deleting the link is all wg-quick down
    does here (with wireguard-go, its TUN device going away ends wireguard-go).
    """
    ip = module.get_bin_path("ip", required=True)
    if module.run_command([ip, "link", "show", "dev", name])[0] != 0:
        return
    rc, out, err = module.run_command([ip, "link", "delete", "dev", name])
    if rc != 0:
        module.fail_json(
            msg=f"{name} is still there with {unit} stopped and could not be deleted: {(err or out).strip()}",
            **result,
        )


# Starts of wg-quick's unit before giving up, and the seconds between them.
START_ATTEMPTS = 3
START_PAUSE = 2


def start(module, systemctl, name, unit, result):
    """Start ``unit`` on a clean slate (no leftover interface); a failed start is tried again, twice.

    Right after a stop, systemd in a container can fail to create the cgroup of wg-quick or of wireguard-go's unit
    (status 219/CGROUP, seen in the lab on the second MTU change in a row); wg-quick then fails, and a start a moment
    later succeeds. The last failure fails the module with systemctl's message.
    """
    for attempt in range(START_ATTEMPTS):
        remove_leftover(module, name, unit, result)
        if attempt == START_ATTEMPTS - 1:
            systemctl.check("start", unit)
            return
        if systemctl.run("start", unit)[0] == 0:
            return
        systemctl.run("reset-failed", unit)
        time.sleep(START_PAUSE)


def _parse(module, parser, text):
    try:
        return parser(text)
    except ValueError as exc:
        module.fail_json(msg=str(exc))


def status(link, dump):
    """The fact ``wireguard_status``: the dump without the private key, with the implementation."""
    return dict(dump, implementation=link["implementation"])


def view(unit, link, dump):
    """What the diff shows of the state read."""
    return {
        "enabled": unit["enabled"],
        "active": unit["active"],
        "addresses": link["addresses"] if link else [],
        "mtu": link["mtu"] if link else None,
        "listen_port": dump["interface"]["listen_port"] if dump else None,
        "peers": sorted(peer["public_key"] for peer in dump["peers"]) if dump else [],
    }


def run(module):
    p = module.params
    unit_name = p["unit"] or f"wg-quick@{p['name']}.service"
    want = {"addresses": [p["address"]], "mtu": p["mtu"], "port": p["port"], "peers": p["peers"]}
    for peer in p["peers"]:
        if not _wireguard.is_key(peer.get("public_key")):
            module.fail_json(msg=f"peer {peer.get('name', peer)!r} has no WireGuard public key (public_key)")
    systemctl = Systemctl(module, required=True)
    unit = read_unit(systemctl, unit_name)
    link, dump = read_interface(module, p["name"]) if unit["found"] else (None, None)
    actions, reasons = _wireguard.decide(unit, link, dump, want, p["config_changed"])
    result = {"changed": bool(actions), "actions": actions, "reasons": reasons, "unit": unit_name}
    if module._diff:
        after = {
            "enabled": True,
            "active": True,
            "addresses": want["addresses"],
            "mtu": want["mtu"],
            "listen_port": want["port"],
            "peers": sorted(peer["public_key"] for peer in want["peers"]),
        }
        result["diff"] = {"before": view(unit, link, dump), "after": after}
    if module.check_mode or not actions:
        if dump is not None:
            result["ansible_facts"] = {"wireguard_status": status(link, dump)}
        module.exit_json(**result)
    if not unit["found"]:
        module.fail_json(msg=f"{unit_name} is not installed (it comes with wireguard-tools)", **result)

    systemctl.failure = result
    for action in actions:
        if action == "sync":
            rc, out, err = module.run_command([p["sync_helper"], p["name"], p["key"]])
            if rc != 0:
                module.fail_json(
                    msg=f"applying the peers to {p['name']} failed (rc={rc}): {(err or out).strip()}", **result
                )
        elif action in ("start", "restart"):
            # A restart is a stop, then a start on a clean slate: wg-quick up refuses an interface that exists.
            if action == "restart":
                systemctl.check("stop", unit_name)
            start(module, systemctl, p["name"], unit_name, result)
        else:
            systemctl.check(action, unit_name)
    link, dump = read_interface(module, p["name"])
    if dump is None or not dump["interface"]["has_private_key"]:
        module.fail_json(
            msg=f"{p['name']} is not up with its private key after {' and '.join(actions)} of {unit_name}; "
            f"see journalctl -u {unit_name}",
            **result,
        )
    result["ansible_facts"] = {"wireguard_status": status(link, dump)}
    module.exit_json(**result)


def implementation(module, sys_module="/sys/module/wireguard"):
    """The ``wireguard_implementation`` module's run: the kernel's WireGuard where the kernel has the module (loaded
    now if it is not yet), else userspace (wireguard-go). In check mode only asks (``modprobe --dry-run``)."""
    result = {"changed": False, "loaded": os.path.isdir(sys_module)}
    if not result["loaded"]:
        modprobe = module.get_bin_path("modprobe")
        if modprobe:
            argv = [modprobe, "--dry-run", "wireguard"] if module.check_mode else [modprobe, "wireguard"]
            rc, out, err = module.run_command(argv)
            result["loaded"] = rc == 0
            result["changed"] = rc == 0
            result["modprobe"] = (err or out).strip()
    kind = "kernel" if result["loaded"] else "userspace"
    module.exit_json(ansible_facts={"wireguard_implementation": kind}, **result)
