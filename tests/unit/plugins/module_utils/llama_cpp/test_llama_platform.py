"""Where llama.cpp may be built (the build host against the nodes) and the controller's cache of builds."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build as lb
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_platform as lp

DEBIAN12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n'
UBUNTU24 = 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n'
ROCKY9 = 'PRETTY_NAME="Rocky Linux 9.4"\nID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n'
CHECKSUM = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"


def plat(release=DEBIAN12, arch="x86_64", glibc="2.36", libc="glibc", flags=("sse2", "avx2")):
    return lp.platform_from(arch, release, libc, glibc, flags)


def test_platform_from_os_release_and_libc():
    facts = plat()
    assert facts["architecture"] == "x86_64"
    assert facts["os_family"] == "Debian"
    assert facts["distribution"] == "debian"
    assert facts["distribution_version"] == "12"
    assert facts["pretty_name"] == "Debian GNU/Linux 12 (bookworm)"
    assert facts["libc"] == "glibc"
    assert facts["libc_version"] == "2.36"
    assert facts["cpu_flags_sha256"] == plat(flags=("avx2", "sse2", "avx2"))["cpu_flags_sha256"]


@pytest.mark.parametrize(
    ("release", "family"), [(DEBIAN12, "Debian"), (UBUNTU24, "Debian"), (ROCKY9, "RedHat"), ("ID=nixos\n", "nixos")]
)
def test_os_family(release, family):
    assert plat(release)["os_family"] == family


@pytest.mark.parametrize(
    ("text", "version"),
    [("2.36", (2, 36)), ("glibc 2.39", (2, 39)), ("2.31.9000", (2, 31)), ("", None), ("musl", None)],
)
def test_glibc_version(text, version):
    assert lp.glibc_version(text) == version


def test_the_same_platform_everywhere_passes():
    assert lp.compat_problems("node1", plat(), {"node1": plat(), "node2": plat()}) == []


def test_an_older_build_host_glibc_passes():
    assert lp.compat_problems("node1", plat(glibc="2.31"), {"node2": plat(UBUNTU24, glibc="2.39")}) == []


def test_another_architecture_is_named_with_the_fix():
    problems = lp.compat_problems("localhost", plat(arch="aarch64"), {"node1": plat(), "node2": plat()})
    assert len(problems) == 1
    assert "localhost" in problems[0] and "node1 (x86_64), node2 (x86_64)" in problems[0]
    assert "aarch64" in problems[0] and "set llama_cpp_build_host" in problems[0]


def test_a_newer_glibc_on_the_build_host_names_the_older_nodes():
    problems = lp.compat_problems(
        "laptop", plat(UBUNTU24, glibc="2.39"), {"node1": plat(), "node2": plat(glibc="2.39")}
    )
    assert len(problems) == 1
    assert "glibc 2.39, newer than node1 (glibc 2.36)" in problems[0]
    assert "node2" not in problems[0]
    assert "set llama_cpp_build_host" in problems[0]


def test_a_node_without_glibc_fails():
    problems = lp.compat_problems("node1", plat(), {"node2": plat(libc="musl", glibc="")})
    assert problems and "node2" in problems[0]


def test_another_os_family_fails_before_anything_else():
    problems = lp.compat_problems("node1", plat(), {"node2": plat(ROCKY9, glibc="2.34"), "node3": plat()})
    assert len(problems) == 1
    assert problems[0].startswith("node2 runs Rocky Linux 9.4 (OS family RedHat)")
    assert "Debian" in problems[0] and "Ubuntu" in problems[0]


def test_an_unsupported_build_host_is_named():
    problems = lp.compat_problems("localhost", plat(ROCKY9), {"node1": plat()})
    assert problems[0].startswith("localhost runs Rocky Linux 9.4")


def key(**changes):
    args = {
        "subdir": "",
        "cmake_flags": [],
        "cpu": "portable",
        "targets": ["ggml-rpc-server", "llama-server"],
        "platform": plat(),
    }
    args.update(changes)
    return lp.controller_key(CHECKSUM, **args)


def test_the_controller_key_is_stable_and_follows_what_the_binaries_depend_on():
    assert key() == key()
    assert key() == lp.controller_key("sha256:" + CHECKSUM.upper(), **{
        "subdir": "", "cmake_flags": [], "cpu": "portable", "targets": ["ggml-rpc-server", "llama-server"],
        "platform": plat(),
    })  # fmt: skip
    others = {
        key(platform=plat(glibc="2.39")),
        key(platform=plat(arch="aarch64")),
        key(platform=plat(UBUNTU24)),
        key(targets=["ggml-rpc-server"]),
        key(cmake_flags=["-DGGML_RPC=ON"]),
        key(subdir="vendor/llama.cpp"),
        key(cpu="native"),
    }
    assert key() not in others and len(others) == 7


def test_the_controller_key_without_helpers_is_the_key_from_before_helpers(tmp_path):
    # As main computed it before helpers existed (f8a0a53): the controller's cached builds stay valid.
    before = "b9e2c58c3a6b802bb46ff3865918f8531dcfd4cd9e68f9e08f9e889d50127a9b"
    assert key() == before
    assert key(helpers=[]) == before
    source = tmp_path / "llamarpc_fnv1a.cpp"
    source.write_text("int main() { return 0; }\n")
    with_helper = key(helpers=lb.helper_sources([str(source)]))
    assert with_helper != before
    source.write_text("int main() { return 1; }\n")
    assert key(helpers=lb.helper_sources([str(source)])) not in {before, with_helper}


def test_the_controller_key_without_patches_is_the_key_from_before_patches(tmp_path):
    before = key()
    assert key(patches=[]) == before
    patch = tmp_path / "fix.patch"
    patch.write_text("--- a/x\n+++ b/x\n")
    with_patch = key(patches=lb.patch_sources([str(patch)]))
    assert with_patch != before
    patch.write_text("--- a/y\n+++ b/y\n")
    assert key(patches=lb.patch_sources([str(patch)])) not in {before, with_patch}


def test_the_build_record_says_which_patches_were_applied():
    outcome = [{"name": "fix.patch", "sha256": "d" * 64, "applied": False, "reason": "does not apply to this source"}]
    result = build_result()
    result["manifest"] = dict(result["manifest"], patches=outcome)
    assert lp.build_record(key(), result, "c" * 64, 10, "node1", plat())["patches"] == outcome
    # A build from before patches existed has none.
    assert lp.build_record(key(), build_result(), "c" * 64, 10, "node1", plat())["patches"] == []


def test_cpu_flags_count_for_a_native_build_only():
    assert key(platform=plat(flags=("sse2",))) == key()
    assert key(cpu="native", platform=plat(flags=("sse2",))) != key(cpu="native")


def build_result():
    return {
        "key": "b" * 64,
        "rpc_server": "ggml-rpc-server",
        "rpc_protocol": {"version": "7.0.0"},
        "build_seconds": 567.1,
        "manifest": {
            "built_targets": ["ggml-rpc-server", "llama-server"],
            "external_libraries": ["libgomp.so.1"],
            "files": [{"path": "bin/llama-server"}, {"path": "bin/ggml-rpc-server"}],
            "built_at": "2026-12-01T16:06:00Z",
        },
    }


def test_a_record_round_trip_and_its_checks(tmp_path):
    (tmp_path / lp.ARCHIVE).write_bytes(b"x" * 10)
    record = lp.build_record(key(), build_result(), "c" * 64, 10, "node1", plat())
    assert record["files"] == ["ggml-rpc-server", "llama-server"]
    assert lp.load_record(tmp_path) is None
    lp.write_record(tmp_path, record)
    assert lp.load_record(tmp_path) == record
    assert lp.record_problem(tmp_path, record, key()) == ""
    assert "is for key" in lp.record_problem(tmp_path, record, "0" * 64)
    (tmp_path / lp.ARCHIVE).write_bytes(b"x" * 9)
    assert "9 bytes" in lp.record_problem(tmp_path, record, key())
    (tmp_path / lp.ARCHIVE).unlink()
    assert lp.record_problem(tmp_path, record, key()) == "bin.tar.gz missing"
    assert "format" in lp.record_problem(tmp_path, {**record, "format": 0}, key())
    (tmp_path / lp.RECORD).write_text("{", encoding="utf-8")
    assert lp.load_record(tmp_path) is None
    assert json.loads(json.dumps(record)) == record


def test_the_record_keeps_the_builds_own_seconds_when_the_build_was_followed_in_the_background():
    followed = {**build_result(), "build_seconds": 0.0}
    followed["manifest"] = {**followed["manifest"], "build_seconds": 1712.4}
    assert lp.build_record(key(), followed, "c" * 64, 10, "node1", plat())["build_seconds"] == 1712.4
    assert lp.build_record(key(), build_result(), "c" * 64, 10, "node1", plat())["build_seconds"] == 567.1
