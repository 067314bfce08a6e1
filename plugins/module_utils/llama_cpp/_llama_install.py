# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mechanism of ``llama_cpp_install``: one build's binaries on a node, read and (when needed) put in place.

A build lives in ``<install_dir>/<key>/bin``; ``<install_dir>/<key>/complete`` (the key and a newline), written last,
says the unpack finished. So the state a rerun needs is one ``lstat`` (the marker), one ``dpkg-query`` (the runtime
packages) and, for an archive that does not name its RPC server, a look into ``bin`` (``ggml-rpc-server`` in current
trees, ``rpc-server`` in older ones).

An unpack goes into a staging directory beside ``bin``, every file and directory fsynced, renamed to ``bin`` (a ``bin``
left by an unpack cut short is renamed away first and removed), the key's directory fsynced, then the marker written
atomically and durably (``files/_atomic``): after a power loss a node has the build whole, or no marker and the next
run unpacks again. Once the build is on the node it is recorded as the current one in ``<install_dir>/builds.json``
and the builds beyond ``keep_previous`` that are the collection's own are removed (``_llama_builds``: the record and
what may go); ``state=previous`` makes the recorded build before the current one current again. Standard library
only (with the shared packages code): shipped to the node with the module.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_archive, _llama_builds
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build import (
    RPC_SERVER_NAMES,
    BuildError,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.packages import _apt

MARKER = _llama_builds.MARKER
BIN = _llama_builds.BIN
STAGING = _llama_builds.STAGING  # prefix of the staging directories (and of a replaced bin) beside bin
STATES = ("present", "previous")

ARGUMENT_SPEC = {
    "install_dir": {"type": "path", "required": True},
    "state": {"type": "str", "default": "present", "choices": list(STATES)},
    "key": {"type": "str", "default": "", "no_log": False},  # the build's key, a hash: no secret
    "archive": {"type": "path"},
    "src": {"type": "path"},
    "rpc_server": {"type": "str", "default": ""},
    "rpc_protocol": {"type": "str", "default": ""},
    "helpers": {"type": "list", "elements": "str", "default": []},
    "packages": {"type": "list", "elements": "str", "default": []},
    "source": {"type": "dict", "default": {}},
    "keep_previous": {"type": "int", "default": 1},
    **_apt.OPTIONS,
}

# State of the marker, the install's one fact on the node.
INSTALLED = "installed"
ABSENT = "absent"
NOT_REGULAR = "not a regular file"


class InstallError(Exception):
    """A failure the module reports with fail_json (message meant for the user)."""


def paths(install_dir, key):
    """(the key's directory, its bin directory, its marker)."""
    key_dir = os.path.join(install_dir, key)
    return key_dir, os.path.join(key_dir, BIN), os.path.join(key_dir, MARKER)


def marker_state(marker):
    """INSTALLED for a regular file (a symlink is not one), ABSENT when nothing is there, NOT_REGULAR otherwise."""
    try:
        mode = os.lstat(marker).st_mode
    except FileNotFoundError:
        return ABSENT
    except NotADirectoryError:  # the key's "directory" is a file: nothing of this build is there
        return ABSENT
    return INSTALLED if stat.S_ISREG(mode) else NOT_REGULAR


def rpc_server_name(bin_dir, given=""):
    """The RPC server's file name: the build's own (``given``), else the first of the current and the older name found
    in ``bin_dir``, else the current one (nothing unpacked yet: the name a real run finds in a current build)."""
    if given:
        return given
    for name in RPC_SERVER_NAMES:
        if os.path.lexists(os.path.join(bin_dir, name)):
            return name
    return RPC_SERVER_NAMES[0]


def facts(install_dir, key, rpc_server, rpc_protocol, helpers, installed):
    """What the role publishes (each name prefixed with ``llama_cpp_`` there)."""
    _key_dir, bin_dir, _marker = paths(install_dir, key)
    return {
        "bin_dir": bin_dir,
        "rpc_server_bin": os.path.join(bin_dir, rpc_server),
        "server_bin": os.path.join(bin_dir, "llama-server"),
        "rpc_protocol": rpc_protocol,
        "build_key": key,
        "helper_names": list(helpers),
        "installed": installed,
    }


def _fsync_tree(top):
    """fsync every regular file and directory under ``top`` (deepest first, ``top`` last); links have no data."""
    for root, dirs, files in os.walk(top, topdown=False):
        for name in files:
            path = os.path.join(root, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                _atomic.fsync_file(path)
        del dirs
        _atomic.fsync_dir(root)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def remove_leftovers(key_dir):
    """Remove what an unpack cut short left beside bin (staging directories, a bin renamed away)."""
    for name in os.listdir(key_dir):
        if name.startswith(STAGING):
            shutil.rmtree(os.path.join(key_dir, name), ignore_errors=True)


def unpack(src, install_dir, key):
    """Put the binaries of archive ``src`` in ``<install_dir>/<key>/bin``, then write the marker (last)."""
    key_dir, bin_dir, marker = paths(install_dir, key)
    try:
        os.makedirs(key_dir, mode=0o755, exist_ok=True)
        if marker_state(marker) == NOT_REGULAR:
            _remove(marker)  # not ours to keep: the marker is written below
        remove_leftovers(key_dir)
        staging = tempfile.mkdtemp(prefix=STAGING, dir=key_dir)
    except OSError as exc:
        raise InstallError(f"cannot prepare {key_dir}: {exc}") from exc
    try:
        staged = os.path.join(staging, BIN)
        _llama_archive.extract(src, _llama_archive.kind_of(src), staged, modes=True)
        os.chmod(staged, 0o755)  # noqa: S103 - the binaries' directory, as the install always made it
        _fsync_tree(staged)
        if os.path.lexists(bin_dir):  # an unpack cut short (no marker): its files give way, whole
            os.rename(bin_dir, os.path.join(tempfile.mkdtemp(prefix=STAGING, dir=key_dir), BIN))
        os.rename(staged, bin_dir)
        _atomic.fsync_dir(key_dir)
    except BuildError as exc:
        raise InstallError(str(exc)) from exc
    except OSError as exc:
        raise InstallError(f"cannot unpack {src} into {bin_dir}: {exc}") from exc
    finally:
        remove_leftovers(key_dir)
    try:
        _atomic.write_atomic(marker, f"{key}\n", mode=0o644)
    except OSError as exc:
        raise InstallError(f"cannot write {marker}: {exc}") from exc


def _diff(marker, key, state, packages=None):
    diff = [{"before_header": marker, "after_header": marker}]
    diff[0]["before"] = f"{key}\n" if state == INSTALLED else ""
    diff[0]["after"] = f"{key}\n"
    if packages:
        diff.append({"prepared": packages + "\n"})
    return diff


def _record_diff(install_dir, before, after, removed):
    """The record's keys before and after (current first), and the build directories removed."""
    header = f"{os.path.join(install_dir, _llama_builds.RECORD)}: builds, current first"
    lines = ["".join(f"{key}\n" for key in keys) for keys in (before, after)]
    diff = [{"before_header": header, "after_header": header, "before": lines[0], "after": lines[1]}]
    for key in removed:
        path = os.path.join(install_dir, key)
        diff.append({"before_header": path, "after_header": path, "before": f"{key}\n", "after": ""})
    return diff


def make_current(install_dir, new, keep_previous, check=False):
    """Record the build ``new`` (an ``_llama_builds.entry``) as the current one and remove the builds beyond it and
    ``keep_previous`` before it that are the collection's own (``_llama_builds.prune``); in check mode only say so.
    Nothing is written when the record already says it and nothing is to go."""
    try:
        before = _llama_builds.read(install_dir)
        after, removed, kept = _llama_builds.prune(
            install_dir, _llama_builds.made_current(before, new), keep_previous, check
        )
        changed = after != before
        if changed and not check:
            _llama_builds.write(install_dir, after)
    except (OSError, _llama_builds.RecordError) as exc:
        raise InstallError(f"{install_dir}: cannot record the build {new['key']}: {exc}") from exc
    return {
        "changed": changed,
        "before": _llama_builds.keys(before),
        "builds": _llama_builds.keys(after),
        "removed": removed,
        "kept": kept,
    }


def roll_back(install_dir, check=False):
    """Make the build before the current one current again (``_llama_builds.rollback_target``: an InstallError when
    there is none); returns its record entry and the record's keys before and after. Nothing is removed."""
    try:
        before = _llama_builds.read(install_dir)
        target = _llama_builds.rollback_target(install_dir, before)
        after = _llama_builds.rolled_back(before)
        if not check:
            _llama_builds.write(install_dir, after)
    except (OSError, _llama_builds.RecordError) as exc:
        raise InstallError(str(exc)) from exc
    return target, _llama_builds.keys(before), _llama_builds.keys(after)


def _packages(module, result, notes):
    """The runtime packages: which are missing (``packages_missing``), and in check mode what apt would install.
    Returns apt's message in check mode (for the diff), else None."""
    p = module.params
    missing = _apt.absent(module, p["packages"])
    result["packages_missing"] = missing
    if not (module.check_mode and missing):
        return None
    packages = _apt.check(module, p["packages"], p["install_recommends"], missing)
    if not packages:
        return None
    result["would_install"] = packages["would_install"]
    notes.append(packages["msg"])
    return packages["msg"]


def _record(module, result, notes, new):
    """Make ``new`` current in the record and prune, into ``result`` (``removed``, ``kept``, ``builds``)."""
    p = module.params
    try:
        step = make_current(p["install_dir"], new, p["keep_previous"], module.check_mode)
    except InstallError as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(removed=step["removed"], kept=step["kept"], builds=step["builds"])
    if step["changed"]:
        result["changed"] = True
        verb = "would " if module.check_mode else ""
        if step["builds"][:1] != step["before"][:1]:
            notes.append(f"{verb}record {new['key']} as the current build")
        if step["removed"]:
            notes.append(f"{verb}remove the builds {', '.join(step['removed'])} from {p['install_dir']}")
        if module._diff:  # noqa: SLF001 - AnsibleModule's diff flag
            result.setdefault("diff", []).extend(
                _record_diff(p["install_dir"], step["before"], step["builds"], step["removed"])
            )


def run_previous(module):
    """state=previous: the build before the current one made current again, from the record alone (no archive, no
    build); fails, saying why, when the record has none or its directory is no longer whole."""
    p = module.params
    result = {
        "changed": False,
        "need_archive": False,
        "unpacked": False,
        "removed": [],
        "kept": [],
        "rollback_to": None,
    }
    notes = []
    packages = _packages(module, result, notes)
    try:
        target, before, after = roll_back(p["install_dir"], module.check_mode)
    except InstallError as exc:
        module.fail_json(msg=str(exc), **result)
    key = target["key"]
    _key_dir, bin_dir, marker = paths(p["install_dir"], key)
    result.update(changed=True, marker=marker, marker_state=INSTALLED, rollback_to=key, builds=after)
    notes.append(
        f"{'would make' if module.check_mode else 'made'} the previous build {key} current again (from {before[0]})"
    )
    if module._diff:  # noqa: SLF001 - AnsibleModule's diff flag
        result["diff"] = _record_diff(p["install_dir"], before, after, [])
        if packages:
            result["diff"].append({"prepared": packages + "\n"})
    name = rpc_server_name(bin_dir, target["rpc_server"])
    result.update(facts(p["install_dir"], key, name, target["rpc_protocol"], target["helpers"], True))
    result["source"] = target["source"]
    result["msg"] = "; ".join(notes)
    module.exit_json(**result)


def run(module):
    """The module: read the node, and in check mode say what a real run would do; in a real run the action plugin
    installs the missing packages (ansible.builtin.apt), then gives ``src`` (the archive, copied to the node) when the
    first run reported ``need_archive``. Once the build is on the node it is recorded as the current one and the
    builds beyond ``keep_previous`` are removed (``make_current``); ``state=previous`` rolls back (``run_previous``)."""
    p = module.params
    if p["keep_previous"] < 0:
        module.fail_json(msg=f"keep_previous must be 0 or more, got {p['keep_previous']}")
    if p["state"] == "previous":
        run_previous(module)
        return
    if not _llama_builds.valid_key(p["key"]):
        module.fail_json(msg=f"key must be a directory name, got {p['key']!r}")
    _key_dir, bin_dir, marker = paths(p["install_dir"], p["key"])
    state = marker_state(marker)
    result = {"changed": False, "marker": marker, "marker_state": state, "removed": [], "kept": []}
    notes = []
    if module.check_mode:
        packages = _packages(module, result, notes)
        if state != INSTALLED:
            notes.append(f"would unpack {p['archive'] or 'the new build'} into {bin_dir}")
        installed = state == INSTALLED  # false before the first install: nothing there can be run yet
        if notes and module._diff:  # noqa: SLF001 - AnsibleModule's diff flag
            result["diff"] = _diff(marker, p["key"], state, packages)
        result["changed"] = bool(notes)
        recorded = True
    else:
        _packages(module, result, notes)
        result["need_archive"] = state != INSTALLED and not p["src"]
        result["unpacked"] = state != INSTALLED and bool(p["src"])
        if result["unpacked"]:
            try:
                unpack(p["src"], p["install_dir"], p["key"])
            except InstallError as exc:
                module.fail_json(msg=str(exc), **result)
            result["changed"] = True
            notes.append(f"unpacked {p['archive'] or p['src']} into {bin_dir}")
            if module._diff:  # noqa: SLF001 - AnsibleModule's diff flag
                result["diff"] = _diff(marker, p["key"], state)
        installed = True
        recorded = not result["need_archive"]  # the run with the archive records it
    name = rpc_server_name(bin_dir, p["rpc_server"])
    if recorded:
        new = _llama_builds.entry(p["key"], name, p["rpc_protocol"], p["helpers"], p["source"])
        _record(module, result, notes, new)
    result.update(facts(p["install_dir"], p["key"], name, p["rpc_protocol"], p["helpers"], installed))
    result["msg"] = "; ".join(notes) or f"llama.cpp {p['key']} is installed in {bin_dir}"
    module.exit_json(**result)
