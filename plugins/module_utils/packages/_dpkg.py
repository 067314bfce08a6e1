# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What apt would install, from dpkg's status and apt-get's simulation: no python3-apt needed.

``ansible.builtin.apt`` cannot run in check mode on a host without python3-apt (a bare Debian host): it installs the
library itself in a real run, which check mode may not. The commands here only read: ``dpkg-query`` for the names
asked for, ``apt-get install --simulate`` for what they would pull in (with apt's binary caches off, so that nothing
under /var/cache/apt is rewritten either).

Standard library only: this file is shipped to the managed host with the module.
"""

from __future__ import annotations

import re

# ${db:Status-Status}: "installed" is the only state in which a package's files are in place and configured.
DPKG_QUERY = ["dpkg-query", "--show", "--showformat=${Package}\t${db:Status-Status}\t${Version}\n"]

# Read-only simulation: no lock, no pkgcache.bin/srcpkgcache.bin rewritten, no question asked.
APT_SIMULATE = [
    "apt-get",
    "install",
    "--simulate",
    "--quiet",
    "--assume-yes",
    "-o",
    "Debug::NoLocking=true",
    "-o",
    "Dir::Cache::pkgcache=",
    "-o",
    "Dir::Cache::srcpkgcache=",
]

# "Inst libpopt0 (1.19+dfsg-1 Debian:12.9/stable [amd64])" or, for an upgrade, "Inst gcc-12-base [12.2.0-13] (...)".
_INST = re.compile(r"^Inst (?P<name>\S+)(?: \[(?P<old>[^\]]*)\])? \((?P<version>[^ )]+) [^\[]*\[(?P<arch>[^\]]+)\]")


def installed_states(output):
    """{package: (status, version)} from DPKG_QUERY's output (packages dpkg has never heard of are absent)."""
    states = {}
    for line in output.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0]:
            states[fields[0]] = (fields[1], fields[2])
    return states


def missing(names, states):
    """The names (in the order given, once each) that are not installed."""
    seen = []
    for name in names:
        if states.get(name, ("", ""))[0] != "installed" and name not in seen:
            seen.append(name)
    return seen


def simulate_command(names, install_recommends=None):
    """argv of apt-get's simulation of installing ``names`` (None: apt's configured default for recommends)."""
    argv = list(APT_SIMULATE)
    if install_recommends is not None:
        argv.append("--install-recommends" if install_recommends else "--no-install-recommends")
    return [*argv, "--", *names]


def simulation_entries(output):
    """(name, installed version or None, new version, architecture) of each package that apt-get's simulation would
    unpack, in its order (the one parser of ``Inst`` lines: _apt_repo uses it too)."""
    entries = []
    for line in output.splitlines():
        match = _INST.match(line.strip())
        if match:
            entries.append((match["name"], match["old"], match["version"], match["arch"]))
    return entries


def simulated(output):
    """[{name, version, upgrade}] of the packages apt-get's simulation would unpack, in its order."""
    return [
        {"name": name, "version": version, "upgrade": old is not None}
        for name, old, version, _arch in simulation_entries(output)
    ]


def summary(wanted, absent, would_install, simulation_error=None):
    """One readable paragraph for the task's message and the diff."""
    if not absent:
        return f"already installed: {' '.join(wanted)}"
    text = f"would install {' '.join(absent)}"
    if would_install:
        extra = [package["name"] for package in would_install if package["name"] not in absent]
        text += f" ({len(would_install)} package(s) in all"
        text += f"; with {' '.join(extra)})" if extra else ")"
    elif simulation_error:
        text += f" (their dependencies are not known: apt-get --simulate said {simulation_error})"
    return text
