# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``lab_host``: one lab host's network, overlay, data disk, memory cgroup and systemd-nspawn.

Every action goes through the ``AnsibleModule`` it is given (``run_command``, check mode, ``fail_json``) and is
recorded in ``Host.actions``. The pure parts (nspawn's command line, tbf, mountinfo, namespace PIDs) are in ``_lab``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import time

from ansible_collections.llamarpc.lab.plugins.module_utils._lab import (
    container_init,
    mount_points,
    netns_pids,
    nspawn_argv,
    tbf_args,
)
from ansible_collections.llamarpc.lab.plugins.module_utils._lab_layer import Layer

CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"
RECORD = "host.json"


class Host:
    """Inspection and actions for one lab host; every action is appended to ``actions``."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.actions = []
        self.ip = module.get_bin_path("ip", required=True)
        self.dir = self.params["state_dir"]
        self.rootfs = os.path.join(self.dir, "rootfs")
        self.upper = os.path.join(self.dir, "upper")
        self.data = os.path.join(self.dir, "data")
        self.pidfile = os.path.join(self.dir, "nspawn.pid")
        self.cgroup = os.path.join(CGROUP_V1_MEMORY, "llamarpc-lab", self.params["netns"])

    # --- helpers -------------------------------------------------------------------------
    def act(self, what, argv=None):
        """Record an action; run ``argv`` unless in check mode."""
        self.actions.append(what)
        if argv is not None and not self.module.check_mode:
            rc, out, err = self.module.run_command(argv)
            if rc != 0:
                self.module.fail_json(
                    msg=f"{what} failed: {' '.join(argv)}: {(err or out).strip()}", actions=self.actions
                )
        return not self.module.check_mode

    def mounted(self, path):
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            return os.path.realpath(path) in mount_points(handle.read())

    def netns_exists(self):
        return os.path.exists(f"/run/netns/{self.params['netns']}")

    def link_exists(self, name, netns=None):
        argv = [self.ip] + (["-n", netns] if netns else []) + ["link", "show", "dev", name]
        return self.module.run_command(argv)[0] == 0

    def pid(self):
        """PID of this host's nspawn process if it is alive, else None."""
        try:
            with open(self.pidfile, encoding="ascii") as handle:
                pid = int(handle.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().split(b"\0")
        except (OSError, ValueError):
            return None
        if b"-M" in cmdline and self.params["name"].encode() in cmdline and any(b"nspawn" in c for c in cmdline[:1]):
            return pid
        return None

    # --- running ---------------------------------------------------------------------------
    def ensure_network(self):
        p = self.params
        ns = p["netns"]
        if not self.netns_exists():
            self.act("create netns", [self.ip, "netns", "add", ns])
        if not self.link_exists(p["veth"]):
            self.act(
                "create veth", [self.ip, "link", "add", p["veth"], "type", "veth", "peer", "name", "eth0", "netns", ns]
            )
        rc, out, _err = self.module.run_command([self.ip, "-j", "link", "show", "dev", p["veth"]])
        info = json.loads(out or "[{}]")[0] if rc == 0 else {}
        if info.get("master") != p["bridge"] or "UP" not in (info.get("flags") or []):
            self.act("attach veth", [self.ip, "link", "set", p["veth"], "master", p["bridge"], "up"])
        rc, out, _err = self.module.run_command([self.ip, "-n", ns, "-j", "addr", "show", "dev", "eth0"])
        info = json.loads(out or "[{}]")[0] if rc == 0 and out.strip() else {}
        want = f"{p['address']}/{p['prefixlen']}"
        have = [f"{a['local']}/{a['prefixlen']}" for a in info.get("addr_info", [])]
        if want not in have:
            self.act("address eth0", [self.ip, "-n", ns, "addr", "add", want, "dev", "eth0"])
        if "UP" not in (info.get("flags") or []):
            self.act("eth0 up", [self.ip, "-n", ns, "link", "set", "eth0", "up"])
            self.act("lo up", [self.ip, "-n", ns, "link", "set", "lo", "up"])
        self.ensure_bandwidth()

    def ensure_files(self):
        """The host's own files in its overlay layer (``_lab_layer.Layer``)."""
        Layer(self).ensure()

    def ensure_bandwidth(self):
        """tbf on the controller side (towards the host) and inside the namespace (from the host)."""
        rate = self.params["bandwidth"]
        tc = self.module.get_bin_path("tc", required=bool(rate))
        if tc is None:
            return
        stamp = os.path.join(self.dir, "bandwidth")
        try:
            with open(stamp, encoding="ascii") as handle:
                applied = int(handle.read().strip() or 0)
        except (OSError, ValueError):
            applied = 0
        if not rate and not applied:
            return  # no cap asked for and none applied: nothing to read back
        sides = ([], self.params["veth"]), (["-n", self.params["netns"]], "eth0")
        present = all(
            "tbf" in self.module.run_command([tc] + ns + ["qdisc", "show", "dev", dev])[1] for ns, dev in sides
        )
        if rate and (applied != rate or not present):
            for ns, dev in sides:
                self.act(
                    f"cap {dev} at {rate} bit/s", [tc] + ns + ["qdisc", "replace", "dev", dev, "root"] + tbf_args(rate)
                )
            if not self.module.check_mode:
                with open(stamp, "w", encoding="ascii") as handle:
                    handle.write(str(rate))
        elif not rate and applied:
            for ns, dev in sides:
                self.act(f"uncap {dev}", [tc] + ns + ["qdisc", "del", "dev", dev, "root"])
            if not self.module.check_mode:
                os.unlink(stamp)

    def ensure_mounts(self):
        p = self.params
        if not self.mounted(self.rootfs):
            opts = f"lowerdir={p['image']},upperdir={self.upper},workdir={os.path.join(self.dir, 'work')}"
            self.act("mount overlay", ["mount", "-t", "overlay", "overlay", "-o", opts, self.rootfs])
        image = os.path.join(self.dir, "data.img")
        if p["data_size"]:
            if os.path.exists(image) and os.path.getsize(image) != p["data_size"]:
                self.module.fail_json(
                    msg=f"{p['name']}: its data disk is {os.path.getsize(image)} bytes, not the requested "
                    f"{p['data_size']}; remove the lab (lab_down) to change it"
                )
            if not os.path.exists(image):
                self.actions.append("create data disk")
                if not self.module.check_mode:
                    with open(image + ".tmp", "wb") as handle:
                        handle.truncate(p["data_size"])
                    mkfs = self.module.get_bin_path("mkfs.ext4", required=True)
                    self.module.run_command(
                        [mkfs, "-q", "-F", "-m", "0", "-E", "root_owner=0:0", image + ".tmp"], check_rc=True
                    )
                    os.rename(image + ".tmp", image)
        if not os.path.isdir(self.data):
            self.actions.append("create data dir")
            if not self.module.check_mode:
                os.makedirs(self.data)
        if p["data_size"] and not self.mounted(self.data):
            self.act("mount data disk", ["mount", "-o", "loop", image, self.data])

    def ensure_cgroup(self):
        if not self.params["memory_max"]:
            return None
        limit = os.path.join(self.cgroup, "memory.limit_in_bytes")
        try:
            with open(limit, encoding="ascii") as handle:
                current = int(handle.read().strip())
        except (OSError, ValueError):
            current = None
        if current != self.params["memory_max"]:
            self.actions.append(f"memory cap {self.params['memory_max']}")
            if not self.module.check_mode:
                os.makedirs(self.cgroup, exist_ok=True)
                with open(limit, "w", encoding="ascii") as handle:
                    handle.write(str(self.params["memory_max"]))
        return self.cgroup

    def start(self, cgroup):
        """Start the host's systemd-nspawn detached (start-stop-daemon), inside its memory cgroup if any."""
        p = self.params
        # A boot starts with the kernel's firewall tables empty. The host's network namespace is the lab's and outlives
        # the host (a power loss, a stop), and with it the nftables rules the host loaded: emptied here, so that the
        # rules a booted host has are its boot's own.
        nft = self.module.get_bin_path("nft", required=True)
        self.act("empty the nftables ruleset", [self.ip, "netns", "exec", p["netns"], nft, "flush", "ruleset"])
        self.actions.append("start")
        if self.module.check_mode:
            return
        nspawn = self.module.get_bin_path("systemd-nspawn", required=True)
        daemon = self.module.get_bin_path("start-stop-daemon", required=True)
        argv = nspawn_argv(
            nspawn, p["name"], self.rootfs, f"/run/netns/{p['netns']}", binds=[(self.data, p["data_path"])]
        )
        if cgroup:
            # Children inherit the cgroup: joining it here puts the container (and nothing else that lives on) in it.
            with open(os.path.join(cgroup, "cgroup.procs"), "w", encoding="ascii") as handle:
                handle.write(str(os.getpid()))
        launcher = [
            daemon,
            "--start",
            "--background",
            "--make-pidfile",
            "--pidfile",
            self.pidfile,
            "--output",
            os.path.join(self.dir, "console.log"),
            "--exec",
            nspawn,
            "--",
        ] + argv[1:]
        rc, out, err = self.module.run_command(launcher)
        if rc != 0:
            self.module.fail_json(
                msg=f"could not start lab host {p['name']}: {(err or out).strip()}", actions=self.actions
            )

    def wait_ssh(self):
        deadline = time.monotonic() + self.params["boot_timeout"]
        time.sleep(0.2)
        while time.monotonic() < deadline:
            if self.pid() is None:
                break
            try:
                with socket.create_connection((self.params["address"], 22), timeout=2) as sock:
                    sock.settimeout(3)
                    if sock.recv(64).startswith(b"SSH-") and self.wait_booted(deadline):
                        return
            except OSError:
                pass
            time.sleep(0.3)
        self.module.fail_json(
            msg=f"lab host {self.params['name']} did not finish booting (systemd running, logins open, SSH answering "
            f"on {self.params['address']}) within {self.params['boot_timeout']} s",
            console_tail=self.console_tail(),
            actions=self.actions,
        )

    def init_pid(self):
        """PID (in our namespace) of the host's own systemd: the child of its nspawn process."""
        pid = self.pid()
        return None if pid is None else container_init(pid)

    def in_host(self, init, *argv):
        """(rc, stdout) of ``argv`` run inside the host (its namespaces, through its systemd's PID)."""
        nsenter = self.module.get_bin_path("nsenter", required=True)
        rc, out, _err = self.module.run_command([nsenter, "-t", str(init), "-m", "-u", "-i", "-n", "-p", *argv])
        return rc, out.strip()

    def wait_booted(self, deadline):
        """Wait until the host's systemd finished booting and logins are open (sudo and logins stall before that).

        "degraded" counts as booted, but a unit that failed at boot can leave /run/nologin behind (seen under load:
        every login refused with "System is booting up"): then systemd-user-sessions is started again, once.
        """
        retried = False
        while time.monotonic() < deadline:
            init = self.init_pid()
            if init is not None:
                state = self.in_host(init, "systemctl", "is-system-running")[1]
                if state in ("running", "degraded"):
                    if self.in_host(init, "test", "-e", "/run/nologin")[0] != 0:
                        return True
                    if state == "degraded" and not retried:
                        failed = self.in_host(init, "systemctl", "--failed", "--no-legend", "--plain")[1]
                        self.actions.append(f"logins still closed after boot (failed: {failed or 'none'}): "
                                            "start systemd-user-sessions again")  # fmt: skip
                        self.in_host(init, "systemctl", "start", "systemd-user-sessions.service")
                        retried = True
            time.sleep(0.5)
        return False

    def console_tail(self, lines=25):
        try:
            with open(os.path.join(self.dir, "console.log"), encoding="utf-8", errors="replace") as handle:
                return handle.read().splitlines()[-lines:]
        except OSError:
            return []

    def host_key(self):
        try:
            with open(os.path.join(self.upper, "etc", "ssh", "ssh_host_ed25519_key.pub"), encoding="ascii") as handle:
                return " ".join(handle.read().split()[:2])
        except OSError:
            return None

    # --- stopped / absent --------------------------------------------------------------------
    def leftovers(self):
        """PIDs of the host's processes found without its nspawn: by its network namespace, and by its memory cgroup
        (which still holds them when the namespace's name is gone), never this module's own."""
        pids = set(netns_pids(f"/run/netns/{self.params['netns']}"))
        with contextlib.suppress(OSError), open(os.path.join(self.cgroup, "cgroup.procs"), encoding="ascii") as handle:
            pids.update(int(line) for line in handle if line.strip())
        return sorted(pids - {os.getpid(), os.getppid()})

    def kill_leftovers(self, timeout=60):
        """Kill what runs of the host without its nspawn (a container whose nspawn died): SIGKILL, then wait until
        nothing is left - a second container must never boot on the same root."""
        left = self.leftovers()
        if not left:
            return
        self.actions.append(f"kill {len(left)} processes of {self.params['name']} left without their systemd-nspawn")
        if self.module.check_mode:
            return
        deadline = time.monotonic() + timeout
        while left:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                self.module.fail_json(
                    msg=f"processes {left} of {self.params['name']} survive SIGKILL after {timeout} s"
                )
            time.sleep(0.2)
            left = self.leftovers()

    def stop(self, timeout=30):
        pid = self.pid()
        if pid is None:
            self.kill_leftovers()
            return
        self.actions.append("stop")
        if self.module.check_mode:
            return
        os.kill(pid, signal.SIGTERM)  # nspawn asks the host's systemd to power off cleanly
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid() == pid:
            time.sleep(0.2)
        if self.pid() == pid:
            os.kill(pid, signal.SIGKILL)
            while self.pid() == pid:
                time.sleep(0.1)
        self.kill_leftovers()

    def remove(self):
        self.stop()
        for path, what in ((self.rootfs, "overlay"), (self.data, "data disk")):
            if os.path.isdir(path) and self.mounted(path):
                self.act(f"unmount {what}", ["umount", path])
        if self.link_exists(self.params["veth"]):
            self.act("delete veth", [self.ip, "link", "del", self.params["veth"]])
        if self.netns_exists():
            self.act("delete netns", [self.ip, "netns", "del", self.params["netns"]])
        if os.path.isdir(self.cgroup):
            self.actions.append("remove memory cgroup")
            if not self.module.check_mode:
                os.rmdir(self.cgroup)
        if os.path.exists(self.dir):
            self.actions.append("remove state dir")
            if not self.module.check_mode:
                shutil.rmtree(self.dir)


def _names(module):
    """netns and veth from the parameters, else from the host's record; None when there is nothing to act on."""
    p = module.params
    if p["state"] == "running" or (p["netns"] and p["veth"]):
        return p
    recorded = os.path.join(p["state_dir"], RECORD)
    try:
        with open(recorded, encoding="utf-8") as handle:
            names = json.load(handle)
    except (OSError, ValueError):
        if os.path.exists(p["state_dir"]):
            module.fail_json(msg=f"{recorded} is missing or unreadable: pass netns and veth explicitly")
        return None
    p["netns"] = p["netns"] or names["netns"]
    p["veth"] = p["veth"] or names["veth"]
    return p


def _running(module, host):
    """state=running: network, overlay, mounts, cgroup, then boot when the host is not running; the result."""
    p = module.params
    if not os.path.isfile(os.path.join(p["image"], "etc", "os-release")):
        module.fail_json(msg=f"image {p['image']} is not a root filesystem (no etc/os-release)")
    if not module.check_mode:
        os.makedirs(p["state_dir"], mode=0o700, exist_ok=True)
        with open(os.path.join(p["state_dir"], RECORD), "w", encoding="utf-8") as handle:
            json.dump({"name": p["name"], "netns": p["netns"], "veth": p["veth"]}, handle)
    host.ensure_network()
    host.ensure_files()
    host.ensure_mounts()
    cgroup = host.ensure_cgroup()
    pid = host.pid()
    if pid is None:
        host.kill_leftovers()
        host.start(cgroup)
        if not module.check_mode:
            host.wait_ssh()
            pid = host.pid()
    result = {"host_key": host.host_key()}
    if pid is not None:
        result["pid"] = pid
    return result


def run(module):
    """The module's result for its parameters (it fails the module itself where it must)."""
    p = _names(module)
    if p is None:
        return {"changed": False, "actions": []}
    if len(p["veth"]) > 15:
        module.fail_json(msg=f"veth name {p['veth']!r} is longer than 15 characters")
    for key in ("data_size", "memory_max", "bandwidth"):
        if p[key] < 0:
            module.fail_json(msg=f"{key} must not be negative")
    host = Host(module)
    result = {}
    if p["state"] == "running":
        result = _running(module, host)
    elif p["state"] == "stopped":
        host.stop()
    else:
        host.remove()
    return {"changed": bool(host.actions), "actions": host.actions, **result}
