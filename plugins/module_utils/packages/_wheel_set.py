# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A set of wheels resolved on the controller for another host's Python, and installed there without an index.

``wheel_set`` (controller): uv resolves the requirements with the host's environment markers (its full Python version,
machine and C library), writes the pinned result with every file's hash (``requirements.lock``), and pip downloads
exactly that list, checked against those hashes, into one archive beside the lock. pip's ``--python-version`` alone
chooses compatible wheels but judges dependency markers for the controller's own interpreter: a dependency marked
``python_full_version < "3.11.3"`` is skipped for a 3.13 controller and missing on a 3.11.2 host.

``wheel_set_install`` (host): a new virtualenv per wheel set under ``releases/``, filled from the archive with
``pip --no-index --require-hashes`` (the host's own pip checks that the lock covers its markers), then a symlink
switched to it in one rename. A failed install removes its own virtualenv and leaves the link, and the service that
runs from it, as they were.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic

LOCK = "requirements.lock"
ARCHIVE = "wheels.tar"
# uv's --python-platform names manylinux targets from 2.17 to 2.40 (uv 0.13).
UV_GLIBC_RANGE = (17, 40)
MACHINES = ("x86_64", "aarch64")

RESOLVE_SPEC = {
    "requirements": {"type": "list", "elements": "str", "required": True},
    "dest": {"type": "path", "required": True},
    "python_version": {"type": "str", "required": True},
    "machine": {"type": "str", "required": True, "choices": list(MACHINES)},
    "glibc": {"type": "str", "required": True},
    "index_url": {"type": "str", "default": ""},
    "no_index": {"type": "bool", "default": False},
    "extra_index_urls": {"type": "list", "elements": "str", "default": []},
    "find_links": {"type": "list", "elements": "str", "default": []},
    "uv": {"type": "path", "default": "uv"},
    "python": {"type": "path"},
}
RESOLVE_RULES = {"mutually_exclusive": [("index_url", "no_index")]}

INSTALL_SPEC = {
    "archive": {"type": "path", "required": True},
    "prefix": {"type": "path", "required": True},
    "release": {"type": "str", "required": True},
    "python": {"type": "path", "default": "/usr/bin/python3"},
}


class WheelSetError(Exception):
    """A failure with a message a user can act on."""


def version_tuple(version):
    """``"3.11.2"`` as ``(3, 11, 2)``; a version without its micro part is refused (markers need it)."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", str(version).strip())
    if not match:
        raise WheelSetError(f"python_version must be the host's full Python version X.Y.Z, got {version!r}")
    return tuple(int(part) for part in match.groups())


def glibc_minor(glibc):
    """The minor number of a glibc version (``"2.36"``, ``"glibc 2.36"``)."""
    match = re.search(r"\b2\.(\d+)", str(glibc))
    if not match:
        raise WheelSetError(f"glibc must be the host's C library version 2.N, got {glibc!r}")
    return int(match.group(1))


def uv_platform(machine, glibc):
    """uv's ``--python-platform`` for a glibc host: the newest manylinux target its C library runs."""
    low, high = UV_GLIBC_RANGE
    minor = glibc_minor(glibc)
    if minor < low:
        raise WheelSetError(f"glibc 2.{minor} is older than manylinux 2.{low}, the oldest target the resolver knows")
    return f"{machine}-manylinux_2_{min(minor, high)}"


def pip_platforms(machine, glibc):
    """pip's ``--platform`` tags a glibc host runs, newest first (manylinux_2_N down to the legacy aliases)."""
    minor = glibc_minor(glibc)
    tags = [f"manylinux_2_{n}_{machine}" for n in range(minor, 16, -1)]
    return [*tags, *(f"{legacy}_{machine}" for legacy in ("manylinux2014", "manylinux2010", "manylinux1", "linux"))]


def _sources(index_url, no_index, extra_index_urls, find_links):
    argv = ["--no-index"] if no_index else ([f"--index-url={index_url}"] if index_url else [])
    argv += [f"--extra-index-url={url}" for url in extra_index_urls]
    return argv + [f"--find-links={link}" for link in find_links]


def compile_argv(uv, python, params):
    """uv resolving ``requirements`` (read from stdin) for the host: its full Python version and platform, every file
    of each pin with its hash. Best match over every index, as pip does: only the pins choose an index."""
    major, minor, micro = version_tuple(params["python_version"])
    argv = [uv, "pip", "compile", "-", "--quiet", "--no-header", "--generate-hashes", "--only-binary=:all:"]
    argv += ["--python-version", f"{major}.{minor}.{micro}"]
    argv += ["--python-platform", uv_platform(params["machine"], params["glibc"])]
    argv += ["--index-strategy", "unsafe-best-match"] + (["--python", python] if python else [])
    return argv + _sources(params["index_url"], params["no_index"], params["extra_index_urls"], params["find_links"])


def download_argv(python, lock, dest, params):
    """pip downloading exactly the pinned list (no resolution of its own, every file checked against its hash)."""
    major, minor, micro = version_tuple(params["python_version"])
    argv = [python, "-m", "pip", "download", "--disable-pip-version-check", "--quiet", "--no-deps"]
    argv += ["--require-hashes", "--only-binary=:all:", "--dest", dest, "-r", lock]
    argv += ["--python-version", f"{major}.{minor}.{micro}", "--implementation", "cp", "--abi", f"cp{major}{minor}"]
    argv += [f"--platform={tag}" for tag in pip_platforms(params["machine"], params["glibc"])]
    return argv + _sources(params["index_url"], params["no_index"], params["extra_index_urls"], params["find_links"])


def install_argv(venv, wheels):
    """The host's pip installing the lock from the copied wheels only; it resolves again with the host's own markers
    and, in hash-checking mode, refuses any distribution the lock does not name."""
    return [
        os.path.join(venv, "bin", "pip"),
        "install",
        "--no-index",
        "--disable-pip-version-check",
        "--quiet",
        "--require-hashes",
        "--only-binary=:all:",
        "--find-links",
        wheels,
        "-r",
        os.path.join(wheels, LOCK),
    ]


def normalize(name):
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text):
    """The pins of a lock written by ``uv pip compile --generate-hashes``: ``[{name, version, hashes}]``."""
    packages = []
    for raw in re.sub(r"\\\n", " ", text).splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)", line)
        if not match:
            raise WheelSetError(f"the lock has a line that is not a pin: {line!r}")
        hashes = re.findall(r"--hash=(\S+)", line)
        packages.append({"name": normalize(match.group(1)), "version": match.group(3), "hashes": hashes})
    return packages


def wheel_name(filename):
    """The normalized distribution name of a wheel file."""
    return normalize(filename.split("-", 1)[0])


def missing_wheels(packages, filenames):
    """Pins of the lock that no downloaded wheel provides."""
    present = {wheel_name(name) for name in filenames if name.endswith(".whl")}
    return sorted(package["name"] for package in packages if package["name"] not in present)


def tail(text, lines=4):
    """The last non-empty lines of a tool's output, on one line."""
    return " ".join(line.strip() for line in (text or "").strip().splitlines()[-lines:])


def _archive(dest, wheels_dir, lock):
    shutil.copyfile(lock, os.path.join(wheels_dir, LOCK))
    partial = os.path.join(dest, f"{ARCHIVE}.partial")
    with tarfile.open(partial, "w") as tar:
        tar.add(wheels_dir, arcname="wheels")
    _atomic.finalise(partial, os.path.join(dest, ARCHIVE))


def _run(module, argv, what, data=None):
    rc, out, err = module.run_command(argv, data=data, binary_data=True, environ_update={"LC_ALL": "C"})
    if rc != 0:
        raise WheelSetError(f"{what} failed (rc {rc}): {tail(err or out)}")
    return out


def resolve(module):
    """The module ``wheel_set``: its result (fails through ``module.fail_json``)."""
    params = module.params
    dest, lock, archive = params["dest"], os.path.join(params["dest"], LOCK), os.path.join(params["dest"], ARCHIVE)
    result = {"changed": False, "lock": lock, "archive": archive, "resolved": os.path.exists(lock)}
    try:
        result["uv_platform"] = uv_platform(params["machine"], params["glibc"])
        version_tuple(params["python_version"])
        if os.path.exists(archive) and os.path.exists(lock):
            with open(lock, encoding="utf-8") as handle:
                return dict(result, packages=parse_lock(handle.read()), msg=f"wheel set cached in {dest}")
        if module.check_mode:
            return dict(result, changed=True, packages=[], msg=f"the wheel set would be resolved and fetched to {dest}")
        os.makedirs(dest, exist_ok=True)
        python = params["python"] or module.get_bin_path("python3", required=True)
        if not os.path.exists(lock):  # resolved once: a re-run downloads the same pins
            uv = params["uv"] if os.path.isabs(params["uv"]) else module.get_bin_path(params["uv"])
            if not uv or not os.access(uv, os.X_OK):
                raise WheelSetError(f"uv is not on this machine ({params['uv']}): it resolves for the host's Python")
            requirements = "\n".join(params["requirements"]) + "\n"
            text = _run(module, compile_argv(uv, python, params), "resolving with uv", data=requirements)
            parse_lock(text)
            _atomic.write_atomic(lock, text, mode=0o644)
        with open(lock, encoding="utf-8") as handle:
            packages = parse_lock(handle.read())
        wheels_dir = os.path.join(dest, "wheels")
        shutil.rmtree(wheels_dir, ignore_errors=True)
        _run(module, download_argv(python, lock, wheels_dir, params), "downloading the pinned wheels with pip")
        missing = missing_wheels(packages, os.listdir(wheels_dir))
        if missing:
            raise WheelSetError(f"pip downloaded no wheel for {', '.join(missing)} of the lock {lock}")
        _archive(dest, wheels_dir, lock)
        shutil.rmtree(wheels_dir)
    except (WheelSetError, OSError, tarfile.TarError) as exc:
        module.fail_json(msg=str(exc), **result)
    return dict(result, changed=True, resolved=True, packages=packages, msg=f"{len(packages)} wheels resolved for "
                f"Python {params['python_version']} on {result['uv_platform']} in {dest}")  # fmt: skip


def _unpack(archive, dest):
    """The archive ``wheel_set`` wrote: regular files under ``wheels/`` only."""
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            parts = member.name.split("/")
            if not (member.isfile() or member.isdir()) or parts[0] != "wheels" or ".." in parts:
                raise WheelSetError(f"{archive} is not a wheel set archive ({member.name})")
        tar.extractall(dest, members=members)  # noqa: S202 - every member checked above


def current_release(link):
    """The release a ``venv`` link points at: its target, or None (no link, or a plain directory of an older layout)."""
    return os.path.realpath(link) if os.path.islink(link) else None


def switch_link(link, target):
    """Point ``link`` at ``target`` in one rename: a reader sees the old target or the new one, never nothing."""
    partial = f"{link}.partial"
    if os.path.lexists(partial):
        os.unlink(partial)
    os.symlink(target, partial)
    os.replace(partial, link)
    _atomic.fsync_dir(os.path.dirname(os.path.abspath(link)))


def stale_releases(releases_dir, keep):
    """Release directories other than those in ``keep`` (the new one and the one it replaces)."""
    if not os.path.isdir(releases_dir):
        return []
    kept = {os.path.realpath(path) for path in keep if path}
    paths = (os.path.join(releases_dir, name) for name in sorted(os.listdir(releases_dir)))
    return [path for path in paths if os.path.realpath(path) not in kept]


def install(module):
    """The module ``wheel_set_install``: its result (fails through ``module.fail_json``)."""
    params = module.params
    prefix, release = params["prefix"], params["release"]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", release):
        module.fail_json(msg=f"release must be a plain directory name, got {release!r}")
    link, releases_dir = os.path.join(prefix, "venv"), os.path.join(prefix, "releases")
    new = os.path.join(releases_dir, release)
    before = current_release(link)
    legacy = os.path.isdir(link) and not os.path.islink(link)
    result = {"changed": False, "venv": link, "release": new, "previous": before}
    if before == os.path.realpath(new):
        return dict(result, msg=f"{link} is {new} already")
    if module.check_mode:
        return dict(result, changed=True, msg=f"{link} would be installed anew as {new}")
    kept = f"the previous install ({before or link}) is left as it was" if before or legacy else "nothing was installed"
    staging = os.path.join(prefix, "wheels-staging")
    try:
        os.makedirs(releases_dir, mode=0o755, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(new, ignore_errors=True)  # a failed run's remains
        _unpack(params["archive"], staging)
        _run(module, [params["python"], "-m", "venv", new], "creating the virtualenv")
        _run(module, install_argv(new, os.path.join(staging, "wheels")), "installing the wheels with pip")
    except (WheelSetError, OSError, tarfile.TarError) as exc:
        shutil.rmtree(new, ignore_errors=True)
        module.fail_json(msg=f"installing {release} into {new} failed, {kept}: {exc}", **result)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if legacy:  # an older layout's plain virtualenv: kept beside the releases as the one replaced
        before = os.path.join(releases_dir, "previous")
        shutil.rmtree(before, ignore_errors=True)
        os.rename(link, before)
    switch_link(link, new)
    removed = stale_releases(releases_dir, [new, before])
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return dict(result, changed=True, removed=removed, msg=f"{link} now points at {new}")
