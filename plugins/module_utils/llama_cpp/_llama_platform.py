# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where llama.cpp may be built, and the controller's cache of builds.

A build runs on one host and its binaries are copied to every node, so they must run there: same architecture,
same OS family, and a glibc on the build host no newer than each node's (a binary asks for the glibc symbol
versions of the glibc it was linked against). ``compat_problems`` says what is wrong with a build host for a set
of nodes, from each host's platform facts (``platform_from``: what ``llama_cpp_platform_facts`` gathers).

The controller keeps each build it shipped, under a key known before anything is built (``controller_key``: the
source, the flags, the targets and the build host's platform, no compiler version), so that a later run with the
same key ships the cached archive without touching a build host. Standard library only, side-effect free except
the functions that read or write a cache entry they are handed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build import (
    default_cmake_flags,
    normalize_sha256,
)

SUPPORTED_OS_FAMILIES = ("Debian",)  # Debian and Ubuntu (and their derivatives): the roles install with apt
CONTROLLER_FORMAT = 1  # bump when the controller entry's layout or the key's meaning changes
RECORD = "build.json"  # written last: an entry without it is incomplete
ARCHIVE = "bin.tar.gz"

_GLIBC_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_FAMILIES = {
    "debian": "Debian",
    "ubuntu": "Debian",
    "rhel": "RedHat",
    "fedora": "RedHat",
    "centos": "RedHat",
    "suse": "Suse",
    "opensuse": "Suse",
    "arch": "Archlinux",
    "alpine": "Alpine",
    "gentoo": "Gentoo",
}


def parse_os_release(text):
    """The fields of an ``/etc/os-release`` file (KEY=value, values unquoted)."""
    fields = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key.strip()] = value
    return fields


def os_family(os_id, id_like=""):
    """The OS family (Ansible's names: Debian, RedHat, ...) of an os-release ID and ID_LIKE; the ID otherwise."""
    for name in [os_id, *str(id_like or "").split()]:
        family = _FAMILIES.get(str(name).lower())
        if family:
            return family
    return str(os_id or "unknown")


def glibc_version(text):
    """``(major, minor)`` of a glibc version string ("2.36", "glibc 2.36", "GNU C Library ... 2.36"), or None."""
    match = _GLIBC_RE.search(str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def platform_from(machine, os_release_text, libc_name, libc_version, cpu_flags=()):
    """The platform facts of one host: what decides whether binaries built on it run elsewhere."""
    release = parse_os_release(os_release_text)
    flags = sorted({str(flag) for flag in cpu_flags})
    return {
        "architecture": str(machine),
        "os_family": os_family(release.get("ID", ""), release.get("ID_LIKE", "")),
        "distribution": release.get("ID", "unknown"),
        "distribution_version": release.get("VERSION_ID", ""),
        "pretty_name": release.get("PRETTY_NAME", release.get("ID", "unknown")),
        "libc": "glibc" if str(libc_name).lower() == "glibc" else str(libc_name or "unknown"),
        "libc_version": str(libc_version or ""),
        "cpu_flags_sha256": hashlib.sha256(" ".join(flags).encode()).hexdigest() if flags else "",
    }


def _describe(platform):
    libc = f"{platform.get('libc', '?')} {platform.get('libc_version') or '?'}"
    return f"{platform.get('architecture', '?')}, {platform.get('pretty_name') or platform.get('distribution')}, {libc}"


def _list(nodes, hosts, field):
    return ", ".join(f"{host} ({nodes[host].get(field)})" for host in hosts)


def unsupported_problems(platforms):
    """One message per host whose OS family the roles do not support (they install packages with apt)."""
    problems = []
    for host in sorted(platforms):
        family = platforms[host].get("os_family")
        if family not in SUPPORTED_OS_FAMILIES:
            problems.append(
                f"{host} runs {platforms[host].get('pretty_name') or family} (OS family {family}): the collection "
                f"supports the {' and '.join(SUPPORTED_OS_FAMILIES)} family only (Debian, Ubuntu); take the host out "
                "of the inventory or install a supported OS"
            )
    return problems


def compat_problems(build_host, build, nodes):
    """Why binaries built on ``build_host`` (platform ``build``) would not run on ``nodes`` (host -> platform).

    Empty when they run everywhere. Each message names the hosts and the fix.
    """
    problems = unsupported_problems({build_host: build, **nodes})
    if problems:
        return problems
    fix = (
        "set llama_cpp_build_host to a node of the same architecture and OS family with the oldest glibc of the "
        "nodes (by default the build runs on the first host of the play)"
    )
    arch = [host for host in sorted(nodes) if nodes[host].get("architecture") != build.get("architecture")]
    if arch:
        problems.append(
            f"the build host {build_host} ({_describe(build)}) builds {build.get('architecture')} binaries, which "
            f"do not run on {_list(nodes, arch, 'architecture')}: {fix}"
        )
    family = [host for host in sorted(nodes) if nodes[host].get("os_family") != build.get("os_family")]
    if family:
        problems.append(
            f"the build host {build_host} ({_describe(build)}) is of the {build.get('os_family')} family, "
            f"{_list(nodes, family, 'os_family')} not: {fix}"
        )
    if build.get("libc") != "glibc":
        problems.append(f"the build host {build_host} ({_describe(build)}) has no glibc: {fix}")
        return problems
    built = glibc_version(build.get("libc_version"))
    older = []
    for host in sorted(nodes):
        if host in arch or host in family:
            continue
        theirs = glibc_version(nodes[host].get("libc_version")) if nodes[host].get("libc") == "glibc" else None
        if built is None or theirs is None or theirs < built:
            older.append(f"{host} ({nodes[host].get('libc', '?')} {nodes[host].get('libc_version') or '?'})")
    if older:
        problems.append(
            f"the build host {build_host} has glibc {build.get('libc_version') or '?'}, newer than "
            f"{', '.join(older)}: its binaries would fail there with 'GLIBC_... not found'; {fix}"
        )
    return problems


def controller_key(checksum, *, subdir, cmake_flags, cpu, targets, platform, helpers=(), patches=()):
    """The controller cache key of a build: known before building, from the build host's platform facts.

    It holds the source's sha256, the subdir, the configure flags (the build module's defaults for the
    architecture and ``cpu`` when ``cmake_flags`` is empty), the targets, and the build host's architecture, OS
    family, distribution and release, libc and its version - plus the CPU's flags for a native build, which is
    tuned to them. Not the compiler's version: a distribution release fixes its compiler's major version (the
    build host's own cache, keyed by the compiler's version line too, tells a point release apart). ``helpers``
    (``_llama_build.helper_sources`` of the controller's copies) add each program's name and source sha256, as in
    the build host's key; without them the key is the one from before helpers existed. ``patches``
    (``_llama_build.patch_sources``) add each patch's name and sha256 in order, likewise.
    """
    arch = platform.get("architecture", "")
    flags = list(cmake_flags) if cmake_flags else default_cmake_flags(arch, cpu)
    native = "-DGGML_NATIVE=ON" in flags
    material = {
        "format": CONTROLLER_FORMAT,
        "source_sha256": normalize_sha256(checksum),
        "subdir": subdir or "",
        "cmake_flags": flags,
        "targets": list(targets),
        "platform": {
            name: platform.get(name, "")
            for name in ("architecture", "os_family", "distribution", "distribution_version", "libc", "libc_version")
        },
        "cpu_flags_sha256": platform.get("cpu_flags_sha256", "") if native else "",
    }
    if helpers:
        material["helpers"] = [[h["name"], h["sha256"]] for h in helpers]
    if patches:
        material["patches"] = [[p["name"], p["sha256"]] for p in patches]
    blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def build_record(key, build_result, archive_sha256, archive_size, build_host, platform):
    """The ``build.json`` of a controller entry: what install needs without the build host."""
    manifest = build_result.get("manifest") or {}
    return {
        "format": CONTROLLER_FORMAT,
        "controller_key": key,
        "key": build_result["key"],
        "rpc_server": build_result.get("rpc_server") or "",
        "rpc_protocol": build_result.get("rpc_protocol"),
        "built_targets": manifest.get("built_targets", []),
        # Each patch of the key: name, sha256, applied (and why not: the source it does not apply to builds without it).
        "patches": manifest.get("patches", []),
        "external_libraries": manifest.get("external_libraries", []),
        "files": sorted(item["path"].split("/", 1)[-1] for item in manifest.get("files", []) if "path" in item),
        "archive_sha256": archive_sha256,
        "archive_size": archive_size,
        "build_host": build_host,
        "platform": platform,
        # The build's own seconds: a build followed in the background is picked up as a cache hit (0.0 s).
        "build_seconds": manifest.get("build_seconds") or build_result.get("build_seconds", 0.0),
        "built_at": manifest.get("built_at", ""),
    }


def record_problem(entry_dir, record, key):
    """Why the controller entry at ``entry_dir`` with ``record`` (its build.json) cannot be used; "" when it can.

    Checks the key, the record's fields and the archive's size (its sha256 is checked when it is shipped).
    """
    if not isinstance(record, dict):
        return f"{RECORD} unreadable"
    if record.get("format") != CONTROLLER_FORMAT:
        return f"{RECORD} format {record.get('format')!r}, expected {CONTROLLER_FORMAT}"
    if record.get("controller_key") != key:
        return f"{RECORD} is for key {record.get('controller_key')!r}"
    for name in ("key", "archive_sha256", "archive_size"):
        if not record.get(name):
            return f"{RECORD} lacks {name}"
    archive = os.path.join(entry_dir, ARCHIVE)
    try:
        size = os.path.getsize(archive)
    except OSError:
        return f"{ARCHIVE} missing"
    if size != record["archive_size"]:
        return f"{ARCHIVE} is {size} bytes, {RECORD} says {record['archive_size']}"
    return ""


def load_record(entry_dir):
    """The build.json of a controller entry, or None when missing or unreadable."""
    try:
        with open(os.path.join(entry_dir, RECORD), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_record(entry_dir, record):
    """Write build.json atomically and durably (``_atomic.write_atomic``): the entry is complete once it is there."""
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    _atomic.write_atomic(os.path.join(entry_dir, RECORD), text, mode=0o644)
