# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who listens on a TCP port, and in which systemd unit: read from /proc (the kernel's socket tables, each process's
open descriptors and its cgroup), as ``ss -ltnp`` does, with nothing to install. Used by port_holders."""

from __future__ import annotations

import os
import re

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
_SOCKET = re.compile(r"^socket:\[(\d+)\]$")


def listening_inodes(port, proc="/proc"):
    """Socket inode -> local address of every TCP socket listening on ``port`` (IPv4 and IPv6)."""
    found = {}
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            with open(os.path.join(proc, "net", table), encoding="ascii") as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            address, _sep, hexport = fields[1].partition(":")
            if int(hexport, 16) == int(port) and len(address) == width:
                found[fields[9]] = _address(address)
    return found


def _address(hexaddr):
    """The text of a /proc/net/tcp{,6} address (host byte order words, as the kernel prints them)."""
    if len(hexaddr) == 8:
        return ".".join(str(b) for b in reversed(bytes.fromhex(hexaddr)))
    words = [bytes.fromhex(hexaddr[i : i + 8])[::-1] for i in range(0, 32, 8)]
    raw = b"".join(words)
    if raw == bytes(16):
        return "::"
    return ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))


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
