# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""lab_apt_repo: refusals and check mode before anything is made; a cached repository served on loopback by a real
start-stop-daemon and http.server, left alone when it already answers, and stopped."""

from __future__ import annotations

import json
import platform
import shutil
import urllib.request

import pytest

from ansible_collections.llamarpc.lab.plugins.module_utils._apt_repo import dpkg_arch, repo_key
from ansible_collections.llamarpc.lab.plugins.module_utils._apt_repo_run import MARKER, PIDFILE
from ansible_collections.llamarpc.lab.plugins.modules import lab_apt_repo as mod

PACKAGES = ["sshfs", "lsyncd"]


def _args(tmp_path, port, **kw):
    args = {
        "state_dir": str(tmp_path / "state"),
        "cache_dir": str(tmp_path / "cache"),
        "image": str(tmp_path / "image"),
        "image_key": "img0",
        "packages": PACKAGES,
        "address": "127.0.0.1/8",
        "port": port,
    }
    args.update(kw)
    return args


def _cached_repo(tmp_path):
    """A repository as a finished build leaves it (its marker last), under the key the module computes."""
    key = repo_key("bookworm", dpkg_arch(platform.machine()), PACKAGES, "img0")
    top = tmp_path / "cache" / f"apt-{key}"
    top.mkdir(parents=True)
    (top / "Packages").write_text("")
    (top / "Release").write_text("Origin: llamarpc-lab\n")
    (top / MARKER).write_text(json.dumps({"packages": sorted(PACKAGES), "debs": 7, "suite": "bookworm"}))
    return key, top


def _release(url):
    try:
        with urllib.request.urlopen(url + "Release", timeout=10) as response:  # noqa: S310 - loopback http
            return response.read().decode()
    except OSError:
        return None


def test_bad_package_names_are_refused_before_anything_is_made(run_module, tmp_path, closed_port):
    out = run_module(mod, _args(tmp_path, closed_port, packages=["ok", "Bad_Name"]))
    assert out.failed and "not Debian package names: 'Bad_Name'" in out.result["msg"]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "state").exists()


def test_check_mode_predicts_a_build_and_makes_nothing(run_module, tmp_path, closed_port):
    out = run_module(mod, _args(tmp_path, closed_port), check_mode=True)
    assert not out.failed, out.result
    assert out.result["changed"] is True and out.result["debs"] == 0
    assert out.result["url"] == f"http://127.0.0.1:{closed_port}/"  # the bridge's prefix length is dropped
    assert "URIs: " + out.result["url"] in out.result["sources"]
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(not shutil.which("start-stop-daemon"), reason="start-stop-daemon is not installed")
def test_a_cached_repository_is_served_once_and_stopped(run_module, tmp_path, closed_port):
    key, top = _cached_repo(tmp_path)
    (tmp_path / "state").mkdir()
    args = _args(tmp_path, closed_port)
    try:
        out = run_module(mod, args)
        assert not out.failed, out.result
        assert (out.result["changed"], out.result["key"], out.result["repo_dir"]) == (True, key, str(top))
        assert (out.result["debs"], out.result["build_seconds"]) == (7, 0.0)
        assert _release(out.result["url"]) == "Origin: llamarpc-lab\n"
        pid = int((tmp_path / "state" / PIDFILE).read_text())
        again = run_module(mod, args)
        assert again.result["changed"] is False  # it answers: the same server is left running
        assert int((tmp_path / "state" / PIDFILE).read_text()) == pid
        predicted = run_module(mod, {**args, "state": "absent"}, check_mode=True)
        assert predicted.result["changed"] is True and _release(out.result["url"]) is not None
    finally:
        stopped = run_module(mod, {**args, "state": "absent"})
    assert stopped.result["changed"] is True
    assert _release(out.result["url"]) is None
    assert not (tmp_path / "state" / PIDFILE).exists()
    assert run_module(mod, {**args, "state": "absent"}).result["changed"] is False
