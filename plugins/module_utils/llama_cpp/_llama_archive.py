# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Safe extraction of the archives llama.cpp comes in: a source archive on the build host (``llama_cpp_build``) and a
binary archive on each node (``llama_cpp_install``).

No member may land outside the destination (absolute names, ``..``, links pointing out); devices and FIFOs are left
out; setuid/setgid bits and group/other write are dropped; files belong to the user that extracts (root on a node).
Standard library only: shipped to the managed host with the modules that use it.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build import (
    BuildError,
    is_safe_member,
    normalize_member,
)


def kind_of(path):
    """``zip`` or ``tar`` from the archive's content (as ansible.builtin.unarchive decides), whatever its name."""
    try:
        if zipfile.is_zipfile(path):
            return "zip"
        if tarfile.is_tarfile(path):
            return "tar"
    except (OSError, EOFError, tarfile.TarError) as exc:  # a gzip stream cut short: EOFError
        raise BuildError(f"{path}: cannot read the archive: {exc}") from exc
    raise BuildError(f"{path}: neither a tar nor a zip archive")


def _mode(mode, is_dir=False):
    """A member's permission bits as extracted: rwxr-xr-x for directories and executables, rw-r--r-- otherwise."""
    return mode & 0o755 if is_dir or mode & 0o111 else mode & 0o644


def _link_is_safe(name, target, hard=False):
    base = "" if hard else os.path.dirname(normalize_member(name))
    return not target.startswith("/") and is_safe_member(os.path.join(base, target))


def _extract_zip(src, dest, modes):
    with zipfile.ZipFile(src) as archive:
        infos = archive.infolist()
        bad = [info.filename for info in infos if not is_safe_member(info.filename)]
        if bad:
            raise BuildError(f"{src}: unsafe member path {bad[0]!r} in the archive")
        archive.extractall(dest)  # noqa: S202 - member names validated above
        # zipfile ignores the Unix modes (unzip, which unarchive runs, keeps them): binaries must stay executable.
        if modes:
            for info in infos:
                mode = info.external_attr >> 16
                path = os.path.join(dest, normalize_member(info.filename))
                if stat.S_ISLNK(mode):
                    target = archive.read(info).decode("utf-8", "surrogateescape")
                    if not _link_is_safe(info.filename, target):
                        raise BuildError(f"{src}: link {info.filename!r} points outside the archive")
                    os.unlink(path)
                    os.symlink(target, path)
                elif mode & 0o777:
                    os.chmod(path, _mode(mode, info.is_dir()))
        return [info.filename for info in infos], archive.comment


def _extract_tar(src, dest):
    with tarfile.open(src, "r:*") as archive:
        members = []
        for member in archive.getmembers():
            if not is_safe_member(member.name):
                raise BuildError(f"{src}: unsafe member path {member.name!r} in the archive")
            if member.issym() or member.islnk():
                if not _link_is_safe(member.name, member.linkname, hard=member.islnk()):
                    raise BuildError(f"{src}: link {member.name!r} points outside the archive")
            elif not (member.isfile() or member.isdir()):
                continue  # devices and FIFOs have no place in llama.cpp's archives
            member.mode = _mode(member.mode, member.isdir())
            member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
            members.append(member)
        if hasattr(tarfile, "data_filter"):
            archive.extractall(dest, members=members, filter="data")
        else:
            archive.extractall(dest, members=members)  # noqa: S202 - members validated above
        return [m.name for m in members], archive.pax_headers.get("comment")


def extract(src, kind, dest, modes=False):
    """Extract the archive ``src`` (``kind``: tar or zip) into ``dest``, a directory it creates; return (member names,
    archive comment). ``modes``: give a zip's members their Unix modes and links (a tar's are always kept)."""
    os.makedirs(dest)
    try:
        if kind == "zip":
            return _extract_zip(src, dest, modes)
        return _extract_tar(src, dest)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise BuildError(f"{src}: cannot extract the archive: {exc}") from exc
