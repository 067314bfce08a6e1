"""The lab's local apt repository: what apt plans, file names, the Packages and Release index, the source line."""

from __future__ import annotations

import hashlib

import pytest

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

# Recorded from `apt-get install --simulate sshfs nftables` against a bare bookworm image's dpkg status (2026-12-01).
SIMULATION = """\
NOTE: This is only a simulation!
      apt-get needs root privileges for real execution.
Reading package lists...
Building dependency tree...
The following NEW packages will be installed:
  fuse3 libfuse3-3 libnftables1 nftables sshfs
Inst libfuse3-3 (3.14.0-4 Debian:12.15/oldstable [amd64])
Inst fuse3 (3.14.0-4 Debian:12.15/oldstable [amd64])
Inst libnftables1 (1.0.6-2+deb12u2 Debian:12.15/oldstable [amd64])
Inst nftables (1.0.6-2+deb12u2 Debian:12.15/oldstable [amd64])
Inst sshfs (3.7.3-1.1 Debian:12.15/oldstable [amd64])
Inst libc-bin [2.36-9+deb12u9] (2.36-9+deb12u10 Debian:12.15/oldstable [amd64])
Conf libfuse3-3 (3.14.0-4 Debian:12.15/oldstable [amd64])
Inst python3-apt (2.6.0 Debian:12.15/oldstable [amd64]) []
Inst tzdata (2025b-0+deb12u1 Debian:12.15/oldstable [all])
"""

CONTROL = """\
Package: sshfs
Version: 3.7.3-1.1
Architecture: amd64
Maintainer: Bartosz Fenski <fenio@debian.org>
Installed-Size: 120
Depends: fuse3, libc6 (>= 2.34), libglib2.0-0 (>= 2.56.0)
Section: utils
Priority: optional
Description: filesystem client based on SSH File Transfer Protocol
 sshfs is a filesystem client based on the SSH File Transfer Protocol.
 .
 Since most SSH servers already support this protocol it is very easy to set up.
"""


def test_simulation_lists_every_install_and_upgrade_once_with_its_architecture():
    assert parse_simulation(SIMULATION) == [
        ("libfuse3-3", "3.14.0-4", "amd64"),
        ("fuse3", "3.14.0-4", "amd64"),
        ("libnftables1", "1.0.6-2+deb12u2", "amd64"),
        ("nftables", "1.0.6-2+deb12u2", "amd64"),
        ("sshfs", "3.7.3-1.1", "amd64"),
        ("libc-bin", "2.36-9+deb12u10", "amd64"),  # an upgrade of an installed package: the new version
        ("python3-apt", "2.6.0", "amd64"),
        ("tzdata", "2025b-0+deb12u1", "all"),
    ]


def test_an_empty_simulation_plans_nothing():
    assert parse_simulation("Reading package lists...\n0 upgraded, 0 newly installed\n") == []


def test_file_name_encodes_the_epoch_like_apt():
    assert deb_filename("sshfs", "3.7.3-1.1", "amd64") == "sshfs_3.7.3-1.1_amd64.deb"
    assert deb_filename("libgcc-s1", "1:12.2.0-14", "amd64") == "libgcc-s1_1%3a12.2.0-14_amd64.deb"


def test_control_keeps_multi_line_fields_and_refuses_garbage():
    fields = parse_control(CONTROL)
    assert fields["Package"] == "sshfs" and fields["Version"] == "3.7.3-1.1"
    assert fields["Description"].count("\n") == 3
    with pytest.raises(AptRepoError, match="not a control field"):
        parse_control("Package: x\nnonsense\n")
    with pytest.raises(AptRepoError, match="without Package or Version"):
        parse_control("Architecture: amd64\n")


def test_packages_stanza_points_at_the_file_with_its_hashes():
    stanza = packages_stanza(
        parse_control(CONTROL), "sshfs_3.7.3-1.1_amd64.deb", 41234, {"md5": "a" * 32, "sha256": "b" * 64}
    )
    lines = stanza.splitlines()
    assert lines[:4] == ["Package: sshfs", "Version: 3.7.3-1.1", "Installed-Size: 120", lines[3]]
    assert "Filename: ./sshfs_3.7.3-1.1_amd64.deb" in lines
    assert "Size: 41234" in lines and f"SHA256: {'b' * 64}" in lines and f"MD5sum: {'a' * 32}" in lines
    assert " Since most SSH servers already support this protocol it is very easy to set up." in lines


def test_packages_index_is_the_same_whatever_the_order_of_the_files():
    one = packages_stanza({"Package": "b", "Version": "1"}, "b_1_all.deb", 1, {"md5": "0", "sha256": "0"})
    two = packages_stanza({"Package": "a", "Version": "1"}, "a_1_all.deb", 1, {"md5": "0", "sha256": "0"})
    assert packages_index([one, two]) == packages_index([two, one])
    assert packages_index([one, two]).startswith("Package: a\n")
    assert packages_index([one, two]).count("\n\n") == 1  # stanzas separated by one blank line
    assert packages_index([]) == ""


def test_release_lists_the_index_with_its_sha256():
    index = b"Package: a\n"
    text = release_text("bookworm", "amd64", {"Packages": (len(index), hashlib.sha256(index).hexdigest())})
    assert "Suite: bookworm\n" in text and "Architectures: amd64 all\n" in text
    assert text.endswith(f"SHA256:\n {hashlib.sha256(index).hexdigest()} {len(index)} Packages\n")


def test_key_changes_with_what_changes_the_repository_only():
    base = repo_key("bookworm", "amd64", ["sshfs", "nftables"], "img1")
    assert base == repo_key("bookworm", "amd64", ["nftables", "sshfs", "sshfs"], "img1")
    assert base != repo_key("bookworm", "amd64", ["sshfs"], "img1")
    assert base != repo_key("bookworm", "amd64", ["sshfs", "nftables"], "img2")  # a new image resolves anew
    assert base != repo_key("bookworm", "arm64", ["sshfs", "nftables"], "img1")
    assert base != repo_key("trixie", "amd64", ["sshfs", "nftables"], "img1")


def test_package_names_are_checked_before_any_download():
    assert validate_packages(["sshfs", "g++", "libc6", "sshfs"]) == ["g++", "libc6", "sshfs"]
    with pytest.raises(AptRepoError, match="'sshfs nftables'"):
        validate_packages(["sshfs nftables"])
    with pytest.raises(AptRepoError, match="'-o'"):
        validate_packages(["-o"])  # would be an option to apt-get


def test_hosts_get_a_flat_trusted_source_on_the_bridge():
    assert sources_entry("http://10.213.0.1:8642/") == (
        "Types: deb\nURIs: http://10.213.0.1:8642/\nSuites: ./\nTrusted: yes\n"
    )


def test_debian_architecture_names():
    assert dpkg_arch("x86_64") == "amd64"
    assert dpkg_arch("aarch64") == "arm64"
    assert dpkg_arch("riscv64") == "riscv64"
