# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``sshfs_masked_mount``: the live state of one mount and its unit, the probes, the actions.

Anything that touches the mount point may block forever on a hung FUSE mount, so the probes (``statvfs_probe``,
``mmap_probe``, ``read_probe``) run in a forked child (``_child.run_in_child``), never in the module's process.
The pure parts (options, unit text, parsers, health) are in ``_sshfs``.
"""

from __future__ import annotations

import mmap
import os
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sshfs
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._bounded import run_bounded
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._child import run_in_child
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import Systemctl

_ACTIVE = {"active", "activating"}
_ENABLED = {"enabled", "enabled-runtime"}


# -- probes: each runs in a child process ----------------------------------------------------------------------
def _os_error(err):
    return f"{err.strerror} (errno {err.errno})"


def statvfs_probe(path):
    """``{"ok": True}`` when a statvfs of ``path`` returns, else the error.

    statvfs, not stat: neither the kernel nor sshfs caches it, so it reaches sshfs and the server every time.
    """
    try:
        os.statvfs(path)
    except OSError as err:
        return {"ok": False, "error": _os_error(err)}
    return {"ok": True}


def mmap_probe(root, name):
    """Whether a read-only mmap of ``root/name`` (else of the first regular file in ``root``) works."""
    try:
        if not name:
            with os.scandir(root) as entries:
                files = sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
            name = files[0] if files else ""
        if not name:
            return {"ok": None, "error": "no file to try"}
        with open(os.path.join(root, name), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return {"ok": None, "error": "empty file"}
            with mmap.mmap(handle.fileno(), min(size, 4096), access=mmap.ACCESS_READ) as mapped:
                mapped[0]  # noqa: B018 - the read is the probe
        return {"ok": True, "file": name}
    except OSError as err:
        return {"ok": False, "file": name, "error": _os_error(err)}


def read_probe(path, limit):
    """``{"bytes", "seconds"}`` of reading up to ``limit`` bytes of ``path`` without buffering."""
    total = 0
    start = time.monotonic()
    with open(path, "rb", buffering=0) as handle:
        while total < limit:
            chunk = handle.read(min(1 << 20, limit - total))
            if not chunk:
                break
            total += len(chunk)
    return {"bytes": total, "seconds": time.monotonic() - start}


# -- the mount --------------------------------------------------------------------------------------------------
def read_proc(pid, name):
    """``/proc/PID/NAME`` as text, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/{name}", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def proc_states(pid, samples=3):
    """State letters of ``pid`` sampled ``samples`` times 0.2 s apart, with the wchan of D states."""
    states, wchans = [], []
    for index in range(samples):
        stat = read_proc(pid, "stat") if pid else None
        if stat is None:
            return [], []
        state = _sshfs.parse_proc_stat(stat)
        states.append(state)
        if state == "D":
            wchans.append((read_proc(pid, "wchan") or "").strip())
        if index + 1 < samples:
            time.sleep(0.2)
    return states, wchans


def mount_entry(path):
    """The topmost mountinfo entry at ``path``, or None."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        entries = _sshfs.parse_mountinfo(handle.read())
    return _sshfs.find_mount(entries, path)


def _options(params):
    return _sshfs.build_options(
        read_only=params["read_only"],
        reconnect=params["reconnect"],
        server_alive_interval=params["server_alive_interval"],
        server_alive_count_max=params["server_alive_count_max"],
        allow_other=params["allow_other"],
        identity_file=params["identity_file"],
        known_hosts_file=params["known_hosts_file"],
        port=params["port"],
        direct_io=params["direct_io"],
        auto_cache=params["auto_cache"],
        extra_opts=params["extra_opts"],
    )


class Mount:
    """The live state of one mount and its unit, and the actions on them."""

    def __init__(self, module):
        self.module = module
        try:
            self.path = _sshfs.normalize_mount_path(module.params["path"])
        except _sshfs.SshfsError as err:
            module.fail_json(msg=str(err))
        self.unit = _sshfs.unit_name(self.path)
        self.unit_path = os.path.join(_sshfs.UNIT_DIR, self.unit)
        self.source = None
        self.options = None
        self.wanted_unit = None
        self.actions = []
        self.systemctl = Systemctl(module, required=True, failure={"actions": self.actions})

    # -- desired state ----------------------------------------------------------------------------------------
    def render(self):
        """The wanted unit from the module's options; fails the module on bad input, before any change."""
        params = self.module.params
        try:
            self.source = _sshfs.mount_source(params["src"], params["user"])
            self.options = _options(params)
            signals = _sshfs.signal_names(params["masked_signals"]) if params["mask_signals"] else []
        except _sshfs.SshfsError as err:
            self.module.fail_json(msg=str(err))
        probe = params["read_probe"]
        if probe and (probe.startswith("/") or ".." in probe.split("/")):
            self.module.fail_json(msg=f"read_probe must be a path relative to path, got {probe!r}")
        binary = self.module.get_bin_path
        sshfs, fusermount = binary("sshfs", required=True), binary("fusermount3", required=True)
        argv = _sshfs.masked_argv(_sshfs.sshfs_argv(sshfs, self.source, self.path, self.options), signals)
        self.wanted_unit = _sshfs.render_unit(
            path=self.path,
            source=self.source,
            argv=argv,
            fusermount_bin=fusermount,
            mkdir_bin=binary("mkdir", required=True),
            signals=signals,
        )

    # -- live state -------------------------------------------------------------------------------------------
    def current_unit(self):
        try:
            with open(self.unit_path, encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def unit_show(self):
        return self.systemctl.show(self.unit, ["ActiveState", "SubState", "MainPID", "UnitFileState", "LoadState"])

    def assess(self):
        """(health, detail, facts) of the mount right now."""
        show = self.unit_show()
        pid = int(show.get("MainPID") or 0)
        active = show.get("ActiveState") == "active" and pid > 0
        mount = mount_entry(self.path)
        facts = {"pid": pid if active else 0, "unit_state": show, "mount": mount}
        states, wchans = proc_states(pid) if active else ([], [])
        probe_result = None
        expected = self.source if self.source is not None else (mount or {}).get("source")
        if mount is not None and mount["fstype"] == "fuse.sshfs" and mount["source"] == expected:
            probe = run_in_child(statvfs_probe, [self.path], self.module.params["health_timeout"])
            probe_result = "timeout" if probe is None else ("ok" if probe.get("ok") else probe.get("error"))
        health, detail = _sshfs.classify_health(
            mount=mount, source=expected, probe_result=probe_result, proc_states=states, unit_active=active
        )
        if wchans and health == "blocked":
            detail += f" (wchan {', '.join(sorted(set(wchans)))})"
        status = read_proc(pid, "status") if active else None
        if status:
            facts["signals_ignored"] = _sshfs.numbers_to_names(_sshfs.parse_status_mask(status))
        return health, detail, facts

    # -- actions ----------------------------------------------------------------------------------------------
    def write_unit(self):
        _atomic.write_atomic(self.unit_path, self.wanted_unit, mode=0o644, move=self.module.atomic_move)

    def lazy_unmount(self):
        """Detach the mount without touching the (possibly hung) file system; bounded in time."""
        umount = self.module.get_bin_path("umount", required=True)
        done = run_bounded([umount, "--lazy", "--no-canonicalize", self.path], timeout=15)
        if done is None or done[0] != 0:
            fusermount = self.module.get_bin_path("fusermount3", required=True)
            run_bounded([fusermount, "-u", "-z", self.path], timeout=15)
        entry = mount_entry(self.path)
        if entry is not None and entry["fstype"] == "fuse.sshfs":
            self.module.fail_json(msg=f"could not lazily unmount {self.path}", changed=True, actions=self.actions)

    def wait_healthy(self):
        timeout = self.module.params["mount_timeout"]
        deadline = time.monotonic() + timeout
        while True:
            health, detail, facts = self.assess()
            if health == "ok":
                return health, detail, facts
            if time.monotonic() >= deadline:
                self.module.fail_json(
                    msg=f"{self.unit} started but the mount is not healthy after {timeout} s: {health} - {detail}. "
                    f"See: journalctl -u '{self.unit}'",
                    changed=True,
                    health=health,
                    health_detail=detail,
                    unit=self.unit,
                    actions=self.actions,
                )
            time.sleep(1)

    def probes(self, result):
        """mmap and (with read_probe) throughput of the mount, into ``result``."""
        params = self.module.params
        name = params["read_probe"] or ""
        mapped = run_in_child(mmap_probe, [self.path, name], max(30.0, params["health_timeout"]))
        result["mmap_ok"] = None if mapped is None else mapped.get("ok")
        if mapped and mapped.get("error"):
            result["mmap_detail"] = mapped["error"]
        if params["read_probe"]:
            limit = params["read_probe_mb"] * 1000 * 1000
            read = run_in_child(read_probe, [os.path.join(self.path, name), limit], 600)
            if read is None or "bytes" not in read:
                self.module.fail_json(msg=f"read probe of {name} failed: {read}", **result)
            result["probe_bytes"] = read["bytes"]
            result["throughput_mbps"] = round(read["bytes"] / max(read["seconds"], 1e-6) / 1e6, 2)


# -- the states -------------------------------------------------------------------------------------------------
def _plan_leave(mount, state, health, facts, current):
    """Actions that unmount (and for absent remove) the mount."""
    show, entry = facts["unit_state"], facts["mount"]
    ours = health != "foreign" and (entry is not None or show.get("ActiveState") in _ACTIVE)
    if ours or show.get("ActiveState") in {*_ACTIVE, "reloading"}:
        mount.actions.append("stop unit")
    if entry is not None and health not in {"foreign", "not_mounted"}:
        mount.actions.append("unmount")
    if state == "absent":
        if show.get("UnitFileState") in _ENABLED:
            mount.actions.append("disable unit")
        if current is not None:
            mount.actions.append("remove unit")


def _apply_leave(mount, state, show, current):
    loaded = show.get("LoadState") == "loaded"
    if loaded:
        mount.systemctl.check("stop", mount.unit)
    entry = mount_entry(mount.path)
    if entry is not None and entry["fstype"] == "fuse.sshfs":
        mount.lazy_unmount()
    if state != "absent":
        return
    if loaded and show.get("UnitFileState") in _ENABLED:
        mount.systemctl.check("disable", mount.unit)
    if current is not None:
        os.unlink(mount.unit_path)
        if loaded:
            mount.systemctl.check("daemon-reload")
    if loaded:
        mount.systemctl.run("reset-failed", mount.unit)


def leave(mount, result, state, assessed, current):
    """state=unmounted or absent: stop (and for absent disable and remove) the unit, unmount."""
    module = mount.module
    health, detail, facts = assessed
    _plan_leave(mount, state, health, facts, current)
    result["changed"] = bool(mount.actions)
    if module._diff and state == "absent" and current is not None:
        result["diff"] = {"before": current, "after": "", "before_header": mount.unit_path}
    if result["changed"] and not module.check_mode:
        _apply_leave(mount, state, facts["unit_state"], current)
        health, detail, facts = mount.assess()
    result.update(health=health, health_detail=detail, pid=facts["pid"])
    return result


def _plan_mount(mount, state, health, show, unit_changed):
    """Actions that bring the mount up; whether the unit restarts."""
    restart = state == "remounted"
    if unit_changed:
        mount.actions.append("write unit")
        if health != "not_mounted" or show.get("ActiveState") == "active":
            restart = True  # new options take effect only with a new sshfs
    if show.get("UnitFileState") != "enabled":
        mount.actions.append("enable unit")
    if health not in {"ok", "not_mounted"}:
        mount.actions.append(f"lazy unmount ({health})")
        restart = True
    if restart:
        mount.actions.append("restart unit")
    elif health == "not_mounted":
        mount.actions.append("start unit")
    return restart


def _apply_mount(mount, health, show, unit_changed, restart):
    if unit_changed:
        mount.write_unit()
        mount.systemctl.check("daemon-reload")
    if "enable unit" in mount.actions:
        mount.systemctl.check("enable", mount.unit)
    if health not in {"ok", "not_mounted"}:
        mount.lazy_unmount()
    if restart:
        mount.systemctl.check("restart", mount.unit)
    elif health == "not_mounted":
        # An active unit whose sshfs has not mounted yet (still connecting, or restarting) is restarted too.
        mount.systemctl.check("restart" if show.get("ActiveState") == "active" else "start", mount.unit)


def ensure_mounted(mount, result, state, assessed, current):
    """state=mounted or remounted: write and enable the unit, heal an unhealthy mount, (re)start, probe."""
    module = mount.module
    health, detail, facts = assessed
    show = facts["unit_state"]
    unit_changed = current != mount.wanted_unit
    restart = _plan_mount(mount, state, health, show, unit_changed)
    if unit_changed and module._diff:
        result["diff"] = {
            "before": current or "",
            "after": mount.wanted_unit,
            "before_header": mount.unit_path,
            "after_header": mount.unit_path,
        }
    result["changed"] = bool(mount.actions)
    if result["changed"] and not module.check_mode:
        _apply_mount(mount, health, show, unit_changed, restart)
        health, detail, facts = mount.wait_healthy()
    result.update(health=health, health_detail=detail, pid=facts["pid"])
    if "signals_ignored" in facts:
        result["signals_ignored"] = facts["signals_ignored"]
    if health == "ok":
        mount.probes(result)
    return result


def run(module):
    """The module's result for its parameters (it fails the module itself where it must)."""
    mount = Mount(module)
    state = module.params["state"]
    result = {"changed": False, "unit": mount.unit, "actions": mount.actions}
    if module.params["src"]:
        mount.render()
        result["options"] = mount.options
        result["source"] = mount.source
    assessed = mount.assess()
    result["health_before"] = assessed[0]
    current = mount.current_unit()
    if state in {"unmounted", "absent"}:
        return leave(mount, result, state, assessed, current)
    return ensure_mounted(mount, result, state, assessed, current)
