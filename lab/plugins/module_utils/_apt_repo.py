# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers for the lab's local apt repository (module ``lab_apt_repo``).

The lab's hosts boot from a bare image, like fresh cloud VMs, and have no route beyond the lab. The roles'
own ``ansible.builtin.apt`` tasks install what they need from a flat repository that the controller fills
with the .deb files apt downloads for a list of package names (resolved against the image's own dpkg
status, so exactly what the bare hosts lack), indexes here, and serves on the lab bridge.
"""

from __future__ import annotations

import hashlib
import json
import re

from ansible_collections.llamarpc.cluster.plugins.module_utils.packages._dpkg import simulation_entries

# Bump when the layout of a repository or the way it is resolved changes: cached repositories are rebuilt.
REPO_RECIPE = 1

_PKG_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")

# The order apt's own Packages files use; any other field follows in the order the control file has.
_FIELD_ORDER = ("Package", "Source", "Version", "Installed-Size", "Maintainer", "Architecture")


class AptRepoError(ValueError):
    """A repository request that cannot succeed; the message is meant for the user."""


def validate_packages(packages):
    """Sorted, de-duplicated package names; a name apt would not accept is refused before any download."""
    bad = [p for p in packages if not isinstance(p, str) or not _PKG_NAME_RE.match(p)]
    if bad:
        raise AptRepoError(f"not Debian package names: {', '.join(map(repr, bad))}")
    return sorted(set(packages))


def repo_key(suite, arch, packages, image_key):
    """Cache key of a repository: the suite, architecture, requested names and the image it completes."""
    doc = {
        "suite": suite,
        "arch": arch,
        "packages": sorted(set(packages)),
        "image": image_key,
        "recipe": REPO_RECIPE,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def parse_simulation(text):
    """The (package, version, architecture) apt would install, from ``apt-get install --simulate`` output."""
    return [(name, version, arch) for name, _old, version, arch in simulation_entries(text)]


def deb_filename(package, version, arch):
    """The file name apt gives a downloaded package (an epoch's ':' is written as %3a)."""
    return f"{package}_{version.replace(':', '%3a')}_{arch}.deb"


def parse_control(text):
    """Fields of one control paragraph (continuation lines kept), in their order."""
    fields = {}
    name = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t" and name:
            fields[name] += "\n" + line
            continue
        if ":" not in line:
            raise AptRepoError(f"not a control field: {line!r}")
        name, value = line.split(":", 1)
        fields[name] = value.strip()
    if "Package" not in fields or "Version" not in fields:
        raise AptRepoError("control paragraph without Package or Version")
    return fields


def packages_stanza(fields, filename, size, digests):
    """One stanza of a Packages index: the control fields, then where the file is and its hashes."""
    ordered = [k for k in _FIELD_ORDER if k in fields] + [k for k in fields if k not in _FIELD_ORDER]
    lines = [f"{k}: {fields[k]}" for k in ordered]
    lines.append(f"Filename: ./{filename}")
    lines.append(f"Size: {size}")
    lines.append(f"MD5sum: {digests['md5']}")
    lines.append(f"SHA256: {digests['sha256']}")
    return "\n".join(lines) + "\n"


def packages_index(stanzas):
    """A Packages file from stanzas, sorted by package name so that the same files give the same index."""
    return "\n".join(sorted(stanzas, key=lambda s: s.split("\n", 1)[0])) if stanzas else ""


def release_text(suite, arch, files):
    """A flat repository's Release file; ``files`` maps an index file name to (size, sha256)."""
    lines = [
        "Origin: llamarpc-lab",
        "Label: llamarpc-lab",
        f"Suite: {suite}",
        f"Codename: {suite}",
        f"Architectures: {arch} all",
        "SHA256:",
    ]
    for name in sorted(files):
        size, sha = files[name]
        lines.append(f" {sha} {size} {name}")
    return "\n".join(lines) + "\n"


def sources_entry(url):
    """The apt source a lab host gets (deb822).

    ``Trusted: yes`` because the flat repository is unsigned: it is reachable only on the lab bridge, and
    every file in it was downloaded by the controller's apt, which checked it against the suite's signed
    Release file.
    """
    return f"Types: deb\nURIs: {url}\nSuites: ./\nTrusted: yes\n"


def dpkg_arch(machine):
    """Debian's name for a machine architecture (``platform.machine()``)."""
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf", "i686": "i386"}.get(machine, machine)
