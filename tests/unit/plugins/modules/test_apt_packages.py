"""apt_packages in check mode against this machine's own dpkg and apt (Debian): what is missing, what apt would
install with it, nothing written - not even apt's binary caches. The real-run path is ansible.builtin.apt (through the
action plugin), exercised by every scenario's converge."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ansible_collections.llamarpc.cluster.plugins.modules import apt_packages

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-query") or not shutil.which("apt-get"), reason="not Debian")

# A small package with no dependencies beyond the base system, not installed on the build machines.
ABSENT = "sl"


def _known_and_absent(name):
    installed = subprocess.run(["dpkg-query", "--show", name], capture_output=True, check=False).returncode == 0
    known = subprocess.run(["apt-cache", "show", name], capture_output=True, check=False).returncode == 0
    return known and not installed


def _apt_state():
    """What a run could touch under apt's directories: every file's size and mtime."""
    state = {}
    for top in ("/var/cache/apt", "/var/lib/apt", "/var/lib/dpkg"):
        for root, _dirs, names in os.walk(top):
            for name in names:
                path = os.path.join(root, name)
                if os.path.isfile(path):
                    st = os.stat(path)
                    state[path] = (st.st_size, st.st_mtime_ns)
    return state


def test_installed_names_change_nothing(run_module):
    result = run_module(apt_packages, {"name": ["bash", "dpkg"]}, check_mode=True)
    assert not result.failed, result.result
    assert not result.result["changed"] and result.result["missing"] == [] and result.result["would_install"] == []
    assert result.result["msg"] == "already installed: bash dpkg"


@pytest.mark.skipif(not _known_and_absent(ABSENT), reason=f"{ABSENT} is installed or not in this machine's lists")
def test_a_missing_package_is_reported_with_what_apt_would_install(run_module):
    before = _apt_state()
    result = run_module(apt_packages, {"name": ["bash", ABSENT], "install_recommends": False}, check_mode=True)
    assert not result.failed, result.result
    assert result.result["changed"] and result.result["installed"] == ["bash"] and result.result["missing"] == [ABSENT]
    assert ABSENT in [package["name"] for package in result.result["would_install"]]
    assert _apt_state() == before


def test_a_name_apt_does_not_know_is_still_reported(run_module):
    result = run_module(apt_packages, {"name": ["llamarpc-no-such-package"]}, check_mode=True)
    assert not result.failed, result.result
    assert result.result["changed"] and result.result["missing"] == ["llamarpc-no-such-package"]
    assert "Unable to locate package" in result.result["simulation_error"]
    assert "dependencies are not known" in result.result["msg"]


def test_the_module_alone_never_installs(run_module):
    result = run_module(apt_packages, {"name": [ABSENT]})
    assert result.failed and "action plugin" in result.result["msg"]


def test_the_simulation_writes_no_binary_cache_where_apt_would(run_module, tmp_path, monkeypatch):
    # A fresh Debian host writes pkgcache.bin on any apt-get run; container images (docker-clean in apt.conf.d) turn
    # that off, which would hide a simulation that writes it. Here apt's own defaults are back (an empty apt.conf.d),
    # with its cache directory the test's own.
    cache, parts = tmp_path / "cache", tmp_path / "apt.conf.d"
    cache.mkdir()
    parts.mkdir()
    (tmp_path / "apt.conf").write_text(f'Dir::Etc::parts "{parts}";\nDir::Cache "{cache}";\n')
    monkeypatch.setenv("APT_CONFIG", str(tmp_path / "apt.conf"))
    result = run_module(apt_packages, {"name": ["llamarpc-no-such-package"]}, check_mode=True)
    assert not result.failed and result.result["missing"] == ["llamarpc-no-such-package"], result.result
    assert sorted(path.name for path in cache.rglob("*")) == []
