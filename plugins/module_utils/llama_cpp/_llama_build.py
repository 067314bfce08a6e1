# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers for building llama.cpp once and caching the result.

Cache key, source-tree detection inside an archive listing, version and target parsing from the
llama.cpp sources, parsing of ``readelf``/``ldd`` output and manifest validation. Standard library
only and free of side effects (except reading the files or directories they are handed), so they can
be unit-tested; the module ``llama_cpp_build`` does the work.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re

# Bump when the layout of a cache entry or the meaning of the key changes: old entries are then ignored.
CACHE_FORMAT = 2  # 2: no AMX code (NO_AMX_C_FLAGS, UNSHIPPED_LIBRARIES)
MANIFEST = "manifest.json"

# The flags from the project notes: RPC backend on, no network features, no UI download.
BASE_CMAKE_FLAGS = (
    "-DGGML_RPC=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
)

# The binaries are copied to other nodes, so they must neither be tuned to the build host's CPU nor
# look for their libraries in the (deleted) build tree. This is what upstream's Linux release job does.
PORTABLE_CMAKE_FLAGS = (
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=ON",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
)

# One CPU backend per instruction-set level, the best one picked at run time (ggml_backend_load_all).
# llama.cpp supports this for these architectures on Linux; elsewhere the baseline build is used.
CPU_VARIANT_FLAGS = ("-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON")
CPU_VARIANT_ARCHES = frozenset({"x86_64", "amd64", "aarch64", "arm64", "ppc64le", "s390x", "riscv64"})

# AMX off. This llama.cpp's AMX matmul (ggml-cpu/amx/mmq.cpp) fills a tile configuration on the stack and loads
# it with _tile_loadconfig, which GCC 12 takes to read 8 bytes only: the stores of the tile sizes are dropped, the
# tiles stay unconfigured and the first tile instruction faults (#UD: SIGILL, "trap invalid opcode", in
# tinygemm_kernel_amx). Every llama-server that computes on an AMX CPU with weight repacking on is hit; RPC workers
# never use the AMX buffer type. A native build would compile it in on an AMX build host (-march=native), so the
# compiler is told there is no AMX there; x86 only (other compilers reject the flags).
NO_AMX_C_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
X86_ARCHES = frozenset({"x86_64", "amd64"})
# The portable build's variant for AMX CPUs: chosen at run time from CPUID alone on any AMX node, and compiled with
# -mamx-* flags of its own that come after ours. Not shipped: ggml then loads the next-best variant.
UNSHIPPED_LIBRARIES = frozenset({"libggml-cpu-sapphirerapids.so"})

DEFAULT_TARGETS = ("ggml-rpc-server", "llama-server", "llama-gguf-split")

# Extra single-file C++ programs built with the tree (the ``helpers`` option): the flags the llama_rpc_worker role's
# compile fallback uses too, and no -march (they run on every node, like the portable build).
HELPER_CXX_FLAGS = ("-O2", "-Wall")
HELPER_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++")
RPC_SERVER_NAMES = ("ggml-rpc-server", "rpc-server")

# Where llama.cpp keeps the RPC server's CMakeLists, newest layout first.
RPC_CMAKELISTS = ("tools/rpc/CMakeLists.txt", "examples/rpc/CMakeLists.txt")

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{7,40}$")
_CHANGELOG_COMMIT_RE = re.compile(r"llama\.cpp@([0-9a-f]{7,40})\b")
_BUILD_NUMBER_RE = re.compile(r"(?:^|[-_/])b(\d{3,6})(?:$|[-_./])")
_RPC_VERSION_RE = re.compile(r"^\s*#\s*define\s+RPC_PROTO_(MAJOR|MINOR|PATCH)_VERSION\s+(\d+)", re.MULTILINE)
_SET_TARGET_RE = re.compile(r"^\s*set\s*\(\s*TARGET\s+([A-Za-z0-9_.+-]+)\s*\)", re.MULTILINE | re.IGNORECASE)
_ADD_EXECUTABLE_RE = re.compile(r"^\s*add_executable\s*\(\s*([A-Za-z0-9_.+-]+)\s", re.MULTILINE | re.IGNORECASE)
_READELF_DYN_RE = re.compile(r"\((NEEDED|RUNPATH|RPATH|SONAME)\)\s+[^\[]*\[(.*)\]\s*$")
_LDD_FOUND_RE = re.compile(r"^\s*(\S+)\s+=>\s+(.+?)\s+\(0x[0-9a-f]+\)\s*$")
_LDD_NOT_FOUND_RE = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")
_HELPER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]*$")
_PATCH_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.(?:patch|diff)$")


class BuildError(Exception):
    """A failure the module reports with fail_json (message meant for the user)."""


def normalize_sha256(value):
    """Lower-case a sha256 hex digest, accepting an optional ``sha256:`` prefix; raise on garbage."""
    text = str(value).strip().lower()
    if text.startswith("sha256:"):
        text = text[len("sha256:") :]
    if not _SHA256_RE.match(text):
        raise BuildError(f"checksum must be a sha256 hex digest (64 hex characters), got {value!r}")
    return text


def sha256_file(path, chunk=1 << 20):
    """Hex sha256 of a file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_kind(path):
    """``tar`` or ``zip`` from the archive's name; raise for anything else."""
    name = os.path.basename(path).lower()
    if name.endswith((".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar")):
        return "tar"
    if name.endswith(".zip"):
        return "zip"
    raise BuildError(f"{path}: unsupported archive type (use .tar.gz, .tar.xz, .tar.bz2, .tar or .zip)")


def default_cmake_flags(arch, cpu="portable"):
    """The default configure flags for a build host of architecture ``arch`` (platform.machine()).

    ``cpu="portable"`` builds for any CPU of the architecture (one backend per instruction-set level where
    llama.cpp offers them); ``cpu="native"`` tunes to the build host's CPU, for nodes that have the same one
    (a lab on the build host itself), and builds much faster.
    """
    if cpu == "native":
        flags = list(BASE_CMAKE_FLAGS) + ["-DGGML_NATIVE=ON"] + list(PORTABLE_CMAKE_FLAGS[1:])
        if str(arch).lower() in X86_ARCHES:
            flags += [f"-DCMAKE_C_FLAGS={NO_AMX_C_FLAGS}", f"-DCMAKE_CXX_FLAGS={NO_AMX_C_FLAGS}"]
        return flags
    flags = list(BASE_CMAKE_FLAGS) + list(PORTABLE_CMAKE_FLAGS)
    if str(arch).lower() in CPU_VARIANT_ARCHES:
        flags += list(CPU_VARIANT_FLAGS)
    return flags


def cmake_define(flags, name):
    """The value of the last ``-D<name>[:TYPE]=value`` in ``flags``, or None if not defined."""
    value = None
    prefix = f"-D{name}"
    for flag in flags:
        if not flag.startswith(prefix):
            continue
        rest = flag[len(prefix) :]
        if rest.startswith(":"):
            rest = rest.split("=", 1)[1] if "=" in rest else None
        elif rest.startswith("="):
            rest = rest[1:]
        else:
            continue
        if rest is not None:
            value = rest
    return value


def helper_name(path):
    """The program a helper source builds: its file name without the suffix, ``_`` as ``-``.

    ``llamarpc_fnv1a.cpp`` builds ``llamarpc-fnv1a``.
    """
    return os.path.splitext(os.path.basename(str(path)))[0].replace("_", "-")


def helper_sources(paths, targets=()):
    """``[{name, path, sha256}]`` of the helper sources, ordered by name; raise for a source that is missing,
    not C++, or whose program name is taken (by another helper, a target or the libraries beside them)."""
    helpers = {}
    taken = set(targets) | set(RPC_SERVER_NAMES)
    for path in paths or ():
        name = helper_name(path)
        if not str(path).lower().endswith(HELPER_SUFFIXES):
            raise BuildError(f"helper {path}: not a C++ source ({', '.join(HELPER_SUFFIXES)})")
        if not os.path.isfile(path):
            raise BuildError(f"helper source {path} does not exist")
        if not _HELPER_NAME_RE.match(name) or is_shared_library_name(name):
            raise BuildError(f"helper {path}: {name!r} is not a usable program name")
        if name in helpers or name in taken:
            raise BuildError(f"helper {path}: the program name {name} is taken (two helpers, or a target of that name)")
        helpers[name] = {"name": name, "path": str(path), "sha256": sha256_file(path)}
    return [helpers[name] for name in sorted(helpers)]


def patch_sources(paths):
    """``[{name, path, sha256}]`` of the patch files, in the order given (the order they are applied in); raise for a
    file that is missing, not named ``*.patch`` or ``*.diff``, or whose name another patch has (they are copied side
    by side onto the build host)."""
    patches, names = [], set()
    for path in paths or ():
        name = os.path.basename(str(path))
        if not _PATCH_NAME_RE.match(name):
            raise BuildError(f"patch {path}: name it NAME.patch or NAME.diff (letters, digits, '.', '_', '+', '-')")
        if not os.path.isfile(path):
            raise BuildError(f"patch {path} does not exist")
        if name in names:
            raise BuildError(f"patch {path}: two patches are named {name}")
        names.add(name)
        patches.append({"name": name, "path": str(path), "sha256": sha256_file(path)})
    return patches


def patch_argv(patch, source_dir, patch_file, dry_run):
    """GNU patch applying ``patch_file`` to the tree ``source_dir`` strictly: paths stripped of one directory (``a/``
    and ``b/`` of ``git diff`` or ``diff -ru a b``), no fuzz, never reversed, no questions, no backup or reject files.
    ``dry_run`` only checks that it applies."""
    argv = [patch, "-p1", "--forward", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "--reject-file=-"]
    argv += ["--directory", source_dir, "--input", patch_file]
    return [*argv, "--dry-run"] if dry_run else argv


def patch_refusal(output, lines=3):
    """Why a patch does not apply, from GNU patch's output: its messages, not the files it checked."""
    found = [line.strip() for line in (output or "").splitlines() if line.strip()]
    found = [line for line in found if not line.startswith("checking file ")] or found
    return "; ".join(found[:lines]) or "patch refused it"


def cache_key(source_sha256, *, subdir, cmake_flags, targets, arch, compiler, helpers=(), patches=()):
    """The cache key: sha256 over everything that changes the binaries.

    ``subdir`` is the requested one (None = auto-detect, which is deterministic for one archive),
    flags and targets keep their order (order matters to CMake: a later -D wins). ``helpers``
    (``helper_sources``) add each program's name and source sha256; without them the key is the one
    of a build before helpers existed, so the entries cached then stay valid. ``patches`` (``patch_sources``) add
    each patch's name and sha256 in their order, the same way: whether a patch applies to the source follows from
    both, so a key holds one outcome.
    """
    payload = {
        "format": CACHE_FORMAT,
        "source_sha256": normalize_sha256(source_sha256),
        "subdir": normalize_subdir(subdir) if subdir else None,
        "cmake_flags": [str(f) for f in cmake_flags],
        "targets": [str(t) for t in targets],
        "arch": str(arch),
        "compiler": compiler,
    }
    if helpers:
        payload["helpers"] = [[h["name"], h["sha256"]] for h in helpers]
    if patches:
        payload["patches"] = [[p["name"], p["sha256"]] for p in patches]
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def normalize_member(name):
    """An archive member name without ``./`` prefixes or trailing slashes, POSIX-normalized."""
    name = name.replace("\\", "/")
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    if not name or name == ".":
        return ""
    return posixpath.normpath(name)


def is_safe_member(name):
    """True when an archive member name stays inside the extraction directory."""
    raw = name.replace("\\", "/")
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
        return False
    norm = normalize_member(raw)
    return not (norm == ".." or norm.startswith("../"))


def normalize_subdir(subdir):
    """A user-given subdir as a clean relative POSIX path (``""`` for the archive root)."""
    text = str(subdir).strip()
    if text.startswith("/") or not is_safe_member(text):
        raise BuildError(f"subdir must be a relative path inside the archive, got {subdir!r}")
    norm = normalize_member(text)
    return "" if norm == "." else norm


def _file_set(names):
    return {n for n in (normalize_member(x) for x in names) if n}


def _has_prefix(files, prefix):
    return any(f.startswith(prefix) for f in files)


def source_dir_candidates(names):
    """Directories of an archive listing that hold a llama.cpp tree (CMakeLists.txt and ggml/)."""
    files = _file_set(names)
    found = []
    for path in files:
        if posixpath.basename(path) != "CMakeLists.txt":
            continue
        top = posixpath.dirname(path)
        ggml = posixpath.join(top, "ggml") + "/" if top else "ggml/"
        if _has_prefix(files, ggml):
            found.append(top)
    return sorted(set(found), key=lambda d: (d.count("/") + (1 if d else 0), d))


def detect_source_dir(names):
    """The shallowest llama.cpp tree in an archive listing; raise when there is none or a tie."""
    candidates = source_dir_candidates(names)
    if not candidates:
        raise BuildError(
            "no llama.cpp source tree in the archive (a directory holding CMakeLists.txt and ggml/): "
            "is this a llama.cpp or llama-cpp-python source archive? Set subdir if the tree is elsewhere"
        )

    def depth(d):
        return d.count("/") + (1 if d else 0)

    best = [d for d in candidates if depth(d) == depth(candidates[0])]
    if len(best) > 1:
        raise BuildError(f"several llama.cpp trees in the archive ({', '.join(best)}): choose one with subdir")
    return best[0]


def check_source_dir(subdir, names):
    """Validate a user-given subdir against an archive listing; return it normalized."""
    subdir = normalize_subdir(subdir)
    files = _file_set(names)
    cmakelists = posixpath.join(subdir, "CMakeLists.txt") if subdir else "CMakeLists.txt"
    if cmakelists not in files:
        hint = ", ".join(source_dir_candidates(names)[:3]) or "none found"
        raise BuildError(
            f"subdir {subdir or '.'!r} has no CMakeLists.txt in the archive (llama.cpp trees found: {hint})"
        )
    return subdir


def parse_rpc_proto_version(text):
    """``{major, minor, patch, version}`` from ggml-rpc.h, or None for trees without versioned RPC."""
    found = {m.group(1).lower(): int(m.group(2)) for m in _RPC_VERSION_RE.finditer(text or "")}
    if "major" not in found:
        return None
    major, minor, patch = found["major"], found.get("minor", 0), found.get("patch", 0)
    return {"major": major, "minor": minor, "patch": patch, "version": f"{major}.{minor}.{patch}"}


def rpc_target_from_cmake(text):
    """The executable target a CMakeLists.txt defines (``set(TARGET x)`` or ``add_executable(x ...)``)."""
    match = _SET_TARGET_RE.search(text or "")
    if match:
        return match.group(1)
    for match in _ADD_EXECUTABLE_RE.finditer(text or ""):
        if not match.group(1).startswith("$"):
            return match.group(1)
    return None


def detect_rpc_target(source_dir):
    """The RPC server's target name in an extracted llama.cpp tree, or None when the tree has none."""
    for rel in RPC_CMAKELISTS:
        path = os.path.join(source_dir, *rel.split("/"))
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                name = rpc_target_from_cmake(handle.read())
        except OSError:
            continue
        if name:
            return name
    return None


def resolve_targets(requested, rpc_target):
    """Requested targets with the RPC server's name replaced by the one this tree really has."""
    resolved = []
    for wanted in requested:
        name = wanted
        if wanted in RPC_SERVER_NAMES:
            if rpc_target is None:
                raise BuildError(
                    f"target {wanted} requested but this llama.cpp tree has no RPC server "
                    f"({' or '.join(RPC_CMAKELISTS)} not found)"
                )
            name = rpc_target
        if name not in resolved:
            resolved.append(name)
    return resolved


def rpc_server_in(targets):
    """The RPC server's name among ``targets``, or None."""
    for target in targets:
        if target in RPC_SERVER_NAMES:
            return target
    return None


def commit_from_changelog(text):
    """The llama.cpp commit a llama-cpp-python CHANGELOG names first (its vendored tree), or None."""
    match = _CHANGELOG_COMMIT_RE.search(text or "")
    return match.group(1) if match else None


def commit_from_archive_comment(comment):
    """A git commit id from an archive comment (``git archive`` stores it there), or None."""
    if isinstance(comment, bytes):
        comment = comment.decode("ascii", errors="replace")
    text = (comment or "").strip().lower()
    return text if _COMMIT_RE.match(text) and len(text) == 40 else None


def build_number_from_name(*names):
    """A llama.cpp release build number (``b1234``) found in archive or directory names, or None."""
    for name in names:
        if not name:
            continue
        base = str(name).lower()
        for suffix in (".tar.gz", ".tar.xz", ".tar.bz2", ".tgz", ".txz", ".zip", ".tar"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
                break
        match = _BUILD_NUMBER_RE.search(posixpath.basename(base.rstrip("/")))
        if match:
            return int(match.group(1))
    return None


def parse_readelf_dynamic(text):
    """``{needed: [...], runpath, rpath, soname}`` from ``readelf -d`` output."""
    info = {"needed": [], "runpath": None, "rpath": None, "soname": None}
    for line in (text or "").splitlines():
        match = _READELF_DYN_RE.search(line)
        if not match:
            continue
        tag, value = match.group(1), match.group(2)
        if tag == "NEEDED":
            info["needed"].append(value)
        else:
            info[tag.lower()] = value
    return info


def parse_ldd(text):
    """``{library: resolved path or None}`` from ``ldd`` output (None = not found)."""
    libs = {}
    for line in (text or "").splitlines():
        match = _LDD_NOT_FOUND_RE.match(line)
        if match:
            libs[match.group(1)] = None
            continue
        match = _LDD_FOUND_RE.match(line)
        if match:
            libs[match.group(1)] = match.group(2)
    return libs


def external_libraries(needed_by_file, bundled):
    """Libraries the bundle needs from the host: every NEEDED name not shipped in the bundle."""
    shipped = set(bundled)
    return sorted({lib for needed in needed_by_file.values() for lib in needed if lib not in shipped})


def is_shared_library_name(name):
    """True for ``libfoo.so`` and ``libfoo.so.1.2`` style file names."""
    return bool(re.match(r"^lib.+\.so(\.\d+)*$", name))


def is_shipped_library(name):
    """A library of the build tree that goes to the nodes (every one but UNSHIPPED_LIBRARIES)."""
    return is_shared_library_name(name) and name not in UNSHIPPED_LIBRARIES


def file_entry(root, rel):
    """Manifest entry for one file of a cache entry (symlinks recorded by their target)."""
    path = os.path.join(root, rel)
    if os.path.islink(path):
        return {"path": rel, "link": os.readlink(path)}
    stat = os.stat(path)
    return {
        "path": rel,
        "size": stat.st_size,
        "sha256": sha256_file(path),
        "mode": f"{stat.st_mode & 0o7777:04o}",
    }


def _manifest_header_problem(manifest, key):
    if not isinstance(manifest, dict):
        return "manifest is not a JSON object"
    if manifest.get("format") != CACHE_FORMAT:
        return f"manifest format {manifest.get('format')!r} is not {CACHE_FORMAT}"
    if manifest.get("key") != key:
        return "manifest key does not match the entry"
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        return "manifest lists no files"
    if not all(isinstance(item, dict) and isinstance(item.get("path"), str) for item in files):
        return "manifest has a malformed file entry"
    rpc = manifest.get("rpc_server")
    missing_rpc = rpc and not any(item["path"] == f"bin/{rpc}" for item in files)
    return f"manifest names rpc server {rpc} but does not list bin/{rpc}" if missing_rpc else ""


def _file_problem(entry_dir, item):
    rel = item["path"]
    if not is_safe_member(rel):
        return f"manifest path {rel!r} leaves the entry"
    path = os.path.join(entry_dir, rel)
    if "link" in item:
        if not os.path.islink(path) or os.readlink(path) != item["link"]:
            return f"{rel}: symlink missing or changed"
        return "" if os.path.exists(path) else f"{rel}: dangling symlink"
    try:
        size = os.stat(path).st_size
    except OSError:
        return f"{rel}: missing"
    if os.path.islink(path) or size != item.get("size"):
        return f"{rel}: size {size} differs from the recorded {item.get('size')}"
    return ""


def validate_manifest(entry_dir, manifest, key):
    """``(True, "")`` when a cache entry matches its manifest, else ``(False, reason)``.

    Cheap on purpose (existence and sizes, not hashes): it runs on every play.
    """
    problem = _manifest_header_problem(manifest, key)
    for item in [] if problem else manifest["files"]:
        problem = _file_problem(entry_dir, item)
        if problem:
            break
    return (not problem), problem


def load_manifest(entry_dir):
    """The parsed manifest of a cache entry, or None when it is missing or not JSON."""
    try:
        with open(os.path.join(entry_dir, MANIFEST), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def log_tail(text, lines=40):
    """The last ``lines`` lines of a log, for error messages."""
    return "\n".join((text or "").rstrip().splitlines()[-lines:])
