# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""llama_cpp_build run in-process: checksum first, check mode, cache hits, safe extraction, failures.

``test_tiny_real_build_*`` run the whole pipeline (extract, CMake configure and build, staging, RUNPATH and
ldd checks, smoke test, manifest, atomic rename) on a *tiny* C project shaped like a llama.cpp tree
(CMakeLists.txt, ggml/, tools/rpc/): a real build of a tiny program that takes seconds, not a build of
llama.cpp. They are skipped without cmake and a C compiler. The real llama.cpp build is run through
Ansible by hand (see the module's EXAMPLES).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build as lb
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build_run as lbr
from ansible_collections.llamarpc.cluster.plugins.modules import llama_cpp_build

HAVE_TOOLCHAIN = all(shutil.which(tool) for tool in ("cmake", "cc", "c++", "readelf", "ldd"))
needs_toolchain = pytest.mark.skipif(not HAVE_TOOLCHAIN, reason="needs cmake, cc, c++, readelf and ldd")

TINY_TREE = {
    "CMakeLists.txt": (
        "cmake_minimum_required(VERSION 3.14)\n"
        "project(tiny C)\n"
        "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
        "set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
        "add_subdirectory(ggml)\n"
        "add_subdirectory(tools/rpc)\n"
    ),
    "ggml/CMakeLists.txt": (
        "add_library(ggml SHARED src/ggml.c)\n"
        "set_target_properties(ggml PROPERTIES VERSION 0.1.2 SOVERSION 0)\n"
        "target_include_directories(ggml PUBLIC include)\n"
    ),
    "ggml/src/ggml.c": "int ggml_answer(void) { return 42; }\n",
    "ggml/include/ggml-rpc.h": (
        "#define RPC_PROTO_MAJOR_VERSION    3\n"
        "#define RPC_PROTO_MINOR_VERSION    1\n"
        "#define RPC_PROTO_PATCH_VERSION    4\n"
        "int ggml_answer(void);\n"
    ),
    # An old tree's name for the RPC server: the module must build it when asked for ggml-rpc-server.
    "tools/rpc/CMakeLists.txt": (
        "set(TARGET rpc-server)\n"
        "add_executable(${TARGET} rpc-server.c)\n"
        "target_link_libraries(${TARGET} PRIVATE ggml)\n"
    ),
    "tools/rpc/rpc-server.c": (
        '#include <stdio.h>\n#include "ggml-rpc.h"\n'
        'int main(void) { fprintf(stderr, "usage: tiny rpc-server %d\\n", ggml_answer()); return 0; }\n'
    ),
}
TINY_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
]


def write_tar(path, files, top="tiny-b1234", extra=None):
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
        for info in extra or []:
            archive.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return str(path)


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def run(args, capsys, check_mode=False):
    """Run the module's main() in-process; return its JSON result."""
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), pytest.raises(SystemExit):
        llama_cpp_build.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def tiny(tmp_path):
    src = write_tar(tmp_path / "tiny-b1234.tar.gz", TINY_TREE)
    cache = tmp_path / "cache"
    args = {
        "src": src,
        "checksum": sha256(src),
        "cache_dir": str(cache),
        "cmake_flags": TINY_FLAGS,
        "targets": ["ggml-rpc-server"],
        "log_file": str(tmp_path / "logs" / "build.log"),
    }
    return args, cache


def test_checksum_mismatch_fails_before_anything_else(tiny, capsys):
    args, cache = tiny
    args["checksum"] = "sha256:" + "0" * 64
    args["cmake_flags"] = ["-DCMAKE_C_COMPILER=/nonexistent/cc"]  # would fail later, checksum comes first
    result = run(args, capsys)
    assert result["failed"]
    assert "checksum mismatch" in result["msg"]
    assert "0" * 64 in result["msg"]
    assert not cache.exists()


def test_checksum_mismatch_fails_in_check_mode_too(tiny, capsys):
    args, cache = tiny
    args["checksum"] = "1" * 64
    result = run(args, capsys, check_mode=True)
    assert result["failed"]
    assert "checksum mismatch" in result["msg"]


def test_malformed_checksum_is_reported(tiny, capsys):
    args, _cache = tiny
    args["checksum"] = "not-a-digest"
    result = run(args, capsys)
    assert result["failed"]
    assert "sha256 hex digest" in result["msg"]


def test_missing_archive_and_bad_subdir(tiny, tmp_path, capsys):
    args, _cache = tiny
    result = run(dict(args, src=str(tmp_path / "nope.tar.gz"), checksum=None), capsys)
    assert result["failed"]
    assert "does not exist" in result["msg"]
    result = run(dict(args, subdir="../elsewhere"), capsys)
    assert result["failed"]
    assert "relative path inside the archive" in result["msg"]


@needs_toolchain
def test_check_mode_with_a_cache_miss_reports_a_build_and_builds_nothing(tiny, capsys):
    args, cache = tiny
    result = run(args, capsys, check_mode=True)
    assert result["changed"] is True
    assert result["cache_state"] == "missing"
    assert result["build_seconds"] == 0.0
    assert result["entry_dir"] == os.path.join(str(cache), result["key"])
    assert result["bin_dir"] == os.path.join(result["entry_dir"], "bin")
    assert "manifest" not in result
    assert not cache.exists()
    assert not os.path.exists(args["log_file"])


@needs_toolchain
def test_check_mode_with_a_valid_entry_is_unchanged(tiny, capsys):
    args, _cache = tiny
    key = run(args, capsys, check_mode=True)["key"]
    # A hand-made entry for that key (made-up file: this checks cache validation, not a build).
    entry = os.path.join(args["cache_dir"], key)
    os.makedirs(os.path.join(entry, "bin"))
    with open(os.path.join(entry, "bin", "rpc-server"), "wb") as handle:
        handle.write(b"\x7fELF")
    manifest = {
        "format": lb.CACHE_FORMAT,
        "key": key,
        "files": [lb.file_entry(entry, "bin/rpc-server")],
        "rpc_server": "rpc-server",
        "rpc_protocol": None,
    }
    with open(os.path.join(entry, lb.MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
    result = run(args, capsys, check_mode=True)
    assert result["changed"] is False
    assert result["cache_state"] == "hit"
    assert result["rpc_server_path"] == os.path.join(entry, "bin", "rpc-server")
    # A damaged entry is a miss again, with the reason.
    os.truncate(os.path.join(entry, "bin", "rpc-server"), 1)
    result = run(args, capsys, check_mode=True)
    assert result["changed"] is True
    assert result["cache_state"] == "invalid"
    assert "bin/rpc-server: size" in result["cache_reason"]


@needs_toolchain
def test_key_depends_on_flags_and_targets(tiny, capsys):
    args, _cache = tiny
    base = run(args, capsys, check_mode=True)["key"]
    assert run(dict(args, targets=["ggml-rpc-server", "other"]), capsys, check_mode=True)["key"] != base
    assert run(dict(args, cmake_flags=[*TINY_FLAGS, "-DX=1"]), capsys, check_mode=True)["key"] != base
    assert run(dict(args, checksum=None), capsys, check_mode=True)["key"] == base


def test_extract_refuses_members_outside_the_tree(tmp_path):
    evil = tarfile.TarInfo("../evil")
    evil.size = 1
    src = write_tar(tmp_path / "evil.tar.gz", {"CMakeLists.txt": ""}, extra=[evil])
    with pytest.raises(lb.BuildError, match="unsafe member"):
        lbr.extract(src, "tar", str(tmp_path / "out"))
    assert not (tmp_path / "evil").exists()


def test_extract_refuses_links_outside_the_tree(tmp_path):
    link = tarfile.TarInfo("top/ggml/escape")
    link.type = tarfile.SYMTYPE
    link.linkname = "../../../etc/passwd"
    src = write_tar(tmp_path / "link.tar.gz", {"CMakeLists.txt": ""}, extra=[link])
    with pytest.raises(lb.BuildError, match="points outside"):
        lbr.extract(src, "tar", str(tmp_path / "out"))


def test_extract_skips_devices_and_strips_setuid(tmp_path):
    fifo = tarfile.TarInfo("tiny-b1234/fifo")
    fifo.type = tarfile.FIFOTYPE
    tool = tarfile.TarInfo("tiny-b1234/tool.sh")
    tool.size = 2
    tool.mode = 0o4755
    src = write_tar(tmp_path / "odd.tar.gz", {"CMakeLists.txt": ""}, extra=[fifo, tool])
    names, _comment = lbr.extract(src, "tar", str(tmp_path / "out"))
    assert "tiny-b1234/fifo" not in names
    assert not (tmp_path / "out" / "tiny-b1234" / "fifo").exists()
    assert (tmp_path / "out" / "tiny-b1234" / "tool.sh").stat().st_mode & 0o7777 == 0o755


def test_corrupt_archive_is_a_clean_failure(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(lb.BuildError, match="cannot extract"):
        lbr.extract(str(bad), "tar", str(tmp_path / "out"))


@needs_toolchain
def test_tiny_real_build_check_apply_apply_check(tiny, capsys):
    """A real CMake build of a tiny tree: check mode, build, cached, check mode again."""
    args, cache = tiny
    assert run(args, capsys, check_mode=True)["changed"] is True

    built = run(args, capsys)
    assert built["changed"] is True, built.get("msg")
    assert built["cache_state"] == "missing"
    manifest = built["manifest"]
    entry = built["entry_dir"]
    # The RPC server is called rpc-server in this (old-style) tree although ggml-rpc-server was asked for.
    assert built["rpc_server"] == "rpc-server"
    assert manifest["built_targets"] == ["rpc-server"]
    assert manifest["targets"] == ["ggml-rpc-server"]
    assert built["rpc_protocol"] == {"major": 3, "minor": 1, "patch": 4, "version": "3.1.4"}
    assert manifest["llama_cpp"]["build_number"] == 1234
    assert "-DLLAMA_BUILD_NUMBER=1234" in manifest["configure_args"]
    assert manifest["source"]["subdir"] == "tiny-b1234"
    paths = {f["path"]: f for f in manifest["files"]}
    assert set(paths) == {"bin/rpc-server", "bin/libggml.so", "bin/libggml.so.0", "bin/libggml.so.0.1.2"}
    assert paths["bin/libggml.so.0"]["link"] == "libggml.so.0.1.2"
    assert manifest["runpath"]["bin/rpc-server"] == "$ORIGIN"
    assert "libggml.so.0" in manifest["needed"]["bin/rpc-server"]
    assert "libc.so.6" in manifest["external_libraries"]
    assert manifest["smoke_test"] == "usage: tiny rpc-server 42"
    with open(os.path.join(entry, lb.MANIFEST), encoding="utf-8") as handle:
        assert json.load(handle) == manifest
    # Nothing left behind but the entry, its lock and the log; the binary runs from the entry.
    assert sorted(os.listdir(cache)) == sorted([built["key"], f".{built['key']}.lock"])
    assert os.path.getsize(args["log_file"]) > 0
    proc = subprocess.run([built["rpc_server_path"]], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert "tiny rpc-server 42" in proc.stderr
    # The archive shipped to nodes holds exactly bin/, links as links.
    assert built["archive"] == os.path.join(entry, "bin.tar.gz")
    with tarfile.open(built["archive"]) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {p.removeprefix("bin/") for p in paths}
    assert members["libggml.so.0"].issym() and members["libggml.so.0"].linkname == "libggml.so.0.1.2"

    again = run(args, capsys)
    assert again["changed"] is False
    assert again["cache_state"] == "hit"
    assert again["manifest"] == manifest
    assert run(args, capsys, check_mode=True)["changed"] is False


@needs_toolchain
def test_tiny_real_build_moved_entry_still_runs(tiny, tmp_path, capsys):
    """RUNPATH $ORIGIN: the bin/ directory works wherever it is copied (as on a node)."""
    args, _cache = tiny
    built = run(args, capsys)
    copy = tmp_path / "node" / "opt-llama"
    # As the role unpacks it on a node; with the "data" filter Python 3.14 applies by default (3.12+ warn without it).
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    shutil.unpack_archive(built["archive"], copy, **safe)
    shutil.rmtree(built["entry_dir"])
    proc = subprocess.run([str(copy / "rpc-server")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    # The entry is gone: the next run is a miss and builds again.
    assert run(args, capsys, check_mode=True)["cache_state"] == "missing"


@needs_toolchain
def test_tiny_real_build_force_rebuilds(tiny, capsys):
    args, _cache = tiny
    first = run(args, capsys)
    forced = run(dict(args, force=True), capsys)
    assert forced["changed"] is True
    assert forced["cache_state"] == "forced"
    assert forced["key"] == first["key"]
    assert forced["manifest"]["built_at"] >= first["manifest"]["built_at"]
    assert run(args, capsys)["changed"] is False


@needs_toolchain
def test_tiny_build_failure_reports_the_log_tail_and_cleans_up(tiny, tmp_path, capsys):
    args, cache = tiny
    broken = dict(TINY_TREE, **{"ggml/src/ggml.c": "int ggml_answer(void) { return 42 }\n"})
    src = write_tar(tmp_path / "broken.tar.gz", broken)
    args = dict(args, src=src, checksum=sha256(src), log_file=None)
    result = run(args, capsys)
    assert result["failed"]
    assert "CMake build failed" in result["msg"]
    assert "ggml.c" in result["log_tail"]
    assert "error" in result["log_tail"]
    assert "Traceback" not in result["msg"]
    leftovers = [n for n in os.listdir(cache) if not n.endswith(".lock")]
    assert leftovers == []


@needs_toolchain
def test_missing_rpc_server_is_a_clean_failure(tiny, tmp_path, capsys):
    args, cache = tiny
    tree = {k: v for k, v in TINY_TREE.items() if not k.startswith("tools/")}
    tree["CMakeLists.txt"] = TINY_TREE["CMakeLists.txt"].replace("add_subdirectory(tools/rpc)\n", "")
    src = write_tar(tmp_path / "norpc.tar.gz", tree)
    result = run(dict(args, src=src, checksum=sha256(src)), capsys)
    assert result["failed"]
    assert "no RPC server" in result["msg"]
    assert [n for n in os.listdir(cache) if not n.endswith(".lock")] == []


FNV_SOURCE = Path(__file__).resolve().parents[4] / "roles" / "llama_rpc_worker" / "files" / "llamarpc_fnv1a.cpp"


def module_stub():
    """What compiler_argv uses of an AnsibleModule."""
    return type("Stub", (), {"get_bin_path": staticmethod(shutil.which)})()


@pytest.fixture
def with_helper(tiny, tmp_path):
    """The tiny build with the verifier's real helper source (a copy, so that a test may change it)."""
    args, cache = tiny
    source = tmp_path / "helpers" / "llamarpc_fnv1a.cpp"
    source.parent.mkdir()
    shutil.copyfile(FNV_SOURCE, source)
    return dict(args, helpers=[str(source)]), cache, source


@needs_toolchain
def test_tiny_real_build_ships_a_helper_compiled_with_it(with_helper, tmp_path, capsys):
    args, _cache, source = with_helper
    plain_key = run(dict(args, helpers=[]), capsys, check_mode=True)["key"]
    built = run(args, capsys)
    assert built["changed"] is True, built.get("msg")
    assert built["key"] != plain_key
    manifest = built["manifest"]
    assert manifest["helpers"] == [{"name": "llamarpc-fnv1a", "source": str(source), "sha256": sha256(source)}]
    listed = {f["path"]: f for f in manifest["files"]}
    assert listed["bin/llamarpc-fnv1a"]["mode"] == "0755"
    assert listed["bin/llamarpc-fnv1a"]["sha256"] == sha256(os.path.join(built["bin_dir"], "llamarpc-fnv1a"))
    assert "libstdc++.so.6" in manifest["needed"]["bin/llamarpc-fnv1a"]
    # Compiled with the build's C++ compiler, into the build log, before the CMake build.
    with open(args["log_file"], encoding="utf-8") as handle:
        log = handle.read()
    compile_line = next(line for line in log.splitlines() if line.startswith("$ ") and "llamarpc_fnv1a.cpp" in line)
    assert " -O2 -Wall -o " in compile_line
    assert compile_line.split()[1] == lbr.compiler_argv(module_stub(), [], "cxx")[0]
    assert log.index(compile_line) < log.index("--build")
    # Shipped in the archive, and it hashes as llama.cpp does from wherever the archive is unpacked.
    node = tmp_path / "node"
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    shutil.unpack_archive(built["archive"], node, **safe)
    proc = subprocess.run(
        [str(node / "llamarpc-fnv1a"), "/dev/stdin"], input="foobar", capture_output=True, text=True, check=True
    )
    assert proc.stdout.startswith("85944171f73967e8")
    # A rerun is a hit; the same source is the same key, a changed one a new key.
    assert run(args, capsys)["changed"] is False
    source.write_text(source.read_text() + "// changed\n")
    changed = run(args, capsys, check_mode=True)
    assert changed["key"] not in {built["key"], plain_key}
    assert changed["cache_state"] == "missing"


@needs_toolchain
def test_a_missing_helper_in_the_entry_makes_it_invalid(with_helper, capsys):
    args, _cache, _source = with_helper
    built = run(args, capsys)
    os.unlink(os.path.join(built["bin_dir"], "llamarpc-fnv1a"))
    again = run(args, capsys, check_mode=True)
    assert again["cache_state"] == "invalid"
    assert again["cache_reason"] == "bin/llamarpc-fnv1a: missing"


@needs_toolchain
def test_a_helper_that_does_not_compile_fails_the_build_with_the_log_tail(with_helper, capsys):
    args, cache, source = with_helper
    source.write_text("int main() { return 0 }\n")
    result = run(dict(args, log_file=None), capsys)
    assert result["failed"]
    assert "Compile of helper llamarpc-fnv1a failed" in result["msg"]
    assert "llamarpc_fnv1a.cpp" in result["log_tail"]
    assert "error" in result["log_tail"]
    assert "Traceback" not in result["msg"]
    assert [n for n in os.listdir(cache) if not n.endswith(".lock")] == []


def test_a_missing_helper_source_is_a_clean_failure(tiny, tmp_path, capsys):
    args, cache = tiny
    result = run(dict(args, helpers=[str(tmp_path / "gone.cpp")]), capsys, check_mode=True)
    assert result["failed"]
    assert "helper source" in result["msg"] and "does not exist" in result["msg"]
    assert not cache.exists()


# A patch of the tiny tree as `diff -ru a b` writes one: the RPC server's usage line says it was patched.
TINY_PATCH = """Tiny: the RPC server says it is patched.

--- a/tools/rpc/rpc-server.c
+++ b/tools/rpc/rpc-server.c
@@ -1,3 +1,3 @@
 #include <stdio.h>
 #include "ggml-rpc.h"
-int main(void) { fprintf(stderr, "usage: tiny rpc-server %d\\n", ggml_answer()); return 0; }
+int main(void) { fprintf(stderr, "usage: tiny patched rpc-server %d\\n", ggml_answer()); return 0; }
"""


def a_patch(tmp_path, name="tiny.patch", text=TINY_PATCH):
    path = tmp_path / "patches" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


@pytest.fixture
def warned(monkeypatch):
    """The texts the module warns with, as it says them (a result's warnings depend on whether an earlier test in
    the process imported controller code, which sends a module's warnings to the display instead)."""
    said = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: said.append(text))
    return said


def unpatched_source(tmp_path):
    """The tiny tree with another RPC server source: a source the patch was not written for."""
    tree = dict(TINY_TREE)
    tree["tools/rpc/rpc-server.c"] = tree["tools/rpc/rpc-server.c"].replace("usage: tiny", "usage: other tiny")
    return write_tar(tmp_path / "other-b1234.tar.gz", tree)


@needs_toolchain
def test_tiny_real_build_applies_a_patch_before_the_build_and_keys_and_records_it(tiny, tmp_path, capsys, warned):
    args, _cache = tiny
    plain_key = run(args, capsys, check_mode=True)["key"]
    patch = a_patch(tmp_path)
    args = dict(args, patches=[patch])
    built = run(args, capsys)
    assert built["changed"] is True, built.get("msg")
    assert built["key"] != plain_key
    recorded = [{"name": "tiny.patch", "sha256": sha256(patch), "applied": True, "reason": ""}]
    assert built["patches"] == built["manifest"]["patches"] == recorded
    assert warned == []
    # The patched source is what was built: the smoke's usage line is the patched one.
    assert built["manifest"]["smoke_test"] == "usage: tiny patched rpc-server 42"
    with open(args["log_file"], encoding="utf-8") as handle:
        log = handle.read()
    assert "--fuzz=0" in log and "--dry-run" in log
    assert log.index("--dry-run") < log.index("--build")
    # A rerun is a hit that reports the same patches; a changed patch is another key.
    again = run(args, capsys)
    assert (again["changed"], again["cache_state"], again["patches"]) == (False, "hit", recorded)
    Path(patch).write_text(TINY_PATCH.replace("patched rpc-server", "patched again rpc-server"))
    assert run(args, capsys, check_mode=True)["key"] not in {built["key"], plain_key}


@needs_toolchain
def test_a_source_the_patch_does_not_apply_to_builds_without_it_and_says_so_once(tiny, tmp_path, capsys, warned):
    args, _cache = tiny
    src = unpatched_source(tmp_path)
    args = dict(args, src=src, checksum=sha256(src), patches=[a_patch(tmp_path)])
    built = run(args, capsys)
    assert built["changed"] is True, built.get("msg")
    (outcome,) = built["patches"]
    assert outcome["applied"] is False
    assert outcome["reason"].startswith("does not apply to this source: ")
    assert "FAILED" in outcome["reason"]  # GNU patch's own words: "1 out of 1 hunk FAILED"
    assert built["manifest"]["smoke_test"] == "usage: other tiny rpc-server 42"  # built, unpatched
    assert warned == [f"llama.cpp was built without the patch tiny.patch: it {outcome['reason']}"]
    # Once: the cached build is the same outcome, and says nothing again.
    warned.clear()
    again = run(args, capsys)
    assert again["cache_state"] == "hit" and again["patches"] == built["patches"]
    assert warned == []


@needs_toolchain
@pytest.mark.parametrize(
    ("name", "text"),
    [
        # One line of context moved: a fuzzy patch would apply it somewhere, this one must not.
        ("fuzzy.patch", TINY_PATCH.replace(' #include "ggml-rpc.h"\n', ' #include "ggml-rpc-other.h"\n')),
        # The tree has it already (or it is reversed): never reversed, never applied twice.
        ("reversed.patch", TINY_PATCH.replace("+int", "=int").replace("-int", "+int").replace("=int", "-int")),
    ],
)
def test_a_patch_applies_exactly_or_not_at_all(tiny, tmp_path, capsys, name, text):
    args, _cache = tiny
    built = run(dict(args, patches=[a_patch(tmp_path, name, text)]), capsys)
    assert built["changed"] is True, built.get("msg")
    assert built["patches"][0]["applied"] is False, built["patches"]
    assert built["manifest"]["smoke_test"] == "usage: tiny rpc-server 42"  # the tree as it was


@needs_toolchain
def test_a_malformed_patch_fails_the_build_instead_of_building_without_it(tiny, tmp_path, capsys):
    args, cache = tiny
    broken = a_patch(tmp_path, "broken.patch", TINY_PATCH.replace("@@ -1,3 +1,3 @@", "@@ -1,2 +1,2 @@"))
    result = run(dict(args, patches=[broken]), capsys)
    assert result["failed"]
    assert "broken.patch" in result["msg"] and "malformed patch" in result["msg"]
    assert [n for n in os.listdir(cache) if not n.endswith(".lock")] == []


def test_bad_patch_requests_fail_before_anything_is_built(tiny, tmp_path, capsys):
    args, cache = tiny
    gone = run(dict(args, patches=[str(tmp_path / "gone.patch")]), capsys, check_mode=True)
    assert gone["failed"] and "patch" in gone["msg"] and "does not exist" in gone["msg"]
    named = run(dict(args, patches=[a_patch(tmp_path, "fix.txt")]), capsys, check_mode=True)
    assert named["failed"] and "NAME.patch or NAME.diff" in named["msg"]
    (tmp_path / "other").mkdir()
    twice = [a_patch(tmp_path), str(Path(shutil.copy(a_patch(tmp_path), tmp_path / "other" / "tiny.patch")))]
    assert "two patches are named tiny.patch" in run(dict(args, patches=twice), capsys, check_mode=True)["msg"]
    assert not cache.exists()


# The tiny tree's configure step prints the scheduling class it runs in (CMake runs chrt and ionice as its children,
# as it runs the compilers), into the build log.
PRIORITY_PROBE = (
    "execute_process(COMMAND chrt -p 0 OUTPUT_VARIABLE tiny_cpu)\n"
    "execute_process(COMMAND ionice OUTPUT_VARIABLE tiny_io)\n"
    "execute_process(COMMAND cat /proc/self/autogroup OUTPUT_VARIABLE tiny_group)\n"
    'string(REPLACE "\\n" " " tiny_group "${tiny_group}")\n'
    'string(REPLACE "\\n" " " tiny_cpu "${tiny_cpu}")\n'
    'string(REPLACE "\\n" " " tiny_io "${tiny_io}")\n'
    'message(STATUS "tiny priority: ${tiny_cpu} io ${tiny_io} group ${tiny_group}")\n'
)
needs_util_linux = pytest.mark.skipif(
    not (shutil.which("chrt") and shutil.which("ionice")), reason="needs chrt, ionice"
)


@needs_toolchain
@needs_util_linux
@pytest.mark.parametrize(("priority", "cpu", "io"), [("idle", "SCHED_IDLE", "idle"), ("normal", "SCHED_OTHER", None)])
def test_the_build_steps_run_at_the_priority_asked(tiny, tmp_path, capsys, priority, cpu, io):
    """idle: what the build runs (CMake and its children) is in the CPU's and the I/O's idle classes, in a session
    whose autogroup has the lowest weight (nice 19: the CPU is shared between sessions' autogroups before classes
    count); normal: as the module. Fails when the steps are not run at the priority (the log says SCHED_OTHER, or an
    autogroup at nice 0)."""
    args, _cache = tiny
    tree = dict(TINY_TREE, **{"CMakeLists.txt": TINY_TREE["CMakeLists.txt"] + PRIORITY_PROBE})
    src = write_tar(tmp_path / f"probe-{priority}.tar.gz", tree)
    built = run(dict(args, src=src, checksum=sha256(src), priority=priority), capsys)
    assert built["changed"] is True, built.get("msg")
    assert built["priority"] == priority
    line = next(x for x in Path(args["log_file"]).read_text().splitlines() if "tiny priority:" in x)
    assert f"policy: {cpu}" in line, line
    assert (f"io {io}" in line) if io else ("io idle" not in line), line
    if os.path.exists("/proc/self/autogroup"):
        # This test's own autogroup, which the build must not lower. The file is empty for a process in the kernel's
        # default autogroup (a session never started since boot: the CI's runner, a child of PID 1's session).
        mine = Path("/proc/self/autogroup").read_text(encoding="ascii").strip()
        group = line.split(" group", 1)[1].strip()  # the configure step's (empty in the default autogroup)
        if priority == "idle":
            assert group.endswith(" nice 19") and group != mine, line
        else:
            assert group == mine, line
        assert not Path("/proc/self/autogroup").read_text(encoding="ascii").strip().endswith(" nice 19")
    # The module itself (this test's process) keeps its own class: only the steps are lowered.
    assert os.sched_getscheduler(0) != os.SCHED_IDLE
    again = run(dict(args, src=src, checksum=sha256(src), priority=priority), capsys)
    assert again["cache_state"] == "hit" and "priority" not in again  # a hit builds nothing


def test_priority_idle_without_its_tools_fails_before_anything_is_built(tiny, capsys, monkeypatch):
    args, cache = tiny
    real = shutil.which
    monkeypatch.setattr(
        basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None if name == "chrt" else real(name)
    )
    result = run(dict(args, priority="idle"), capsys)
    assert result["failed"]
    assert "priority idle needs chrt (util-linux)" in result["msg"] and "priority normal" in result["msg"]
    assert [n for n in os.listdir(cache) if not n.endswith(".lock")] == [] if cache.exists() else True


def test_an_unprivileged_build_asks_again_for_its_autogroups_weight(tmp_path, monkeypatch):
    """The kernel lets an unprivileged process change an autogroup's nice once per tenth of a second machine-wide and
    answers EAGAIN in between: the child asks again instead of building at its session's full weight."""
    group = tmp_path / "autogroup"
    refusals = iter([True, True, False])
    real_open = open

    def rate_limited(path, *args, **kwargs):
        if str(path) == str(group) and next(refusals):
            raise BlockingIOError(11, "write could not complete without blocking")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", rate_limited)
    slept = []
    assert lbr._autogroup_nice(str(group), sleep=slept.append) is True
    assert group.read_text() == "19" and len(slept) == 2
    assert lbr._autogroup_nice(str(tmp_path / "none" / "autogroup"), sleep=slept.append) is False  # no autogroups
