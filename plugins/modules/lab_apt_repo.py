#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_apt_repo
short_description: Prepare and serve the local apt repository from which bare lab hosts install packages
version_added: 0.2.0
description:
  - Lab hosts boot from a bare image (like a fresh cloud VM) and have no route beyond the lab, so the roles'
    own C(ansible.builtin.apt) tasks install from a package source the controller prepares and serves on
    the lab bridge alone.
  - The controller's apt resolves O(packages) against the image's own dpkg status (so exactly what a bare
    host lacks, without recommended packages), downloads them from O(mirror) (checked against the suite's
    signed Release file), and writes a flat repository of those .deb files with its C(Packages) and
    C(Release) index. It is cached under O(cache_dir) by a key over suite, architecture, names and image; a
    later run with the same key downloads nothing.
  - With O(state=present) the repository is served over HTTP on O(address):O(port) only (a
    C(python3 -m http.server) daemon whose pid file is in O(state_dir)); O(state=absent) stops it.
  - A package a role asks for that is not in O(packages) is simply not there, as on a host whose sources
    lack it; the lab role keeps the list of every package the collection's roles install.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - apt-get, dpkg-deb and start-stop-daemon on a Debian controller, run as root
options:
  state:
    description: C(present) prepares (or reuses) the repository and serves it; C(absent) stops serving.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description: The lab's state directory (pid file of the server, apt's private state for this lab).
    type: path
    required: true
  cache_dir:
    description: Directory holding cached repositories (one per key) and downloaded packages.
      Required when O(state=present).
    type: path
  image:
    description: Root filesystem of the lab image whose dpkg status the packages are resolved against.
      Required when O(state=present).
    type: path
  image_key:
    description: Cache key of that image (see M(llamarpc.cluster.lab_image)). Required when O(state=present).
    type: str
  suite:
    description: Debian suite of the image.
    type: str
    default: bookworm
  mirror:
    description:
      - Debian mirror to download from. By default the controller's own apt sources are read for a
        mirror of O(suite), as M(llamarpc.cluster.lab_image) does.
    type: str
  keyring:
    description: Keyring that signs O(suite) on O(mirror).
    type: path
    default: /usr/share/keyrings/debian-archive-keyring.gpg
  packages:
    description: Package names the repository must be able to install (their dependencies come along).
    type: list
    elements: str
    default: []
  address:
    description: Controller address on the lab bridge to serve on (a prefix length after it is ignored).
      Required when O(state=present).
    type: str
  port:
    description: TCP port to serve on.
    type: int
    default: 8642
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
seealso:
  - module: llamarpc.cluster.lab_image
  - module: llamarpc.cluster.lab_host
"""

EXAMPLES = r"""
- name: The lab's package source
  llamarpc.cluster.lab_apt_repo:
    state_dir: /var/lib/llamarpc-lab/llamarpc
    cache_dir: /var/cache/llamarpc/lab
    image: "{{ image.rootfs }}"
    image_key: "{{ image.key }}"
    packages: [sshfs, nftables, libgomp1]
    address: 10.213.0.1
  register: repo

- name: Stop serving it
  llamarpc.cluster.lab_apt_repo:
    state: absent
    state_dir: /var/lib/llamarpc-lab/llamarpc
"""

RETURN = r"""
url:
  description: Where lab hosts find the repository.
  returned: O(state=present)
  type: str
  sample: http://10.213.0.1:8642/
sources:
  description: The deb822 apt source for lab hosts (C(/etc/apt/sources.list.d/llamarpc-lab.sources)).
  returned: O(state=present)
  type: str
repo_dir:
  description: Directory of the repository on the controller.
  returned: O(state=present)
  type: str
  sample: /var/cache/llamarpc/lab/apt-0123456789abcdef
key:
  description: Cache key of the repository.
  returned: O(state=present)
  type: str
debs:
  description: Number of .deb files in the repository.
  returned: O(state=present)
  type: int
  sample: 121
build_seconds:
  description: Seconds spent resolving and downloading (0 when the cached repository was used).
  returned: O(state=present)
  type: float
"""

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import signal
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils._apt_repo import (
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
from ansible_collections.llamarpc.cluster.plugins.module_utils._lab import find_mirror

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
        apt_get = self.module.get_bin_path("apt-get", required=True)
        dpkg_deb = self.module.get_bin_path("dpkg-deb", required=True)
        mirror = self.params["mirror"] or find_mirror(self.params["suite"])
        if not mirror:
            self.module.fail_json(msg=f"no apt source for suite {self.params['suite']} on the controller: set mirror")
        work = top + ".work"
        archives = os.path.join(
            self.params["cache_dir"], "apt-archives"
        )  # shared: a new key downloads only what is new
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
        tmp = top + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
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
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as handle:
            json.dump({"packages": packages, "debs": len(plan), "suite": self.params["suite"]}, handle)
        shutil.rmtree(top, ignore_errors=True)
        os.rename(tmp, top)
        shutil.rmtree(work, ignore_errors=True)
        return len(plan)

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


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "state_dir": {"type": "path", "required": True},
            "cache_dir": {"type": "path"},
            "image": {"type": "path"},
            "image_key": {"type": "str", "no_log": False},
            "suite": {"type": "str", "default": "bookworm"},
            "mirror": {"type": "str"},
            "keyring": {"type": "path", "default": "/usr/share/keyrings/debian-archive-keyring.gpg"},
            "packages": {"type": "list", "elements": "str", "default": []},
            "address": {"type": "str"},
            "port": {"type": "int", "default": 8642},
        },
        required_if=[("state", "present", ("cache_dir", "image", "image_key", "address"))],
        supports_check_mode=True,
    )
    p = module.params
    if p["address"]:
        p["address"] = p["address"].split("/", 1)[0]
    repo = Repo(module)
    if p["state"] == "absent":
        module.exit_json(changed=repo.stop())
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
            module.exit_json(changed=True, debs=0, **result)
        os.makedirs(p["cache_dir"], exist_ok=True)
        # Labs booted at the same time share the download cache: one builds, the others wait and reuse it.
        with open(os.path.join(p["cache_dir"], "apt-repo.lock"), "w", encoding="ascii") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
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
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
