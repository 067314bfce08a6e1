# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who listens on a TCP port, and in which systemd unit: read from /proc (the kernel's socket tables, each process's
open descriptors and its cgroup), as ``ss -ltnp`` does, with nothing to install. Used by port_holders."""

from __future__ import annotations

import os
import re

from ansible_collections.llamarpc.cluster.plugins.module_utils import _proc_tcp

_SOCKET = re.compile(r"^socket:\[(\d+)\]$")


def listening_inodes(port, proc="/proc"):
    """Socket inode -> local address of every TCP socket listening on ``port`` (IPv4 and IPv6)."""
    return {
        sock.inode: _text(sock.address)
        for sock in _proc_tcp.read(proc)
        if sock.state == _proc_tcp.LISTEN and sock.port == int(port) and sock.inode
    }


def _text(address):
    """An address as ``ss`` shows it here: IPv4 dotted, IPv6 in full (``::`` for every address)."""
    if address.version == 6 and not address.is_unspecified:
        return address.exploded
    return str(address)


def unit_of(pid, proc="/proc"):
    """The systemd unit (service or scope) a process runs in, from its cgroup (v2, or v1's name=systemd), or None."""
    try:
        with open(os.path.join(proc, str(pid), "cgroup"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        number, _sep, rest = line.partition(":")
        controllers, _sep, path = rest.partition(":")
        if (number == "0" and controllers == "") or controllers == "name=systemd":
            units = [part for part in path.split("/") if part.endswith((".service", ".scope"))]
            if units:
                return units[-1]
    return None


def _comm(pid, proc):
    try:
        with open(os.path.join(proc, str(pid), "comm"), encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def holders(port, proc="/proc"):
    """Every process holding a socket that listens on TCP ``port``: [{pid, comm, unit, address}], by PID."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return []
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or not ours to read
        addresses = set()
        for fd in fds:
            try:
                match = _SOCKET.match(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                continue
            if match and match.group(1) in inodes:
                addresses.add(inodes[match.group(1)])
        if addresses:
            found.append(
                {
                    "pid": int(entry),
                    "comm": _comm(entry, proc),
                    "unit": unit_of(entry, proc),
                    "address": sorted(addresses),
                }
            )
    return sorted(found, key=lambda holder: holder["pid"])


def foreign_holders(services, proc="/proc"):
    """For ``services`` ([{service, port, unit}]): (holders by service, one message per port held outside its unit)."""
    seen, problems = {}, []
    for entry in services:
        found = holders(entry["port"], proc)
        seen[entry["service"]] = found
        for holder in found:
            if holder["unit"] != entry["unit"]:
                problems.append(
                    f"port {entry['port']} ({entry['service']}) is already held by {holder['comm']} "
                    f"(PID {holder['pid']}, {'unit ' + holder['unit'] if holder['unit'] else 'no systemd unit'}, "
                    f"on {', '.join(holder['address'])}), not by {entry['unit']}: stop that program, or give "
                    f"{entry['service']} another port"
                )
    return seen, problems
