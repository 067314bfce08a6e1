# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers of llama_cpp_build: cache key, tree detection, version parsing, ELF tool output, manifests.

The archives and trees here are small synthetic ones (a CMakeLists.txt, a ggml-rpc.h): they exercise
detection and parsing only. Nothing here builds llama.cpp.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import zipfile

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build as lb

SHA_A = "a" * 64
SHA_B = "b" * 64
COMPILER = {"c": "cc (Debian 12.2.0-14+deb12u1) 12.2.0", "cxx": "c++ (Debian 12.2.0-14+deb12u1) 12.2.0"}

RPC_HEADER = """#pragma once

#include "ggml-backend.h"

#define RPC_PROTO_MAJOR_VERSION    7
#define RPC_PROTO_MINOR_VERSION    0
#define RPC_PROTO_PATCH_VERSION    0

#define GGML_RPC_MAX_SERVERS       16
"""

RPC_CMAKELISTS = """set(TARGET ggml-rpc-server)
add_executable(${TARGET} rpc-server.cpp)
target_link_libraries(${TARGET} PRIVATE ggml)
"""

READELF = """
Dynamic section at offset 0x2dc0 contains 28 entries:
  Tag        Type                         Name/Value
 0x0000000000000001 (NEEDED)             Shared library: [libggml.so.0]
 0x0000000000000001 (NEEDED)             Shared library: [libgomp.so.1]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000000e (SONAME)             Library soname: [libggml-cpu.so]
 0x000000000000001d (RUNPATH)            Library runpath: [$ORIGIN]
 0x000000000000000c (INIT)               0x1000
"""

LDD = """\tlinux-vdso.so.1 (0x00007fa0fb2cb000)
\tlibggml.so.0 => /cache/key/bin/./libggml.so.0 (0x00007fa0fb2b9000)
\tlibgomp.so.1 => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fa0fb0ce000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007fa0fb2cd000)
"""


def key(**overrides):
    args = {
        "subdir": None,
        "cmake_flags": ["-DGGML_RPC=ON", "-DCMAKE_BUILD_TYPE=Release"],
        "targets": ["ggml-rpc-server", "llama-server"],
        "arch": "x86_64",
        "compiler": COMPILER,
    }
    source = overrides.pop("source_sha256", SHA_A)
    args.update(overrides)
    return lb.cache_key(source, **args)


# -- checksum, archive kind, default flags ------------------------------------------------------------


def test_normalize_sha256_accepts_prefix_and_case():
    assert lb.normalize_sha256("SHA256:" + "AB" * 32) == "ab" * 32
    assert lb.normalize_sha256(f"  {SHA_A} ") == SHA_A


@pytest.mark.parametrize("bad", ["", "abc", "g" * 64, "a" * 63, "md5:" + "a" * 32])
def test_normalize_sha256_rejects_garbage(bad):
    with pytest.raises(lb.BuildError, match="sha256"):
        lb.normalize_sha256(bad)


def test_sha256_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert lb.sha256_file(str(path)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("x.tar.gz", "tar"),
        ("x.TGZ", "tar"),
        ("x.tar.xz", "tar"),
        ("x.tar.bz2", "tar"),
        ("x.tar", "tar"),
        ("x.zip", "zip"),
    ],
)
def test_archive_kind(name, kind):
    assert lb.archive_kind(f"/src/{name}") == kind


def test_archive_kind_rejects_other_files():
    with pytest.raises(lb.BuildError, match="unsupported archive"):
        lb.archive_kind("/src/llama.cpp.7z")


def test_default_flags_are_portable_and_keep_the_notes_flags():
    flags = lb.default_cmake_flags("x86_64")
    assert flags[:5] == list(lb.BASE_CMAKE_FLAGS)
    assert "-DGGML_NATIVE=OFF" in flags
    assert "-DCMAKE_INSTALL_RPATH=$ORIGIN" in flags
    assert "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON" in flags
    assert flags[-2:] == ["-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"]
    assert not any("native" in f.lower() and f.endswith("=ON") for f in flags)


def test_default_flags_without_cpu_variants_where_llama_cpp_has_none():
    flags = lb.default_cmake_flags("armv7l")
    assert "-DGGML_NATIVE=OFF" in flags
    assert "-DGGML_CPU_ALL_VARIANTS=ON" not in flags
    assert "-DGGML_BACKEND_DL=ON" not in flags
    assert "-DGGML_CPU_ALL_VARIANTS=ON" in lb.default_cmake_flags("aarch64")


def test_native_flags_tune_to_the_build_host_and_still_ship_anywhere_on_disk():
    flags = lb.default_cmake_flags("x86_64", "native")
    assert flags[:5] == list(lb.BASE_CMAKE_FLAGS)
    assert "-DGGML_NATIVE=ON" in flags and "-DGGML_NATIVE=OFF" not in flags
    assert "-DGGML_CPU_ALL_VARIANTS=ON" not in flags and "-DGGML_BACKEND_DL=ON" not in flags
    assert "-DCMAKE_INSTALL_RPATH=$ORIGIN" in flags and "-DBUILD_SHARED_LIBS=ON" in flags
    assert lb.cache_key("0" * 64, subdir=None, cmake_flags=flags, targets=["t"], arch="x86_64", compiler="c") != (
        lb.cache_key(
            "0" * 64,
            subdir=None,
            cmake_flags=lb.default_cmake_flags("x86_64"),
            targets=["t"],
            arch="x86_64",
            compiler="c",
        )
    )


def test_cmake_define_reads_the_last_definition():
    flags = ["-DGGML_RPC=ON", "-DGGML_RPCX=1", "-DLLAMA_BUILD_COMMIT:STRING=abc", "-DGGML_RPC=OFF"]
    assert lb.cmake_define(flags, "GGML_RPC") == "OFF"
    assert lb.cmake_define(flags, "LLAMA_BUILD_COMMIT") == "abc"
    assert lb.cmake_define(flags, "CMAKE_CXX_COMPILER") is None
    assert lb.cmake_define(["-DCMAKE_C_COMPILER=/usr/bin/clang"], "CMAKE_C_COMPILER") == "/usr/bin/clang"


# -- cache key -------------------------------------------------------------------------------------------


def test_cache_key_is_stable_sha256():
    assert key() == key()
    assert len(key()) == 64
    assert all(c in "0123456789abcdef" for c in key())


@pytest.mark.parametrize(
    "change",
    [
        {"source_sha256": SHA_B},
        {"subdir": "top/vendor/llama.cpp"},
        {"cmake_flags": ["-DGGML_RPC=ON", "-DCMAKE_BUILD_TYPE=Debug"]},
        {"cmake_flags": ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON"]},  # order matters to CMake
        {"targets": ["llama-server", "ggml-rpc-server"]},
        {"targets": ["ggml-rpc-server"]},
        {"arch": "aarch64"},
        {"compiler": {"c": "clang version 14.0.6", "cxx": "clang version 14.0.6"}},
    ],
)
def test_cache_key_changes_with_every_input(change):
    assert key(**change) != key()


def test_cache_key_normalizes_subdir_and_checksum_case():
    assert key(subdir="top/vendor/llama.cpp/") == key(subdir="./top/vendor/llama.cpp")
    assert key(source_sha256=SHA_A.upper()) == key()


# The key of these inputs as main computed it before helpers existed (f8a0a53): the entries already cached stay valid.
KEY_BEFORE_HELPERS = "669b46747721f0af41c5f4033ef17ca50f887428a957105fbb56c4bcc3bbe9ba"


def helper(tmp_path, name="llamarpc_fnv1a.cpp", text="int main() { return 0; }\n"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_cache_key_without_helpers_is_the_key_from_before_helpers():
    assert key() == KEY_BEFORE_HELPERS
    assert key(helpers=[]) == KEY_BEFORE_HELPERS


def test_cache_key_follows_each_helpers_bytes_and_name(tmp_path):
    source = helper(tmp_path)
    with_helper = key(helpers=lb.helper_sources([source]))
    assert with_helper != KEY_BEFORE_HELPERS
    assert key(helpers=lb.helper_sources([source])) == with_helper
    helper(tmp_path, text="int main() { return 1; }\n")
    assert key(helpers=lb.helper_sources([source])) != with_helper
    renamed = helper(tmp_path, "other_tool.cpp", text="int main() { return 1; }\n")
    assert key(helpers=lb.helper_sources([renamed])) != key(helpers=lb.helper_sources([source]))


def test_helper_sources_name_hash_and_order(tmp_path):
    second = helper(tmp_path, "zz_tool.cc")
    first = helper(tmp_path)
    found = lb.helper_sources([second, first])
    assert [h["name"] for h in found] == ["llamarpc-fnv1a", "zz-tool"]
    assert found[0] == {"name": "llamarpc-fnv1a", "path": first, "sha256": lb.sha256_file(first)}
    assert lb.helper_sources([]) == []
    assert lb.helper_name("/x/y/llamarpc_fnv1a.cpp") == "llamarpc-fnv1a"


@pytest.mark.parametrize(
    ("names", "targets", "message"),
    [
        (["tool.c"], (), "not a C++ source"),
        (["gone.cpp"], (), "does not exist"),
        (["a_b.cpp", "a-b.cpp"], (), "is taken"),
        (["llama_server.cpp"], ("llama-server",), "is taken"),
        (["rpc_server.cpp"], ("ggml-rpc-server",), "is taken"),
        (["libfoo.so.cpp"], (), "not a usable program name"),
        (["-x.cpp"], (), "not a usable program name"),
    ],
)
def test_helper_sources_refuses_what_cannot_ship(tmp_path, names, targets, message):
    paths = [helper(tmp_path, name) if name != "gone.cpp" else str(tmp_path / name) for name in names]
    with pytest.raises(lb.BuildError, match=re.escape(message)):
        lb.helper_sources(paths, targets)


def a_patch(tmp_path, name="fix.patch", text="--- a/x\n+++ b/x\n"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_cache_key_without_patches_is_the_key_from_before_patches(tmp_path):
    assert key(patches=[]) == KEY_BEFORE_HELPERS
    with_patch = key(patches=lb.patch_sources([a_patch(tmp_path)]))
    assert with_patch != KEY_BEFORE_HELPERS
    assert key(patches=lb.patch_sources([a_patch(tmp_path)])) == with_patch
    # Its bytes, its name and the order of the patches each make another key (the order they are applied in).
    assert key(patches=lb.patch_sources([a_patch(tmp_path, text="--- a/y\n+++ b/y\n")])) != with_patch
    assert key(patches=lb.patch_sources([a_patch(tmp_path, "other.patch")])) != with_patch
    two = [a_patch(tmp_path, "a.patch"), a_patch(tmp_path, "b.diff")]
    assert key(patches=lb.patch_sources(two)) != key(patches=lb.patch_sources(two[::-1]))


def test_patch_sources_keep_the_order_given(tmp_path):
    second, first = a_patch(tmp_path, "zz.patch"), a_patch(tmp_path, "aa.diff")
    found = lb.patch_sources([second, first])
    assert [p["name"] for p in found] == ["zz.patch", "aa.diff"]
    assert found[1] == {"name": "aa.diff", "path": first, "sha256": lb.sha256_file(first)}
    assert lb.patch_sources([]) == lb.patch_sources(None) == []


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["fix.txt"], "NAME.patch or NAME.diff"),
        ([".hidden.patch"], "NAME.patch or NAME.diff"),
        (["gone.patch"], "does not exist"),
        (["d1/fix.patch", "d2/fix.patch"], "two patches are named fix.patch"),
    ],
)
def test_patch_sources_refuse_what_cannot_be_applied(tmp_path, names, message):
    paths = []
    for name in names:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        paths.append(a_patch(tmp_path, name) if name != "gone.patch" else str(tmp_path / name))
    with pytest.raises(lb.BuildError, match=re.escape(message)):
        lb.patch_sources(paths)


def test_patch_argv_is_strict_and_the_dry_run_only_checks():
    argv = lb.patch_argv("/usr/bin/patch", "/src", "/p/fix.patch", dry_run=False)
    assert argv[:2] == ["/usr/bin/patch", "-p1"]
    for flag in ("--forward", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "--reject-file=-"):
        assert flag in argv
    assert argv[argv.index("--directory") + 1] == "/src" and argv[argv.index("--input") + 1] == "/p/fix.patch"
    assert lb.patch_argv("/usr/bin/patch", "/src", "/p/fix.patch", dry_run=True) == [*argv, "--dry-run"]


def test_patch_refusal_keeps_patchs_words_not_the_files_it_checked():
    output = "checking file src/a.cpp\nHunk #1 FAILED at 12.\n1 out of 1 hunk FAILED\nchecking file src/b.cpp\n"
    assert lb.patch_refusal(output) == "Hunk #1 FAILED at 12.; 1 out of 1 hunk FAILED"
    assert lb.patch_refusal("checking file src/a.cpp\n") == "checking file src/a.cpp"
    assert lb.patch_refusal("") == "patch refused it"


# -- archive member names and tree detection -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "norm"),
    [("./a/b/", "a/b"), ("a//b/./c", "a/b/c"), (".", ""), ("./", ""), ("a\\b", "a/b")],
)
def test_normalize_member(name, norm):
    assert lb.normalize_member(name) == norm


@pytest.mark.parametrize(
    ("name", "safe"),
    [("a/b", True), ("./a/../b", True), ("../a", False), ("a/../../b", False), ("/etc/passwd", False), ("C:x", False)],
)
def test_is_safe_member(name, safe):
    assert lb.is_safe_member(name) is safe


def test_normalize_subdir_rejects_escaping_paths():
    assert lb.normalize_subdir("./x/y/") == "x/y"
    assert lb.normalize_subdir(".") == ""
    for bad in ("/abs", "../up", "x/../../up"):
        with pytest.raises(lb.BuildError, match="relative path"):
            lb.normalize_subdir(bad)


SDIST = [
    "llama_cpp_python-0.3.36/CMakeLists.txt",
    "llama_cpp_python-0.3.36/CHANGELOG.md",
    "llama_cpp_python-0.3.36/llama_cpp/__init__.py",
    "llama_cpp_python-0.3.36/vendor/llama.cpp/CMakeLists.txt",
    "llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/CMakeLists.txt",
    "llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/include/ggml-rpc.h",
    "llama_cpp_python-0.3.36/vendor/llama.cpp/tools/rpc/CMakeLists.txt",
    # the tree's own examples have CMakeLists but no ggml/: not candidates
    "llama_cpp_python-0.3.36/vendor/llama.cpp/examples/simple/CMakeLists.txt",
]


def test_detect_source_dir_in_the_sdist_layout():
    assert lb.detect_source_dir(SDIST) == "llama_cpp_python-0.3.36/vendor/llama.cpp"


def test_detect_source_dir_in_an_upstream_release():
    names = ["./llama.cpp-b6500/", "./llama.cpp-b6500/CMakeLists.txt", "./llama.cpp-b6500/ggml/src/ggml.c"]
    assert lb.detect_source_dir(names) == "llama.cpp-b6500"


def test_detect_source_dir_at_the_archive_root():
    assert lb.detect_source_dir(["CMakeLists.txt", "ggml/CMakeLists.txt", "src/llama.cpp"]) == ""


def test_detect_source_dir_prefers_the_shallowest_tree():
    names = ["t/CMakeLists.txt", "t/ggml/x", "t/sub/copy/CMakeLists.txt", "t/sub/copy/ggml/x"]
    assert lb.detect_source_dir(names) == "t"


def test_detect_source_dir_without_a_tree():
    with pytest.raises(lb.BuildError, match="no llama.cpp source tree"):
        lb.detect_source_dir(["pkg/CMakeLists.txt", "pkg/src/main.c"])


def test_detect_source_dir_refuses_to_guess_between_two_trees():
    names = ["a/CMakeLists.txt", "a/ggml/x", "b/CMakeLists.txt", "b/ggml/x"]
    with pytest.raises(lb.BuildError, match="several llama.cpp trees"):
        lb.detect_source_dir(names)


def test_check_source_dir():
    assert lb.check_source_dir("llama_cpp_python-0.3.36/vendor/llama.cpp/", SDIST) == (
        "llama_cpp_python-0.3.36/vendor/llama.cpp"
    )
    with pytest.raises(lb.BuildError, match="vendor/llama.cpp"):
        lb.check_source_dir("llama_cpp_python-0.3.36/vendor", SDIST)


def _write_tar(path, files, fmt=tarfile.PAX_FORMAT, pax_headers=None):
    with tarfile.open(path, "w:gz", format=fmt, pax_headers=pax_headers or {}) as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def test_detection_on_small_synthetic_archives(tmp_path):
    files = {
        "llama.cpp-b4567/CMakeLists.txt": "project(llama.cpp)\n",
        "llama.cpp-b4567/ggml/include/ggml-rpc.h": RPC_HEADER,
        "llama.cpp-b4567/examples/rpc/CMakeLists.txt": "set(TARGET rpc-server)\nadd_executable(${TARGET} x.cpp)\n",
    }
    commit = "0c1e57098" + "0" * 31
    tar_path = tmp_path / "llama.cpp-b4567.tar.gz"
    _write_tar(tar_path, files, pax_headers={"comment": commit})
    with tarfile.open(tar_path) as archive:
        names = archive.getnames()
        assert lb.commit_from_archive_comment(archive.pax_headers.get("comment")) == commit
    zip_path = tmp_path / "b4567.zip"
    with zipfile.ZipFile(zip_path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.comment = commit.encode()
    with zipfile.ZipFile(zip_path) as archive:
        assert archive.namelist() == names
        assert lb.commit_from_archive_comment(archive.comment) == commit
    assert lb.detect_source_dir(names) == "llama.cpp-b4567"
    assert lb.build_number_from_name(tar_path.name) == 4567
    assert lb.build_number_from_name(zip_path.name) == 4567


# -- versions and targets from the sources --------------------------------------------------------------


def test_parse_rpc_proto_version():
    assert lb.parse_rpc_proto_version(RPC_HEADER) == {"major": 7, "minor": 0, "patch": 0, "version": "7.0.0"}
    assert lb.parse_rpc_proto_version("#  define RPC_PROTO_MAJOR_VERSION 2\n")["version"] == "2.0.0"


def test_parse_rpc_proto_version_of_an_unversioned_tree():
    assert lb.parse_rpc_proto_version('#include "ggml.h"\n#define GGML_RPC_MAX_SERVERS 16\n') is None
    assert lb.parse_rpc_proto_version("") is None
    assert lb.parse_rpc_proto_version(None) is None


@pytest.mark.parametrize(
    ("text", "target"),
    [
        (RPC_CMAKELISTS, "ggml-rpc-server"),
        ("set(TARGET rpc-server)\nadd_executable(${TARGET} rpc-server.cpp)\n", "rpc-server"),
        ("add_executable(rpc-server rpc-server.cpp)\n", "rpc-server"),
        ("add_executable(${NAME} x.cpp)\n", None),
        ("", None),
    ],
)
def test_rpc_target_from_cmake(text, target):
    assert lb.rpc_target_from_cmake(text) == target


def test_detect_rpc_target_in_new_and_old_layouts(tmp_path):
    new = tmp_path / "new" / "tools" / "rpc"
    new.mkdir(parents=True)
    (new / "CMakeLists.txt").write_text(RPC_CMAKELISTS)
    old = tmp_path / "old" / "examples" / "rpc"
    old.mkdir(parents=True)
    (old / "CMakeLists.txt").write_text("set(TARGET rpc-server)\n")
    (tmp_path / "none").mkdir()
    assert lb.detect_rpc_target(str(tmp_path / "new")) == "ggml-rpc-server"
    assert lb.detect_rpc_target(str(tmp_path / "old")) == "rpc-server"
    assert lb.detect_rpc_target(str(tmp_path / "none")) is None


def test_resolve_targets_substitutes_the_rpc_server_name():
    requested = ["ggml-rpc-server", "llama-server", "llama-gguf-split"]
    assert lb.resolve_targets(requested, "rpc-server") == ["rpc-server", "llama-server", "llama-gguf-split"]
    assert lb.resolve_targets(["rpc-server"], "ggml-rpc-server") == ["ggml-rpc-server"]
    assert lb.resolve_targets(["rpc-server", "ggml-rpc-server"], "ggml-rpc-server") == ["ggml-rpc-server"]
    assert lb.resolve_targets(["llama-server"], None) == ["llama-server"]
    with pytest.raises(lb.BuildError, match="no RPC server"):
        lb.resolve_targets(["ggml-rpc-server"], None)


def test_rpc_server_in():
    assert lb.rpc_server_in(["llama-server", "rpc-server"]) == "rpc-server"
    assert lb.rpc_server_in(["llama-server"]) is None


def test_commit_from_changelog_takes_the_newest_entry():
    text = (
        "# Changelog\n\n## [Unreleased]\n\n## [0.3.36]\n\n"
        "- feat: update llama.cpp to ggml-org/llama.cpp@0c1e57098\n"
        "- fix: something\n\n## [0.3.35]\n\n- feat: update llama.cpp to ggml-org/llama.cpp@4df29be4f\n"
    )
    assert lb.commit_from_changelog(text) == "0c1e57098"
    assert lb.commit_from_changelog("no commit here") is None


@pytest.mark.parametrize("comment", ["", "hello", "abc123", "z" * 40, None, b"\x00\x01"])
def test_commit_from_archive_comment_ignores_non_commits(comment):
    assert lb.commit_from_archive_comment(comment) is None


@pytest.mark.parametrize(
    ("names", "number"),
    [
        (("llama.cpp-b6500.tar.gz",), 6500),
        (("b4000.zip",), 4000),
        (("src.tar.gz", "llama.cpp-b3001"), 3001),
        (("llama_cpp_python-0.3.36.tar.gz", "llama_cpp_python-0.3.36/vendor/llama.cpp"), None),
        ((None, ""), None),
    ],
)
def test_build_number_from_name(names, number):
    assert lb.build_number_from_name(*names) == number


# -- ELF tool output -------------------------------------------------------------------------------------


def test_parse_readelf_dynamic():
    info = lb.parse_readelf_dynamic(READELF)
    assert info == {
        "needed": ["libggml.so.0", "libgomp.so.1", "libc.so.6"],
        "runpath": "$ORIGIN",
        "rpath": None,
        "soname": "libggml-cpu.so",
    }
    assert lb.parse_readelf_dynamic("\nThere is no dynamic section in this file.\n")["needed"] == []


def test_parse_readelf_dynamic_old_rpath():
    line = " 0x000000000000000f (RPATH)              Library rpath: [/build/bin:/build/ggml/src]\n"
    assert lb.parse_readelf_dynamic(line)["rpath"] == "/build/bin:/build/ggml/src"


def test_parse_ldd():
    assert lb.parse_ldd(LDD) == {
        "libggml.so.0": "/cache/key/bin/./libggml.so.0",
        "libgomp.so.1": None,
        "libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
    }


def test_external_libraries():
    needed = {"bin/a": ["libggml.so", "libc.so.6"], "bin/libggml.so": ["libgomp.so.1", "libc.so.6"]}
    assert lb.external_libraries(needed, {"a", "libggml.so"}) == ["libc.so.6", "libgomp.so.1"]


@pytest.mark.parametrize(
    ("name", "is_lib"),
    [("libggml.so", True), ("libllama.so.0.0.7", True), ("libmtmd.so.0", True), ("llama-server", False)],
)
def test_is_shared_library_name(name, is_lib):
    assert lb.is_shared_library_name(name) is is_lib


# -- manifests -------------------------------------------------------------------------------------------


def make_entry(tmp_path, entry_key="k" * 64):
    """A cache entry laid out like the module writes one (made-up files, not a build)."""
    entry = tmp_path / entry_key
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "ggml-rpc-server").write_bytes(b"\x7fELF fake rpc server")
    (entry / "bin" / "libggml.so.0.9.4").write_bytes(b"\x7fELF fake lib")
    os.symlink("libggml.so.0.9.4", entry / "bin" / "libggml.so.0")
    files = [lb.file_entry(str(entry), f"bin/{n}") for n in sorted(os.listdir(entry / "bin"))]
    manifest = {"format": lb.CACHE_FORMAT, "key": entry_key, "files": files, "rpc_server": "ggml-rpc-server"}
    (entry / lb.MANIFEST).write_text(json.dumps(manifest))
    return entry, manifest


def test_file_entry(tmp_path):
    entry, manifest = make_entry(tmp_path)
    by_path = {f["path"]: f for f in manifest["files"]}
    assert by_path["bin/libggml.so.0"] == {"path": "bin/libggml.so.0", "link": "libggml.so.0.9.4"}
    rpc = by_path["bin/ggml-rpc-server"]
    assert rpc["size"] == len(b"\x7fELF fake rpc server")
    assert rpc["sha256"] == lb.sha256_file(str(entry / "bin" / "ggml-rpc-server"))
    assert len(rpc["mode"]) == 4


def test_validate_manifest_accepts_a_consistent_entry(tmp_path):
    entry, manifest = make_entry(tmp_path)
    assert lb.load_manifest(str(entry)) == manifest
    assert lb.validate_manifest(str(entry), manifest, "k" * 64) == (True, "")


def test_validate_manifest_rejects_changed_files(tmp_path):
    entry, manifest = make_entry(tmp_path)
    (entry / "bin" / "ggml-rpc-server").write_bytes(b"truncated")
    ok, reason = lb.validate_manifest(str(entry), manifest, "k" * 64)
    assert not ok
    assert "bin/ggml-rpc-server: size" in reason
    (entry / "bin" / "ggml-rpc-server").unlink()
    assert lb.validate_manifest(str(entry), manifest, "k" * 64) == (False, "bin/ggml-rpc-server: missing")


def test_validate_manifest_rejects_broken_symlinks(tmp_path):
    entry, manifest = make_entry(tmp_path)
    (entry / "bin" / "libggml.so.0.9.4").unlink()
    ok, reason = lb.validate_manifest(str(entry), manifest, "k" * 64)
    assert not ok
    assert "libggml" in reason


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda m: m.update(key="x" * 64), "key does not match"),
        (lambda m: m.update(format=0), "format"),
        (lambda m: m.update(files=[]), "no files"),
        (lambda m: m.update(files=[{"size": 1}]), "malformed"),
        (lambda m: m.update(files=[{"path": "../../etc/passwd", "size": 1}], rpc_server=None), "leaves the entry"),
        (lambda m: m.update(rpc_server="rpc-server"), "does not list bin/rpc-server"),
    ],
)
def test_validate_manifest_rejects_bad_manifests(tmp_path, mutate, reason):
    entry, manifest = make_entry(tmp_path)
    mutate(manifest)
    ok, why = lb.validate_manifest(str(entry), manifest, "k" * 64)
    assert not ok
    assert reason in why


def test_validate_manifest_of_garbage(tmp_path):
    assert lb.validate_manifest(str(tmp_path), ["not", "a", "dict"], "k") == (False, "manifest is not a JSON object")
    (tmp_path / lb.MANIFEST).write_text("{not json")
    assert lb.load_manifest(str(tmp_path)) is None
    assert lb.load_manifest(str(tmp_path / "missing")) is None


def test_log_tail():
    text = "\n".join(f"line {i}" for i in range(100)) + "\n\n"
    assert lb.log_tail(text, 3) == "line 97\nline 98\nline 99"
    assert lb.log_tail("", 3) == ""


def test_native_x86_builds_have_no_amx_and_other_arches_no_x86_flags():
    flags = lb.default_cmake_flags("x86_64", "native")
    assert f"-DCMAKE_C_FLAGS={lb.NO_AMX_C_FLAGS}" in flags and f"-DCMAKE_CXX_FLAGS={lb.NO_AMX_C_FLAGS}" in flags
    assert not any("amx" in f for f in lb.default_cmake_flags("aarch64", "native"))
    # Portable builds get no such flags (the variants' own -mamx-* would come later and win): the AMX variant is
    # left out of what ships instead.
    assert not any("amx" in f for f in lb.default_cmake_flags("x86_64"))


def test_the_amx_cpu_variant_is_not_shipped():
    assert not lb.is_shipped_library("libggml-cpu-sapphirerapids.so")
    assert lb.is_shipped_library("libggml-cpu-zen4.so")
    assert lb.is_shipped_library("libggml-base.so")
    assert not lb.is_shipped_library("README.md")
