#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sshfs_masked_mount
short_description: Keep an SSHFS mount up under a systemd unit, with sshfs's signals ignored, and report its health
version_added: 0.1.0
description:
  - Mounts O(src) (C(host:path)) at O(path) with C(sshfs -f) in a systemd service generated for the mount
    (C(llamarpc-sshfs-<systemd-escape --path PATH>.service), C(Restart=always), enabled). Modelled on
    C(ansible.posix.mount).
  - By default sshfs starts with C(SIGHUP), C(SIGTERM), C(SIGINT) and C(SIGQUIT) ignored, which avoids the libfuse3
    3.17.2 signal-handler deadlock (O(mask_signals)).
  - A mount is healthy when its sshfs is neither stopped nor stuck in C(D) state and a C(statvfs) in a child process
    returns within O(health_timeout); O(state=mounted) lazily unmounts a hung, stale, unsupervised or foreign mount
    and mounts again (changed).
  - Reports whether C(mmap) works on the mount (it does not with O(direct_io)) and, optionally, the read throughput
    (O(read_probe)).
notes:
  - The SSH key should be one that the serving host accepts for read-only SFTP only, confined to the exported
    directory; the role C(llamarpc.cluster.sshfs_shard_export) sets that up on both sides.
  - Why the signals are masked, how the unit stops sshfs, and why health uses C(statvfs) and never touches the mount
    point in the module's own process - C(docs/modules.md).
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - root on the host (a system unit mounts as root); systemd; sshfs 3 and fusermount3 (Debian C(sshfs), C(fuse3))
options:
  path:
    description: Absolute mount point. Created by the unit when missing.
    type: path
    required: true
  src:
    description:
      - Remote directory, C([user@]host:path). A relative or empty path is relative to the login directory
        (with an SFTP chroot, C(host:/) is the exported directory). Required unless O(state=unmounted)
        or O(state=absent).
    type: str
  state:
    description:
      - V(mounted) writes and enables the unit, starts it and heals an unhealthy mount.
      - V(unmounted) stops the unit (unmounts); the unit stays enabled, so it mounts again at boot, like
        C(ansible.posix.mount).
      - V(remounted) does what V(mounted) does, then always restarts the unit (a fresh connection).
      - V(absent) stops and disables the unit and removes its file.
    type: str
    choices: [mounted, unmounted, remounted, absent]
    default: mounted
  user:
    description: Remote user; when O(src) names a user too, both must be the same.
    type: str
  port:
    description: SSH port of the serving host (default of ssh when unset).
    type: int
  identity_file:
    description: Private key file on the host, for example one made by the C(llamarpc.cluster.sshfs_shard_export) role.
    type: path
  known_hosts_file:
    description:
      - Known hosts file holding the serving host's key; with it host keys are checked strictly
        (C(StrictHostKeyChecking=yes)). Without it ssh's defaults apply (root's C(~/.ssh/known_hosts)).
    type: path
  read_only:
    description: Mount read-only (C(-o ro)).
    type: bool
    default: true
  reconnect:
    description: Let sshfs reconnect after the SSH connection drops (C(-o reconnect)).
    type: bool
    default: true
  server_alive_interval:
    description: C(ServerAliveInterval) in seconds (0 leaves both keep-alive options out).
    type: int
    default: 15
  server_alive_count_max:
    description: C(ServerAliveCountMax).
    type: int
    default: 3
  allow_other:
    description:
      - Let users other than root use the mount (C(-o allow_other)), for example a llama-server running as its
        own user.
    type: bool
    default: false
  direct_io:
    description:
      - Bypass the page cache (C(-o direct_io)). The seed used it; it makes C(mmap) fail on the mount (llama.cpp
        then needs C(--load-mode none)) and reads slower. Off by default.
    type: bool
    default: false
  auto_cache:
    description:
      - Keep file contents in the page cache across opens as long as their modification time and size are
        unchanged (C(-o auto_cache)). Without it sshfs drops the cache on every open, so each reload of a model
        reads every shard on the mount over the network again. A file changed on the remote host is read anew.
      - Ignored with O(direct_io), which has no page cache.
    type: bool
    default: true
  extra_opts:
    description:
      - More sshfs C(-o) options, one per item (for example V(Ciphers=aes128-gcm@openssh.com),
        V(max_read=131072)).
    type: list
    elements: str
    default: []
  mask_signals:
    description: Start sshfs with O(masked_signals) ignored (the libfuse3 3.17.2 deadlock workaround).
    type: bool
    default: true
  masked_signals:
    description: Signals ignored when O(mask_signals) is true (names with or without C(SIG)).
    type: list
    elements: str
    default: [HUP, TERM, INT, QUIT]
  health_timeout:
    description: Seconds a statvfs of the mount point (in a child process) may take before the mount counts as hung.
    type: float
    default: 5
  mount_timeout:
    description: Seconds to wait for the mount to appear and answer after (re)starting the unit.
    type: int
    default: 60
  read_probe:
    description:
      - File, relative to O(path), to read O(read_probe_mb) MB of (in a child process) to measure throughput.
        Also the file C(mmap) is tried on (else the first regular file at the top of the mount).
    type: str
  read_probe_mb:
    description: Megabytes (10^6 bytes) the read probe reads at most.
    type: int
    default: 16
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_diff]
attributes:
  diff_mode:
    details: The diff is the unit file.
seealso:
  - name: ansible.posix.mount
    description: The mount module this one is modelled on.
    link: https://docs.ansible.com/ansible/latest/collections/ansible/posix/mount_module.html
  - name: sshfs(1)
    description: The sshfs manual page.
    link: https://manpages.debian.org/bookworm/sshfs/sshfs.1.en.html
  - name: The seed's libfuse3 signal-handler deadlock and its workaround
    description: platform notes of the project (C(trap "" HUP TERM INT QUIT; exec sshfs -f ...)).
    link: https://github.com/libfuse/libfuse/blob/master/lib/fuse_signals.c
"""

EXAMPLES = r"""
- name: Mount node2's shard directory read-only, with the key the sshfs_shard_export role made
  llamarpc.cluster.sshfs_masked_mount:
    src: llamarpc-shards@node2:/
    path: /data/models/remote-node2
    identity_file: /etc/llamarpc/sshfs/id_ed25519
    known_hosts_file: /etc/llamarpc/sshfs/known_hosts
    allow_other: true
    read_probe: model-00004-of-00005.gguf
  register: shard_mount

- name: llama.cpp must not mmap the shards when mmap does not work there
  ansible.builtin.set_fact:
    llama_load_mode: "{{ 'auto' if shard_mount.mmap_ok else 'none' }}"

- name: Unmount (the unit stays enabled and mounts again at boot)
  llamarpc.cluster.sshfs_masked_mount:
    path: /data/models/remote-node2
    state: unmounted

- name: Remove the mount and its unit
  llamarpc.cluster.sshfs_masked_mount:
    path: /data/models/remote-node2
    state: absent
"""

RETURN = r"""
unit:
  description: Name of the systemd service that supervises the mount.
  returned: always
  type: str
  sample: llamarpc-sshfs-data-models-remote\x2dnode2.service
health:
  description:
    - Health of the mount when the module ends (before acting in check mode) - V(ok), V(not_mounted),
      V(foreign), V(hung), V(stale), V(stopped), V(blocked) or V(unsupervised).
  returned: always
  type: str
  sample: ok
health_detail:
  description: Why, in words.
  returned: always
  type: str
  sample: mounted and answering
health_before:
  description: Health found before acting (what made a heal necessary).
  returned: always
  type: str
  sample: hung
pid:
  description: PID of the sshfs process (the unit's main process), 0 when none.
  returned: always
  type: int
  sample: 4242
signals_ignored:
  description: Signals the running sshfs process ignores, from C(SigIgn) in C(/proc/PID/status).
  returned: when sshfs runs
  type: list
  elements: str
  sample: [HUP, INT, QUIT, TERM]
mmap_ok:
  description: Whether a read-only C(mmap) of a file on the mount works (null when no file was found to try).
  returned: when the mount is healthy
  type: bool
  sample: true
throughput_mbps:
  description: Read throughput of the probe in MB/s (10^6 bytes per second).
  returned: when O(read_probe) is set and the mount is healthy
  type: float
  sample: 11.6
probe_bytes:
  description: Bytes the read probe read.
  returned: when O(read_probe) is set and the mount is healthy
  type: int
  sample: 16000000
options:
  description: The sshfs C(-o) options used.
  returned: when O(src) is given
  type: list
  elements: str
  sample: [ro, reconnect, ServerAliveInterval=15, ServerAliveCountMax=3, BatchMode=yes]
source:
  description: The source as mounted (C(user@host:path)).
  returned: when O(src) is given
  type: str
  sample: llamarpc-shards@10.213.5.12:/
actions:
  description: What was done (or would be done in check mode).
  returned: always
  type: list
  elements: str
  sample: [write unit, enable unit, lazy unmount (hung), restart unit]
"""

import json
import os
import sys
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils import _sshfs
from ansible_collections.llamarpc.cluster.plugins.module_utils._bounded import run_bounded
from ansible_collections.llamarpc.cluster.plugins.module_utils._systemd import Systemctl

# Run in child processes: anything that touches the mount point may block forever on a hung FUSE mount.
_PROBE_CODE = r"""
import json, os, sys
try:
    # statvfs, not stat: neither the kernel nor sshfs caches it, so it reaches sshfs and the server every time.
    os.statvfs(sys.argv[1])
    print(json.dumps({"ok": True}))
except OSError as err:
    print(json.dumps({"ok": False, "error": "%s (errno %d)" % (err.strerror, err.errno)}))
"""

_MMAP_CODE = r"""
import json, mmap, os, sys
root, name = sys.argv[1], sys.argv[2]
try:
    if not name:
        with os.scandir(root) as entries:
            files = sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
        name = files[0] if files else ""
    if not name:
        print(json.dumps({"ok": None, "error": "no file to try"}))
    else:
        with open(os.path.join(root, name), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                print(json.dumps({"ok": None, "error": "empty file"}))
            else:
                with mmap.mmap(handle.fileno(), min(size, 4096), access=mmap.ACCESS_READ) as mapped:
                    mapped[0]
                print(json.dumps({"ok": True, "file": name}))
except OSError as err:
    print(json.dumps({"ok": False, "file": name, "error": "%s (errno %d)" % (err.strerror, err.errno)}))
"""

_READ_CODE = r"""
import json, os, sys, time
path, limit = sys.argv[1], int(sys.argv[2])
total = 0
start = time.monotonic()
with open(path, "rb", buffering=0) as handle:
    while total < limit:
        chunk = handle.read(min(1 << 20, limit - total))
        if not chunk:
            break
        total += len(chunk)
elapsed = time.monotonic() - start
print(json.dumps({"bytes": total, "seconds": elapsed}))
"""


def python_child(code, args, timeout):
    """JSON printed by ``code`` run with the module's Python, or None on timeout."""
    done = run_bounded([sys.executable, "-c", code, *args], timeout)
    if done is None:
        return None
    rc, out, err = done
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "error": f"probe failed (rc {rc}): {err.strip()[-300:]}"}


class Mount:
    """The live state of one mount and its unit, and the actions on them."""

    def __init__(self, module):
        self.module = module
        params = module.params
        try:
            self.path = _sshfs.normalize_mount_path(params["path"])
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
        params = self.module.params
        try:
            self.source = _sshfs.mount_source(params["src"], params["user"])
            self.options = _sshfs.build_options(
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
            signals = _sshfs.signal_names(params["masked_signals"]) if params["mask_signals"] else []
        except _sshfs.SshfsError as err:
            self.module.fail_json(msg=str(err))
        if params["read_probe"] and (params["read_probe"].startswith("/") or ".." in params["read_probe"].split("/")):
            self.module.fail_json(msg=f"read_probe must be a path relative to path, got {params['read_probe']!r}")
        sshfs = self.module.get_bin_path("sshfs", required=True)
        fusermount = self.module.get_bin_path("fusermount3", required=True)
        mkdir = self.module.get_bin_path("mkdir", required=True)
        argv = _sshfs.masked_argv(_sshfs.sshfs_argv(sshfs, self.source, self.path, self.options), signals)
        self.wanted_unit = _sshfs.render_unit(
            path=self.path, source=self.source, argv=argv, fusermount_bin=fusermount, mkdir_bin=mkdir, signals=signals
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

    def mount_entry(self):
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
            entries = _sshfs.parse_mountinfo(handle.read())
        return _sshfs.find_mount(entries, self.path)

    @staticmethod
    def read_proc(pid, name):
        try:
            with open(f"/proc/{pid}/{name}", encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def proc_states(self, pid, samples=3):
        """State letters of ``pid`` sampled ``samples`` times 0.2 s apart, with the wchan of D states."""
        states, wchans = [], []
        for index in range(samples):
            stat = self.read_proc(pid, "stat") if pid else None
            if stat is None:
                return [], []
            state = _sshfs.parse_proc_stat(stat)
            states.append(state)
            if state == "D":
                wchans.append((self.read_proc(pid, "wchan") or "").strip())
            if index + 1 < samples:
                time.sleep(0.2)
        return states, wchans

    def assess(self):
        """(health, detail, facts) of the mount right now."""
        params = self.module.params
        show = self.unit_show()
        pid = int(show.get("MainPID") or 0)
        active = show.get("ActiveState") == "active" and pid > 0
        mount = self.mount_entry()
        facts = {"pid": pid if active else 0, "unit_state": show}
        states, wchans = self.proc_states(pid) if active else ([], [])
        probe_result = None
        expected = self.source if self.source is not None else (mount or {}).get("source")
        if mount is not None and mount["fstype"] == "fuse.sshfs" and mount["source"] == expected:
            probe = python_child(_PROBE_CODE, [self.path], params["health_timeout"])
            probe_result = "timeout" if probe is None else ("ok" if probe.get("ok") else probe.get("error"))
        health, detail = _sshfs.classify_health(
            mount=mount, source=expected, probe_result=probe_result, proc_states=states, unit_active=active
        )
        if wchans and health == "blocked":
            detail += f" (wchan {', '.join(sorted(set(wchans)))})"
        if active:
            status = self.read_proc(pid, "status")
            if status:
                facts["signals_ignored"] = _sshfs.numbers_to_names(_sshfs.parse_status_mask(status))
        facts["mount"] = mount
        return health, detail, facts

    # -- actions ----------------------------------------------------------------------------------------------
    def write_unit(self):
        fd, tmp = tempfile.mkstemp(prefix=f".{self.unit}.", dir=_sshfs.UNIT_DIR)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(self.wanted_unit)
        os.chmod(tmp, 0o644)
        self.module.atomic_move(tmp, self.unit_path)

    def lazy_unmount(self):
        """Detach the mount without touching the (possibly hung) file system; bounded in time."""
        umount = self.module.get_bin_path("umount", required=True)
        done = run_bounded([umount, "--lazy", "--no-canonicalize", self.path], timeout=15)
        if done is None or done[0] != 0:
            fusermount = self.module.get_bin_path("fusermount3", required=True)
            run_bounded([fusermount, "-u", "-z", self.path], timeout=15)
        entry = self.mount_entry()
        if entry is not None and entry["fstype"] == "fuse.sshfs":
            self.module.fail_json(msg=f"could not lazily unmount {self.path}", changed=True, actions=self.actions)

    def wait_healthy(self):
        deadline = time.monotonic() + self.module.params["mount_timeout"]
        while True:
            health, detail, facts = self.assess()
            if health == "ok":
                return health, detail, facts
            if time.monotonic() >= deadline:
                self.module.fail_json(
                    msg=f"{self.unit} started but the mount is not healthy after "
                    f"{self.module.params['mount_timeout']} s: {health} - {detail}. "
                    f"See: journalctl -u '{self.unit}'",
                    changed=True,
                    health=health,
                    health_detail=detail,
                    unit=self.unit,
                    actions=self.actions,
                )
            time.sleep(1)

    def probes(self, result):
        params = self.module.params
        name = params["read_probe"] or ""
        timeout = max(30.0, params["health_timeout"])
        mapped = python_child(_MMAP_CODE, [self.path, name], timeout)
        result["mmap_ok"] = None if mapped is None else mapped.get("ok")
        if mapped and mapped.get("error"):
            result["mmap_detail"] = mapped["error"]
        if params["read_probe"]:
            limit = params["read_probe_mb"] * 1000 * 1000
            read = python_child(_READ_CODE, [os.path.join(self.path, name), str(limit)], 600)
            if read is None or "bytes" not in read:
                self.module.fail_json(msg=f"read probe of {name} failed: {read}", **result)
            result["probe_bytes"] = read["bytes"]
            result["throughput_mbps"] = round(read["bytes"] / max(read["seconds"], 1e-6) / 1e6, 2)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "src": {"type": "str"},
            "state": {"type": "str", "default": "mounted", "choices": ["mounted", "unmounted", "remounted", "absent"]},
            "user": {"type": "str"},
            "port": {"type": "int"},
            "identity_file": {"type": "path"},
            "known_hosts_file": {"type": "path"},
            "read_only": {"type": "bool", "default": True},
            "reconnect": {"type": "bool", "default": True},
            "server_alive_interval": {"type": "int", "default": 15},
            "server_alive_count_max": {"type": "int", "default": 3},
            "allow_other": {"type": "bool", "default": False},
            "direct_io": {"type": "bool", "default": False},
            "auto_cache": {"type": "bool", "default": True},
            "extra_opts": {"type": "list", "elements": "str", "default": []},
            "mask_signals": {"type": "bool", "default": True},
            "masked_signals": {"type": "list", "elements": "str", "default": ["HUP", "TERM", "INT", "QUIT"]},
            "health_timeout": {"type": "float", "default": 5},
            "mount_timeout": {"type": "int", "default": 60},
            "read_probe": {"type": "str"},
            "read_probe_mb": {"type": "int", "default": 16},
        },
        required_if=[("state", "mounted", ["src"]), ("state", "remounted", ["src"])],
        supports_check_mode=True,
    )
    mount = Mount(module)
    state = module.params["state"]
    result = {"changed": False, "unit": mount.unit, "actions": mount.actions}
    if module.params["src"]:
        mount.render()
        result["options"] = mount.options
        result["source"] = mount.source

    health, detail, facts = mount.assess()
    result["health_before"] = health
    current = mount.current_unit()
    show = facts["unit_state"]

    if state in {"unmounted", "absent"}:
        ours = health != "foreign" and (
            facts["mount"] is not None or show.get("ActiveState") in {"active", "activating"}
        )
        if ours or show.get("ActiveState") in {"active", "activating", "reloading"}:
            mount.actions.append("stop unit")
        if facts["mount"] is not None and health not in {"foreign", "not_mounted"}:
            mount.actions.append("unmount")
        if state == "absent":
            if show.get("UnitFileState") in {"enabled", "enabled-runtime"}:
                mount.actions.append("disable unit")
            if current is not None:
                mount.actions.append("remove unit")
        result["changed"] = bool(mount.actions)
        if module._diff and state == "absent" and current is not None:
            result["diff"] = {"before": current, "after": "", "before_header": mount.unit_path}
        if result["changed"] and not module.check_mode:
            if show.get("LoadState") == "loaded":
                mount.systemctl.check("stop", mount.unit)
            entry = mount.mount_entry()
            if entry is not None and entry["fstype"] == "fuse.sshfs":
                mount.lazy_unmount()
            if state == "absent" and show.get("LoadState") == "loaded":
                if show.get("UnitFileState") in {"enabled", "enabled-runtime"}:
                    mount.systemctl.check("disable", mount.unit)
                if current is not None:
                    os.unlink(mount.unit_path)
                    mount.systemctl.check("daemon-reload")
                mount.systemctl.run("reset-failed", mount.unit)
            elif state == "absent" and current is not None:
                os.unlink(mount.unit_path)
            health, detail, facts = mount.assess()
        result.update(health=health, health_detail=detail, pid=facts["pid"])
        module.exit_json(**result)

    # mounted / remounted
    unit_changed = current != mount.wanted_unit
    restart = state == "remounted"
    if unit_changed:
        mount.actions.append("write unit")
        if module._diff:
            result["diff"] = {
                "before": current or "",
                "after": mount.wanted_unit,
                "before_header": mount.unit_path,
                "after_header": mount.unit_path,
            }
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
    result["changed"] = bool(mount.actions)

    if result["changed"] and not module.check_mode:
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
        health, detail, facts = mount.wait_healthy()
    result.update(health=health, health_detail=detail, pid=facts["pid"])
    if "signals_ignored" in facts:
        result["signals_ignored"] = facts["signals_ignored"]
    if health == "ok":
        mount.probes(result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
