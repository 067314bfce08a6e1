"""The wheel set's pure parts: the host's target for uv and pip, the commands, the lock, the link switch."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.packages import _wheel_set as ws

PARAMS = {
    "requirements": ["open-webui==0.12.4", "torch==2.13.0+cpu"],
    "python_version": "3.11.2",
    "machine": "x86_64",
    "glibc": "glibc 2.36",
    "index_url": "",
    "no_index": False,
    "extra_index_urls": ["https://torch.example.org/whl/cpu"],
    "find_links": [],
}

LOCK = """\
--find-links /srv/wheels
async-timeout==5.0.1 \\
    --hash=sha256:aaaa \\
    --hash=sha256:bbbb
    # via redis
Redis==5.2.1 \\
    --hash=sha256:cccc
torch==2.13.0+cpu \\
    --hash=sha256:dddd
"""


@pytest.mark.parametrize(
    ("machine", "glibc", "target"),
    [
        ("x86_64", "glibc 2.36", "x86_64-manylinux_2_36"),
        ("aarch64", "2.31", "aarch64-manylinux_2_31"),
        ("x86_64", "glibc 2.42", "x86_64-manylinux_2_40"),  # newer than uv's newest target: its newest
    ],
)
def test_uv_targets_the_newest_manylinux_the_hosts_c_library_runs(machine, glibc, target):
    assert ws.uv_platform(machine, glibc) == target


def test_a_c_library_older_than_manylinux_2_17_is_refused():
    with pytest.raises(ws.WheelSetError, match="older than manylinux 2.17"):
        ws.uv_platform("x86_64", "glibc 2.12")


def test_pip_platforms_run_from_the_hosts_c_library_down_to_the_legacy_tags():
    tags = ws.pip_platforms("x86_64", "glibc 2.36")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert tags[-4:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


@pytest.mark.parametrize("version", ["3.11", "3", "3.11.2rc1", ""])
def test_the_hosts_version_must_be_full(version):
    with pytest.raises(ws.WheelSetError, match="full Python version"):
        ws.version_tuple(version)


def test_uv_resolves_for_the_hosts_full_version_and_platform_with_hashes():
    argv = ws.compile_argv("/opt/uv", "/usr/bin/python3.13", PARAMS)
    assert argv[:4] == ["/opt/uv", "pip", "compile", "-"]
    assert argv[argv.index("--python-version") + 1] == "3.11.2"
    assert argv[argv.index("--python-platform") + 1] == "x86_64-manylinux_2_36"
    assert "--generate-hashes" in argv and "--only-binary=:all:" in argv
    assert argv[argv.index("--index-strategy") + 1] == "unsafe-best-match"  # pip's rule: the best match of every index
    assert "--extra-index-url=https://torch.example.org/whl/cpu" in argv
    assert not [arg for arg in argv if arg.startswith("--index-url") or arg == "--no-index"]


def test_pip_downloads_the_lock_alone_checked_by_hash():
    argv = ws.download_argv("/usr/bin/python3.13", "/c/requirements.lock", "/c/wheels", PARAMS)
    assert argv[:4] == ["/usr/bin/python3.13", "-m", "pip", "download"]
    assert {"--no-deps", "--require-hashes", "--only-binary=:all:"} <= set(argv)
    assert argv[argv.index("-r") + 1] == "/c/requirements.lock"
    assert argv[argv.index("--abi") + 1] == "cp311"
    assert "--platform=manylinux_2_36_x86_64" in argv
    assert not [arg for arg in argv if "==" in arg]  # no requirement of its own: the lock's pins only


def test_sources_no_index_and_index_url():
    assert ws._sources("", True, [], ["/w"]) == ["--no-index", "--find-links=/w"]
    assert ws._sources("https://mirror.example.org/simple", False, [], []) == [
        "--index-url=https://mirror.example.org/simple"
    ]


def test_the_host_installs_the_lock_from_the_wheels_only():
    argv = ws.install_argv("/opt/w/releases/k", "/opt/w/wheels-staging/wheels")
    assert argv[0] == "/opt/w/releases/k/bin/pip"
    assert {"--no-index", "--require-hashes"} <= set(argv)
    assert argv[-2:] == ["-r", "/opt/w/wheels-staging/wheels/requirements.lock"]


def test_the_lock_is_read_as_pins_with_their_hashes():
    assert ws.parse_lock(LOCK) == [
        {"name": "async-timeout", "version": "5.0.1", "hashes": ["sha256:aaaa", "sha256:bbbb"]},
        {"name": "redis", "version": "5.2.1", "hashes": ["sha256:cccc"]},
        {"name": "torch", "version": "2.13.0+cpu", "hashes": ["sha256:dddd"]},
    ]


def test_a_lock_line_that_is_not_a_pin_is_refused():
    with pytest.raises(ws.WheelSetError, match="not a pin"):
        ws.parse_lock("redis>=5\n")


def test_every_pin_needs_its_wheel():
    packages = ws.parse_lock(LOCK)
    files = ["async_timeout-5.0.1-py3-none-any.whl", "redis-5.2.1-py3-none-any.whl"]
    assert ws.missing_wheels(packages, files) == ["torch"]
    assert ws.missing_wheels(packages, [*files, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]) == []


def test_the_link_switches_in_one_rename_and_old_releases_go(tmp_path):
    releases = tmp_path / "releases"
    for name in ("a", "b", "c"):
        (releases / name).mkdir(parents=True)
    link = tmp_path / "venv"
    ws.switch_link(str(link), str(releases / "b"))
    assert ws.current_release(str(link)) == str(releases / "b")
    ws.switch_link(str(link), str(releases / "c"))
    assert os.readlink(link) == str(releases / "c") and not (tmp_path / "venv.partial").exists()
    assert ws.stale_releases(str(releases), [str(releases / "c"), str(releases / "b")]) == [str(releases / "a")]


def test_a_plain_directory_is_no_release(tmp_path):
    (tmp_path / "venv").mkdir()
    assert ws.current_release(str(tmp_path / "venv")) is None
    assert ws.current_release(str(tmp_path / "missing")) is None
