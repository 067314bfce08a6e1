# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``llama_cpp_build``: extract, configure, build, stage, check and publish a cache entry.

The pure parts (cache key, manifest, parsers, flags) are in ``_llama_build``; this file does the I/O, through the
``AnsibleModule`` it is given for ``run_command`` and ``get_bin_path``.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from datetime import UTC, datetime

from ansible_collections.llamarpc.cluster.plugins.module_utils._cache_lock import exclusive
from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_archive import extract
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build import (
    CACHE_FORMAT,
    HELPER_CXX_FLAGS,
    MANIFEST,
    BuildError,
    archive_kind,
    build_number_from_name,
    cache_key,
    check_source_dir,
    cmake_define,
    commit_from_archive_comment,
    commit_from_changelog,
    default_cmake_flags,
    detect_rpc_target,
    detect_source_dir,
    external_libraries,
    file_entry,
    helper_sources,
    load_manifest,
    log_tail,
    normalize_member,
    normalize_sha256,
    normalize_subdir,
    parse_rpc_proto_version,
    patch_argv,
    patch_refusal,
    patch_sources,
    resolve_targets,
    rpc_server_in,
    sha256_file,
    validate_manifest,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build_stage import (
    StepFailed,
    check_binaries,
    first_line,
    smoke_test,
    stage_binaries,
    stage_helpers,
)

ARCHIVE = "bin.tar.gz"  # the binaries in one file, to ship to the nodes


COMPILERS = {"c": ("CMAKE_C_COMPILER", "CC", "cc"), "cxx": ("CMAKE_CXX_COMPILER", "CXX", "c++")}


def compiler_argv(module, flags, lang):
    """The command of the C (``c``) or C++ (``cxx``) compiler CMake will pick (flags, then CC/CXX, then cc/c++)."""
    var, env, default = COMPILERS[lang]
    spec = cmake_define(flags, var) or os.environ.get(env) or default
    argv = shlex.split(spec) or [default]
    exe = argv[0] if os.path.isabs(argv[0]) else module.get_bin_path(argv[0])
    if not exe or not os.access(exe, os.X_OK):
        raise BuildError(
            f"no {lang.upper()} compiler {spec!r} on the build host: install gcc and g++ "
            f"(Debian: build-essential) or point {env} at one"
        )
    return [exe, *argv[1:]]


def compiler_identity(module, flags):
    """Version lines of the C and C++ compilers CMake will pick (part of the cache key)."""
    found = {}
    for lang in ("c", "cxx"):
        argv = compiler_argv(module, flags, lang)
        rc, out, err = module.run_command([*argv, "--version"], environ_update={"LC_ALL": "C"})
        line = first_line(out) or first_line(err)
        if rc != 0 or not line:
            raise BuildError(f"{shlex.join(argv)} --version failed (rc={rc}): {first_line(err)}")
        found[lang] = line
    return found


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: How often an unprivileged build asks again for its autogroup's weight: the kernel allows such a change once per
#: tenth of a second machine-wide and answers EAGAIN in between (root is not limited).
AUTOGROUP_TRIES = 20


def _autogroup_nice(path="/proc/self/autogroup", tries=AUTOGROUP_TRIES, sleep=time.sleep):
    """In a build step's child, before it runs: the lowest weight for the session's autogroup (the child is the first of
    a session of its own). With autogroups (the kernel's default where systemd has not enabled the CPU controller), the
    CPU is shared between sessions first: a worker started by systemd is a session of its own, and its share does not
    depend on the classes of the processes in another session. EAGAIN (an unprivileged build, the kernel's rate limit)
    is tried again; a kernel without autogroups leaves the classes alone to count."""
    for _attempt in range(tries):
        try:
            with open(path, "w", encoding="ascii") as handle:
                handle.write("19")
            return True
        except BlockingIOError:
            sleep(0.05)
        except OSError:
            return False
    return False


def priority_argv(module, priority):
    """The prefix that runs a build step at ``priority``: ``idle`` - the CPU's idle scheduling class and the idle I/O
    class (util-linux's ``chrt --idle 0`` and ``ionice -c 3``), inherited by every compiler the step starts, so that
    a build host that also serves (an RPC worker, llama-server) gives the build only the time its services leave;
    ``normal`` - none. Raises BuildError when a tool is missing, before anything is built."""
    if priority == "normal":
        return []
    tools = {name: module.get_bin_path(name) for name in ("chrt", "ionice")}
    missing = sorted(name for name, path in tools.items() if not path)
    if missing:
        raise BuildError(
            f"priority idle needs {' and '.join(missing)} (util-linux) on the build host; "
            "install it, or build at priority normal"
        )
    return [tools["chrt"], "--idle", "0", tools["ionice"], "-c", "3"]


def priority_options(priority):
    """What ``subprocess`` needs besides ``priority_argv``: ``idle`` - a session of its own (its own autogroup), whose
    weight is the lowest (``_autogroup_nice``); ``normal`` - nothing. A step in its own session outlives a module that
    is killed (an async job past its timeout) until it ends."""
    if priority == "normal":
        return {}
    return {"start_new_session": True, "preexec_fn": _autogroup_nice}


def build_env(tmp):
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    # llama.cpp asks git for its commit: never let git find a repository above the temporary tree.
    env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(tmp)
    env.pop("LD_LIBRARY_PATH", None)
    return env


def run_step(argv, log, env, what, options=None):
    """Run one build step with its output streamed to the log (so it can be tailed while it runs); ``options`` go to
    ``subprocess`` (``priority_options``)."""
    log.write(f"\n$ {shlex.join(argv)}\n")
    log.flush()
    try:
        # Output streamed to the log file while the step runs (it can be tailed); run_command keeps it in memory.
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            check=False,
            **(options or {}),
        )
    except OSError as exc:
        raise StepFailed(f"{what} could not start: {exc}") from exc
    log.flush()
    if proc.returncode != 0:
        raise StepFailed(f"{what} failed (rc={proc.returncode}): {shlex.join(argv)}")


def read_tail(path, max_bytes=65536, lines=40):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            return log_tail(handle.read().decode("utf-8", errors="replace"), lines)
    except OSError:
        return ""


def discover_version(src, extracted, subdir, names, comment):
    """Commit and build number of the tree, from what the archive tells (None when it does not)."""
    commit, source = commit_from_archive_comment(comment), "archive comment"
    if not commit and subdir.endswith("vendor/llama.cpp"):
        parent = os.path.dirname(os.path.dirname(os.path.join(extracted, subdir)))
        try:
            with open(os.path.join(parent, "CHANGELOG.md"), encoding="utf-8", errors="replace") as handle:
                commit, source = commit_from_changelog(handle.read(20000)), "llama-cpp-python CHANGELOG.md"
        except OSError:
            commit = None
    tops = sorted({normalize_member(n).split("/", 1)[0] for n in names if normalize_member(n)})
    number = build_number_from_name(os.path.basename(src), subdir, *(tops[:1] if len(tops) == 1 else []))
    return {"commit": commit, "commit_source": source if commit else None, "build_number": number}


def replace_entry(stage, entry):
    """Move the staged entry into place (an existing one is renamed away first, then removed)."""
    if os.path.lexists(entry):
        old = f"{entry}.old-{os.getpid()}"
        os.rename(entry, old)
        os.rename(stage, entry)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(stage, entry)


def remove_leftovers(cache_dir, key):
    """Remove what an interrupted build of this key left (staging, build and replaced directories)."""
    entry = os.path.join(cache_dir, key)
    patterns = [entry + ".tmp", entry + ".old-*", os.path.join(cache_dir, f".build-{key[:16]}-*")]
    for pattern in patterns:
        for path in glob.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


def prepare_source(p, ctx, extracted, log):
    """Extract the archive and read what the tree is: its directory, RPC version, targets, commit."""
    names, comment = extract(p["src"], ctx["kind"], extracted)
    subdir = check_source_dir(p["subdir"], names) if p["subdir"] else detect_source_dir(names)
    source_dir = os.path.join(extracted, subdir) if subdir else extracted
    log.write(f"llama.cpp tree: {subdir or '.'}\n")
    try:
        header = os.path.join(source_dir, "ggml", "include", "ggml-rpc.h")
        with open(header, encoding="utf-8", errors="replace") as handle:
            rpc_protocol = parse_rpc_proto_version(handle.read())
    except OSError:
        rpc_protocol = None
    targets = resolve_targets(ctx["targets"], detect_rpc_target(source_dir))
    return {
        "subdir": subdir,
        "source_dir": source_dir,
        "rpc_protocol": rpc_protocol,
        "targets": targets,
        "rpc_server": rpc_server_in(targets),
        "version": discover_version(p["src"], extracted, subdir, names, comment),
    }


def configure_args_for(module, flags, version):
    """The configure arguments: generator (Ninja when present), the key's flags, then derived ones."""
    derived = []
    if version["commit"] and cmake_define(flags, "LLAMA_BUILD_COMMIT") is None:
        derived.append(f"-DLLAMA_BUILD_COMMIT={version['commit']}")
    if version["build_number"] is not None and cmake_define(flags, "LLAMA_BUILD_NUMBER") is None:
        derived.append(f"-DLLAMA_BUILD_NUMBER={version['build_number']}")
    generator = []
    chosen = any(f.startswith("-G") for f in flags) or os.environ.get("CMAKE_GENERATOR")
    if module.get_bin_path("ninja") and not chosen:
        generator = ["-G", "Ninja"]
    return generator + list(flags) + derived


def compile_helpers(ctx, tmp, log, env):
    """Compile each helper with the build's C++ compiler into ``<tmp>/helpers``; return {name: program}.

    Each source is compiled from a copy checked against the sha256 in the key, so that the entry holds what its key
    says even when a source changed after the key was computed.
    """
    out_dir = os.path.join(tmp, "helpers")
    os.makedirs(os.path.join(out_dir, "src"), exist_ok=True)
    programs = {}
    for helper in ctx["helpers"]:
        copy = os.path.join(out_dir, "src", os.path.basename(helper["path"]))
        shutil.copyfile(helper["path"], copy)
        if sha256_file(copy) != helper["sha256"]:
            raise BuildError(f"helper source {helper['path']} changed during the build: run the build again")
        program = os.path.join(out_dir, helper["name"])
        argv = [*ctx["priority_argv"], *ctx["cxx"], *HELPER_CXX_FLAGS, "-o", program, copy]
        run_step(argv, log, env, f"Compile of helper {helper['name']}", ctx["priority_options"])
        programs[helper["name"]] = program
    return programs


def patch_program(module):
    """GNU patch on the build host (the role installs it with the toolchain)."""
    found = module.get_bin_path("patch")
    if not found:
        raise BuildError("patches are given but the build host has no patch program: install it (Debian: patch)")
    return found


def apply_patches(ctx, tmp, source_dir, log, env):
    """Apply each patch of the key to the extracted tree, in order, when it applies; ``[{name, sha256, applied,
    reason}]``.

    Each is copied and checked against the sha256 in the key (as the helpers are), then checked with GNU patch's dry
    run (no fuzz, never reversed): a patch that applies is applied; one that does not (a source it was not written for,
    ``llama_cpp_source_url``) leaves the tree as it was, and the build goes on without it - ``reason`` says why. The
    outcome follows from the source and the patch alone, so the key that names both names it too.
    """
    out_dir = os.path.join(tmp, "patches")
    os.makedirs(out_dir, exist_ok=True)
    outcome = []
    for patch in ctx["patches"]:
        copy = os.path.join(out_dir, patch["name"])
        shutil.copyfile(patch["path"], copy)
        if sha256_file(copy) != patch["sha256"]:
            raise BuildError(f"patch {patch['path']} changed during the build: run the build again")
        log.write(f"\n$ {shlex.join(patch_argv(ctx['patch'], source_dir, copy, dry_run=True))}\n")
        log.flush()
        # The output is the reason of a refusal (which is no failure), and goes to the build's log as well.
        check = subprocess.run(  # pylint: disable=ansible-bad-function
            patch_argv(ctx["patch"], source_dir, copy, dry_run=True),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env=env,
            check=False,
        )
        log.write(check.stdout + check.stderr)
        entry = {"name": patch["name"], "sha256": patch["sha256"], "applied": False, "reason": ""}
        if check.returncode > 1:  # GNU patch: 1 - hunks that do not apply; 2 - a malformed patch, or worse
            raise StepFailed(f"patch {patch['path']} is not a patch GNU patch can read", check.stdout + check.stderr)
        if check.returncode != 0:
            entry["reason"] = f"does not apply to this source: {patch_refusal(check.stdout + check.stderr)}"
            log.write(f"{patch['name']}: {entry['reason']}; building without it\n")
        else:
            run_step(patch_argv(ctx["patch"], source_dir, copy, dry_run=False), log, env, f"Patch {patch['name']}")
            entry["applied"] = True
        outcome.append(entry)
    return outcome


def publish(module, p, ctx, tree, *, stage, build_dir, env):
    """Stage the binaries, check them, write the manifest and move the entry into place."""
    stage_bin = os.path.join(stage, "bin")
    stage_binaries(module, build_dir, stage_bin, tree["targets"], ctx["readelf"])
    stage_helpers(tree["helpers"], stage_bin)
    runpath, needed = check_binaries(module, stage_bin, build_dir, ctx["readelf"], ctx["ldd"])
    shipped = set(os.listdir(stage_bin))
    smoke = smoke_test(stage_bin, tree["rpc_server"], env)
    rc, cmake_out, _err = module.run_command([ctx["cmake"], "--version"])
    manifest = {
        "format": CACHE_FORMAT,
        "key": ctx["key"],
        "source": {
            "path": p["src"],
            "sha256": ctx["source_sha256"],
            "subdir": tree["subdir"],
            "subdir_requested": p["subdir"],
        },
        "cmake_flags": list(ctx["cmake_flags"]),
        "configure_args": tree["configure_args"],
        "targets": list(ctx["targets"]),
        "built_targets": tree["targets"],
        "helpers": [{"name": h["name"], "source": h["path"], "sha256": h["sha256"]} for h in ctx["helpers"]],
        "patches": tree["patches"],
        "arch": ctx["arch"],
        "compiler": ctx["compiler"],
        "cmake_version": first_line(cmake_out) if rc == 0 else None,
        "generator": "Ninja" if "Ninja" in tree["configure_args"][:2] else "default",
        "llama_cpp": tree["version"],
        "rpc_protocol": tree["rpc_protocol"],
        "rpc_server": tree["rpc_server"],
        "files": [file_entry(stage, f"bin/{name}") for name in sorted(shipped)],
        "runpath": runpath,
        "needed": needed,
        "external_libraries": external_libraries(needed, shipped),
        "smoke_test": smoke,
        "build_seconds": tree["build_seconds"],
        "jobs": ctx["jobs"],
        "built_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    with open(os.path.join(stage, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
        handle.write("\n")
    replace_entry(stage, ctx["entry"])
    return manifest


def build(module, p, ctx):
    """Extract, configure, build, stage, check and publish one cache entry; return its manifest."""
    tmp = tempfile.mkdtemp(prefix=f".build-{ctx['key'][:16]}-", dir=p["cache_dir"])
    stage = ctx["entry"] + ".tmp"
    log_path = p["log_file"] or os.path.join(tmp, "build.log")
    started = time.monotonic()
    try:
        if p["log_file"]:
            os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        with open(log_path, "w", encoding="utf-8") as log:
            env = build_env(tmp)
            log.write(f"llama_cpp_build: key {ctx['key']}\nsource {p['src']} sha256 {ctx['source_sha256']}\n")
            log.write(f"extracting into {tmp}/src\n")
            log.flush()
            tree = prepare_source(p, ctx, os.path.join(tmp, "src"), log)
            tree["patches"] = apply_patches(ctx, tmp, tree["source_dir"], log, env)
            tree["configure_args"] = configure_args_for(module, ctx["cmake_flags"], tree["version"])
            build_dir = os.path.join(tmp, "build")
            configure = [
                *ctx["priority_argv"],
                ctx["cmake"],
                "-S",
                tree["source_dir"],
                "-B",
                build_dir,
                *tree["configure_args"],
            ]
            run_step(configure, log, env, "CMake configure", ctx["priority_options"])
            # Before the long build: a helper that does not compile fails in seconds, not after half an hour.
            tree["helpers"] = compile_helpers(ctx, tmp, log, env)
            jobs = str(ctx["jobs"])
            run_step(
                [
                    *ctx["priority_argv"],
                    ctx["cmake"],
                    "--build",
                    build_dir,
                    "--parallel",
                    jobs,
                    "--target",
                    *tree["targets"],
                ],
                log,
                env,
                "CMake build",
                ctx["priority_options"],
            )
            tree["build_seconds"] = round(time.monotonic() - started, 1)
            log.write(f"\nstaging into {stage}\n")
            log.flush()
            manifest = publish(module, p, ctx, tree, stage=stage, build_dir=build_dir, env=env)
            log.write(f"cached in {ctx['entry']} after {tree['build_seconds']} s of build\n")
        return manifest
    except StepFailed as exc:
        exc.tail = exc.tail or read_tail(log_path)  # before the temporary log goes away
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)


def ensure_archive(entry):
    """``<entry>/bin.tar.gz``, one file to ship the binaries to every node; created once. True when created."""
    archive = os.path.join(entry, ARCHIVE)
    if os.path.isfile(archive):
        return False
    tmp = f"{archive}.tmp-{os.getpid()}"
    with tarfile.open(tmp, "w:gz") as tar:
        for name in sorted(os.listdir(os.path.join(entry, "bin"))):
            tar.add(os.path.join(entry, "bin", name), arcname=name, recursive=False)
    _atomic.finalise(tmp, archive)
    return True


def entry_result(entry, manifest):
    result = {
        "manifest": manifest,
        "rpc_protocol": manifest.get("rpc_protocol"),
        "archive": os.path.join(entry, ARCHIVE),
        "patches": manifest.get("patches", []),
    }
    if manifest.get("rpc_server"):
        result["rpc_server"] = manifest["rpc_server"]
        result["rpc_server_path"] = os.path.join(entry, "bin", manifest["rpc_server"])
    return result


def check_request(p):
    """Refuse a bad request before anything is built: (archive kind, the source's sha256, the targets, the helpers, the
    patches)."""
    src = p["src"]
    if not os.path.isfile(src):
        raise BuildError(f"source archive {src} does not exist on the build host")
    kind = archive_kind(src)
    expected = normalize_sha256(p["checksum"]) if p["checksum"] else None
    actual = sha256_file(src)
    if expected and actual != expected:
        raise BuildError(f"checksum mismatch for {src}: expected sha256 {expected}, the file has {actual}")
    if p["jobs"] is not None and p["jobs"] < 1:
        raise BuildError(f"jobs must be at least 1, got {p['jobs']}")
    targets = [t.strip() for t in p["targets"] if t and t.strip()]
    if not targets:
        raise BuildError("targets must name at least one CMake target")
    if p["subdir"] is not None:
        normalize_subdir(p["subdir"])  # reject absolute and escaping paths before anything else
    return kind, actual, targets, helper_sources(p["helpers"], targets), patch_sources(p["patches"])


def cache_state(entry, key):
    """(state, reason, manifest) of the cache entry: ``hit``, ``missing`` or ``invalid``."""
    manifest = load_manifest(entry)
    if manifest is None:
        reason = "manifest.json unreadable" if os.path.lexists(entry) else ""
        return ("invalid" if reason else "missing"), reason, None
    ok, reason = validate_manifest(entry, manifest, key)
    if not ok:
        return "invalid", reason, None
    return "hit", "", manifest


def build_locked(module, p, ctx, result):
    """Build the entry under its lock, unless another run built it while this one waited; return ``result``."""
    with exclusive(p["cache_dir"], f".{ctx['key']}.lock"):
        state_now, _reason, manifest = cache_state(ctx["entry"], ctx["key"])
        if state_now == "hit" and not p["force"]:
            result.update(changed=ensure_archive(ctx["entry"]), cache_state="hit", cache_reason="")
            result.update(entry_result(ctx["entry"], manifest))
            return result
        remove_leftovers(p["cache_dir"], ctx["key"])
        manifest = build(module, p, ctx)
    result["build_seconds"] = manifest["build_seconds"]
    result["priority"] = p["priority"]
    ensure_archive(ctx["entry"])
    result.update(entry_result(ctx["entry"], manifest))
    return result


def run_module(module):
    """The module's result: a cache hit, or (not in check mode) a build; raises BuildError on failure."""
    p = module.params
    kind, actual, targets, helpers, patches = check_request(p)
    arch = platform.machine()
    flags = list(p["cmake_flags"]) if p["cmake_flags"] is not None else default_cmake_flags(arch, p["cpu"])
    compiler = compiler_identity(module, flags)
    key = cache_key(
        actual,
        subdir=p["subdir"],
        cmake_flags=flags,
        targets=targets,
        arch=arch,
        compiler=compiler,
        helpers=helpers,
        patches=patches,
    )
    entry = os.path.join(p["cache_dir"], key)
    result = {
        "changed": False,
        "key": key,
        "entry_dir": entry,
        "bin_dir": os.path.join(entry, "bin"),
        "source_sha256": actual,
        "cmake_flags": flags,
        "build_seconds": 0.0,
        "cache_reason": "",
    }
    if p["log_file"]:
        result["log_file"] = p["log_file"]
    state, reason, manifest = cache_state(entry, key)
    if p["force"] and state == "hit":
        state, manifest = "forced", None
    result.update(cache_state=state, cache_reason=reason)
    if state == "hit":
        if not module.check_mode:
            result["changed"] = ensure_archive(entry)
        result.update(entry_result(entry, manifest))
        return result
    result["changed"] = True
    if module.check_mode:
        return result
    ctx = {
        "key": key,
        "entry": entry,
        "kind": kind,
        "source_sha256": actual,
        "cmake_flags": flags,
        "targets": targets,
        "arch": arch,
        "compiler": compiler,
        "helpers": helpers,
        "patches": patches,
        "patch": patch_program(module) if patches else None,
        "cxx": compiler_argv(module, flags, "cxx"),
        "jobs": p["jobs"] or cpu_count(),
        "priority_argv": priority_argv(module, p["priority"]),
        "priority_options": priority_options(p["priority"]),
        "cmake": module.get_bin_path("cmake", required=True),
        "readelf": module.get_bin_path("readelf"),
        "ldd": module.get_bin_path("ldd"),
    }
    result = build_locked(module, p, ctx, result)
    for patch in result.get("patches", []):
        if not patch["applied"]:  # said once: when the build is made (a cache hit is the same build)
            module.warn(f"llama.cpp was built without the patch {patch['name']}: it {patch['reason']}")
    return result
