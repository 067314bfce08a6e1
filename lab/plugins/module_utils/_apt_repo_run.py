# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``lab_apt_repo``: resolve, download, index and serve the lab's apt repository.

The pure parts (names, cache key, index text) are in ``_apt_repo``; this file runs apt-get, dpkg-deb and the
HTTP server, through the ``AnsibleModule`` it is given (``run_command``, ``get_bin_path``, ``fail_json``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import time

from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils._cache_lock import exclusive
from ansible_collections.llamarpc.lab.plugins.module_utils._apt_repo import (
    AptRepoError,
    deb_filename,
    dpkg_arch,
    packages_index,
    packages_stanza,
    parse_control,
    parse_simulation,
    release_text,
    repo_key,
    sources_entry,
    validate_packages,
)
from ansible_collections.llamarpc.lab.plugins.module_utils._lab import find_mirror

MARKER = "repo.json"
PIDFILE = "apt-repo.pid"


def digests(path):
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            md5.update(chunk)
            sha.update(chunk)
    return {"md5": md5.hexdigest(), "sha256": sha.hexdigest()}


class Repo:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.arch = dpkg_arch(platform.machine())

    def apt_options(self, work, archives):
        """apt-get options that use a private state and this suite only, with the image's dpkg status."""
        opts = {
            "Dir::Etc::SourceList": os.path.join(work, "sources.list"),
            "Dir::Etc::SourceParts": os.path.join(work, "sources.list.d"),
            "Dir::Etc::Preferences": os.path.join(work, "preferences"),
            "Dir::Etc::PreferencesParts": os.path.join(work, "preferences.d"),
            "Dir::State::Lists": os.path.join(work, "lists"),
            "Dir::State::status": os.path.join(self.params["image"], "var/lib/dpkg/status"),
            "Dir::Cache": os.path.join(work, "cache"),
            "Dir::Cache::archives": archives,
            "APT::Architecture": self.arch,
            "APT::Architectures": self.arch,
            "APT::Install-Recommends": "false",
            "Debug::NoLocking": "true",
        }
        return [arg for k, v in opts.items() for arg in ("-o", f"{k}={v}")]

    def run(self, argv, tmpdir=None):
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        if tmpdir:
            env["TMPDIR"] = tmpdir
        rc, out, err = self.module.run_command(argv, environ_update=env)
        if rc != 0:
            tail = (out + err).strip().splitlines()[-15:]
            self.module.fail_json(
                msg=f"apt repository step failed (rc={rc}): {' '.join(argv[:1] + argv[-4:])}", stderr_lines=tail
            )
        return out

    def build(self, top, packages):
        """Resolve, download and index into ``top`` (renamed into place only when complete)."""
        work = top + ".work"
        archives = os.path.join(
            self.params["cache_dir"], "apt-archives"
        )  # shared: a new key downloads only what is new
        plan = self.download(work, archives, packages)
        tmp = top + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        self.index(tmp, plan, archives)
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as handle:
            json.dump({"packages": packages, "debs": len(plan), "suite": self.params["suite"]}, handle)
        shutil.rmtree(top, ignore_errors=True)
        os.rename(tmp, top)
        shutil.rmtree(work, ignore_errors=True)
        return len(plan)

    def download(self, work, archives, packages):
        """apt-get's plan for ``packages`` (its private state in ``work``), downloaded into ``archives``."""
        apt_get = self.module.get_bin_path("apt-get", required=True)
        self.module.get_bin_path("dpkg-deb", required=True)
        mirror = self.params["mirror"] or find_mirror(self.params["suite"])
        if not mirror:
            self.module.fail_json(msg=f"no apt source for suite {self.params['suite']} on the controller: set mirror")
        shutil.rmtree(work, ignore_errors=True)
        for sub in ("lists/partial", "cache", "sources.list.d", "preferences.d"):
            os.makedirs(os.path.join(work, sub))
        os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
        with open(os.path.join(work, "sources.list"), "w", encoding="utf-8") as handle:
            handle.write(f"deb [signed-by={self.params['keyring']}] {mirror} {self.params['suite']} main\n")
        opts = self.apt_options(work, archives)
        # apt checks signatures as its unprivileged _apt user, in TMPDIR: one it can write whatever /tmp is like.
        tmpdir = os.path.join(work, "tmp")
        os.makedirs(tmpdir)
        os.chmod(tmpdir, 0o1777)  # noqa: S103 - sticky like /tmp: the _apt user writes here
        self.run([apt_get, *opts, "-qq", "update"], tmpdir)
        plan = parse_simulation(self.run([apt_get, *opts, "install", "--simulate", *packages]))
        self.run([apt_get, *opts, "-qq", "--download-only", "-y", "install", *packages])
        return plan

    def index(self, tmp, plan, archives):
        """The planned .deb files linked into ``tmp``, with their Packages index and Release file."""
        dpkg_deb = self.module.get_bin_path("dpkg-deb", required=True)
        stanzas = []
        for name, version, arch in plan:
            filename = deb_filename(name, version, arch)
            src = os.path.join(archives, filename)
            if not os.path.isfile(src):
                self.module.fail_json(msg=f"apt planned {filename} but did not download it")
            dest = os.path.join(tmp, filename)
            try:
                os.link(src, dest)  # the download cache and the repository share the file
            except OSError:
                shutil.copyfile(src, dest)
            control = parse_control(self.run([dpkg_deb, "--field", dest]))
            stanzas.append(packages_stanza(control, filename, os.path.getsize(dest), digests(dest)))
        index = packages_index(stanzas)
        with open(os.path.join(tmp, "Packages"), "w", encoding="utf-8") as handle:
            handle.write(index)
        sha = hashlib.sha256(index.encode()).hexdigest()
        with open(os.path.join(tmp, "Release"), "w", encoding="utf-8") as handle:
            handle.write(release_text(self.params["suite"], self.arch, {"Packages": (len(index.encode()), sha)}))

    def pid(self):
        try:
            with open(os.path.join(self.params["state_dir"], PIDFILE), encoding="ascii") as handle:
                pid = int(handle.read().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def serving(self, url):
        """True when the repository answers at ``url`` with its Release file."""
        try:
            return open_url(url + "Release", timeout=3).getcode() == 200
        except Exception:  # noqa: BLE001 - any failure means not serving
            return False

    def serve(self, top, url):
        pid = self.pid()
        if pid and self.serving(url):
            return False
        if self.module.check_mode:
            return True
        self.stop()
        ssd = self.module.get_bin_path("start-stop-daemon", required=True)
        pidfile = os.path.join(self.params["state_dir"], PIDFILE)
        argv = [
            ssd,
            "--start",
            "--background",
            "--make-pidfile",
            "--pidfile",
            pidfile,
            "--exec",
            "/usr/bin/python3",
            "--",
            "-m",
            "http.server",
            "--bind",
            self.params["address"],
            "--directory",
            top,
            str(self.params["port"]),
        ]
        self.run(argv)
        deadline = time.monotonic() + 30
        while not self.serving(url):
            if time.monotonic() > deadline:
                self.module.fail_json(msg=f"the lab's apt repository does not answer at {url} (port in use?)")
            time.sleep(0.2)
        return True

    def stop(self):
        pid = self.pid()
        if not pid:
            return False
        if not self.module.check_mode:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while self.pid() and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.pid():
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.params["state_dir"], PIDFILE))
        return True


def run_module(module):
    """The module's result: the repository ready and served (state present) or its server stopped (absent)."""
    p = module.params
    if p["address"]:
        p["address"] = p["address"].split("/", 1)[0]
    repo = Repo(module)
    if p["state"] == "absent":
        return {"changed": repo.stop()}
    try:
        packages = validate_packages(p["packages"])
    except AptRepoError as exc:
        module.fail_json(msg=str(exc))
    key = repo_key(p["suite"], repo.arch, packages, p["image_key"])
    top = os.path.join(p["cache_dir"], f"apt-{key}")
    url = f"http://{p['address']}:{p['port']}/"
    result = {"url": url, "sources": sources_entry(url), "repo_dir": top, "key": key, "build_seconds": 0.0}
    changed = False
    marker = os.path.join(top, MARKER)
    if not os.path.isfile(marker):
        if module.check_mode:
            return {"changed": True, "debs": 0, **result}
        # Labs booted at the same time share the download cache: one builds, the others wait and reuse it.
        with exclusive(p["cache_dir"], "apt-repo.lock"):
            if not os.path.isfile(marker):
                changed = True
                started = time.monotonic()
                try:
                    repo.build(top, packages)
                except AptRepoError as exc:
                    module.fail_json(msg=str(exc))
                result["build_seconds"] = round(time.monotonic() - started, 1)
    with open(marker, encoding="utf-8") as handle:
        result["debs"] = json.load(handle)["debs"]
    changed = repo.serve(top, url) or changed
    return {"changed": changed, **result}
