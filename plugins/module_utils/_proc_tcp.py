# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""This host's TCP sockets as the kernel lists them in /proc/net/tcp and /proc/net/tcp6 (what ``ss -tan`` reads), with
nothing to install: the one parser of those tables, for the preflight's port holders, the RPC workers' probe and
llama-server's gate."""

from __future__ import annotations

import ipaddress
import os
from collections import namedtuple

#: TCP states as the tables print them (include/net/tcp_states.h).
ESTABLISHED = "01"
SYN_RECV = "03"
CLOSE_WAIT = "08"
LISTEN = "0A"
TABLES = ("tcp", "tcp6")

#: One socket: its local address (an ``ipaddress`` object, an IPv4-mapped IPv6 one as the table has it), local port,
#: state (upper-case hex) and inode (text, as ``/proc/PID/fd`` links name it: ``socket:[INODE]``).
Socket = namedtuple("Socket", "address port state inode")


def address_of(text):
    """An address of the tables (host-order 32-bit words in hex) as an ``ipaddress`` object."""
    raw = bytes.fromhex(text)
    if len(raw) not in (4, 16):
        raise ValueError(f"not an address of /proc/net/tcp: {text!r}")
    return ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))


def parse(texts):
    """Every socket in ``texts``, the contents of the tables (their header lines skipped, a malformed line too)."""
    found = []
    for text in texts:
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or ":" not in fields[1]:
                continue
            host, port = fields[1].rsplit(":", 1)
            try:
                address = address_of(host)
            except ValueError:
                continue
            inode = fields[9] if len(fields) > 9 else None
            found.append(Socket(address, int(port, 16), fields[3].upper(), inode))
    return found


def read(proc="/proc"):
    """This host's sockets (``parse`` of ``proc``'s tables; a table that cannot be read counts as empty)."""
    texts = []
    for table in TABLES:
        try:
            with open(os.path.join(proc, "net", table), encoding="ascii") as handle:
                texts.append(handle.read())
        except OSError:
            continue
    return parse(texts)
