# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The built binaries of ``llama_cpp_build``: staged with the libraries they need, checked, smoke-tested.

Part of the module's mechanism (``_llama_build_run`` builds and publishes); pure parsers are in ``_llama_build``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build import (
    BuildError,
    is_shipped_library,
    log_tail,
    parse_ldd,
    parse_readelf_dynamic,
)

SMOKE_TIMEOUT = 60


class StepFailed(BuildError):
    """A build step failed; ``tail`` holds the end of its output."""

    def __init__(self, message, tail=""):
        super().__init__(message)
        self.tail = tail


def first_line(text):
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def find_target_binary(build_dir, name):
    preferred = os.path.join(build_dir, "bin", name)
    if os.path.isfile(preferred) and os.access(preferred, os.X_OK):
        return preferred
    for root, _dirs, files in os.walk(build_dir):
        if name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and os.access(path, os.X_OK) and "CMakeFiles" not in path:
                return path
    raise BuildError(f"target {name} was built but no executable {name} is in the build tree")


def is_elf(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def copy_into(src_path, dest_dir):
    """Copy a file (or a relative symlink) beside the others in ``dest_dir``."""
    name = os.path.basename(src_path)
    dest = os.path.join(dest_dir, name)
    if os.path.lexists(dest):
        return dest
    if os.path.islink(src_path) and "/" not in os.readlink(src_path):
        os.symlink(os.readlink(src_path), dest)
    else:
        shutil.copy2(src_path, dest)
    return dest


def dynamic_info(module, readelf, path):
    if not readelf:
        return {"needed": [], "runpath": None, "rpath": None, "soname": None}
    rc, out, err = module.run_command([readelf, "-d", "-W", path], environ_update={"LC_ALL": "C"})
    if rc != 0:
        raise BuildError(f"readelf -d {path} failed: {first_line(err)}")
    return parse_readelf_dynamic(out)


def stage_binaries(module, build_dir, stage_bin, targets, readelf):
    """Copy the targets and every shared library they need from the build tree into ``stage_bin``."""
    os.makedirs(stage_bin)
    for target in targets:
        copy_into(find_target_binary(build_dir, target), stage_bin)
    # llama.cpp puts its libraries (and the dlopen'ed backends) in build/bin: take them all.
    bin_src = os.path.join(build_dir, "bin")
    if os.path.isdir(bin_src):
        for name in sorted(os.listdir(bin_src)):
            if is_shipped_library(name):
                copy_into(os.path.join(bin_src, name), stage_bin)
    # Older trees leave libraries next to their sources: follow DT_NEEDED into the build tree.
    in_tree = {}
    for path in glob.glob(os.path.join(build_dir, "**", "lib*.so*"), recursive=True):
        in_tree.setdefault(os.path.basename(path), path)
    pending = True
    while pending:
        pending = False
        for name in sorted(os.listdir(stage_bin)):
            path = os.path.join(stage_bin, name)
            if os.path.islink(path) or not is_elf(path):
                continue
            for lib in dynamic_info(module, readelf, path)["needed"]:
                if lib in in_tree and not os.path.lexists(os.path.join(stage_bin, lib)):
                    copy_into(in_tree[lib], stage_bin)
                    pending = True


def stage_helpers(programs, stage_bin):
    """Copy the compiled helpers (name -> program) beside the llama.cpp binaries, executable by everyone."""
    for name, path in sorted(programs.items()):
        dest = os.path.join(stage_bin, name)
        if os.path.lexists(dest):
            raise BuildError(f"helper {name} has the name of a file of the llama.cpp build: rename its source")
        shutil.copyfile(path, dest)
        os.chmod(dest, 0o755)  # noqa: S103 - a program for every user, as the llama.cpp binaries beside it


def check_binaries(module, stage_bin, build_dir, readelf, ldd):
    """Check every ELF file resolves its libraries from the entry or the system; collect RUNPATH."""
    runpath, needed = {}, {}
    env = {"LC_ALL": "C", "LD_LIBRARY_PATH": ""}
    for name in sorted(os.listdir(stage_bin)):
        path = os.path.join(stage_bin, name)
        if os.path.islink(path) or not is_elf(path):
            continue
        info = dynamic_info(module, readelf, path)
        rel = f"bin/{name}"
        runpath[rel] = info["runpath"] or info["rpath"]
        needed[rel] = info["needed"]
        if not ldd:
            continue
        rc, out, err = module.run_command([ldd, path], environ_update=env)
        if rc != 0:
            raise BuildError(f"ldd {path} failed: {first_line(err) or first_line(out)}")
        for lib, resolved in parse_ldd(out).items():
            if resolved is None:
                raise BuildError(
                    f"{rel} needs {lib}, which is neither beside it nor on the system (RUNPATH "
                    f"{runpath[rel]!r}): build with -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH=$ORIGIN"
                )
            if os.path.realpath(resolved).startswith(os.path.realpath(build_dir) + os.sep):
                raise BuildError(
                    f"{rel} loads {lib} from the build tree ({resolved}), which is deleted after the build: "
                    "build with -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH=$ORIGIN"
                )
    return runpath, needed


def smoke_test(stage_bin, rpc_server, env):
    """Start the RPC server from the staged directory with --help: proves it loads its libraries."""
    if not rpc_server:
        return None
    argv = [os.path.join(stage_bin, rpc_server), "--help"]
    try:
        # Bounded in time (a binary that hangs at start must not hang the build); run_command has no timeout.
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=SMOKE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"the built {rpc_server} does not run: {exc}") from exc
    output = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0 or "error while loading shared libraries" in output:
        raise StepFailed(f"the built {rpc_server} does not run (rc={proc.returncode})", log_tail(output, 20))
    # Record the usage line, without the staging directory's path (the entry is renamed afterwards).
    lines = output.replace(stage_bin + os.sep, "").splitlines()
    return next((line.strip() for line in lines if "usage" in line.lower()), first_line(output))
