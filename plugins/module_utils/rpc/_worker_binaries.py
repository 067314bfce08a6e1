# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The RPC worker's binaries fit to run, in one module run: the RPC server knows every flag its unit passes (an
unknown flag makes it print its usage and exit, and systemd restarts it in a loop), and the tensor cache verifier's
hashing helper is installed from llama.cpp's binaries and proven to hash as llama.cpp does (FNV-1a 64).

With ``service`` it also says which RPC server the worker's service runs now (``/proc/<MainPID>/exe``): another
binary than ``server`` is a worker that switches llama.cpp in this run (or that an earlier run left waiting for the
coordinator's cutover).

A helper that fails the proof once (a host without the C++ runtime) fails it again: the proof runs on every run, not
only after a copy. In check mode the flags are checked and the helper proven when it is in place already; a copy that
would happen is reported and the helper that a real run replaces is not asked.
"""

from __future__ import annotations

import os

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic, _managed_files
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build, _llama_server_check
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd import _systemd

ARGUMENT_SPEC = {
    "server": {"type": "path", "required": True},
    "flags": {"type": "list", "elements": "str", "default": []},
    "helper": {"type": "path"},
    "helper_src": {"type": "path"},
    "service": {"type": "str"},
    "cutover": {"type": "bool", "default": False},
    "check_unit": {"type": "str"},
}
#: What the proof feeds the helper, and the FNV-1a 64 of it that llama.cpp's ``fnv_hash`` gives.
PROOF_INPUT = b"foobar"
PROOF_HASH = "85944171f73967e8"
HELPER_MODE = 0o755


def file_sha256(path):
    """The sha256 of the regular file ``path`` (llama_cpp's ``sha256_file``), or None when there is none."""
    return _llama_build.sha256_file(path) if os.path.isfile(path) else None


def proof_failure(helper, rc, out, err):
    """The message for a helper that answered ``out`` (``rc``, ``err``) to the proof; None when it hashes right."""
    if rc == 0 and out[:16] == PROOF_HASH:
        return None
    answer = (err or out).strip()[-2000:] or f"exit {rc}"
    return (
        f"{helper} does not hash as llama.cpp does: the FNV-1a 64 of 'foobar' is {PROOF_HASH}, it answered "
        f"(rc={rc}) {answer}. The tensor cache verifier would judge every cached tensor wrong; a host without the C++ "
        "runtime (libstdc++) cannot run it."
    )


def check_server(module, server):
    """``server --help`` names every flag; in check mode a server not installed yet is left for the real run."""
    if not os.path.exists(server):
        if module.check_mode:
            return False
        module.fail_json(msg=f"{server} is not there: the RPC server must be installed before the worker is configured")
    _llama_server_check.check_flags(module, server, module.params["flags"], "the RPC worker's unit")
    return True


def install_helper(module, helper, src, result):
    """``helper`` given the bytes of ``src`` (root, 0755; a missing directory made, 0755) when they differ or its mode
    does; returns whether the file
    in place now (in check mode: already) is the one a real run leaves."""
    wanted = file_sha256(src)
    if wanted is None:
        if module.check_mode:
            result["changed"] = True  # llama.cpp's binaries come with this run's install
            return False
        module.fail_json(msg=f"{src} is not there: llama.cpp's binaries do not bring the hashing helper")
    current = file_sha256(helper)
    if current == wanted:
        args = _managed_files.file_args(helper, {"owner": "root", "group": "root", "mode": f"{HELPER_MODE:04o}"})
        diff = {"before": {"path": helper}, "after": {"path": helper}}
        if module.set_fs_attributes_if_different(args, False, diff, expand=False):
            result["changed"] = True
            result["diff"].append(diff)
        return True
    result["changed"] = True
    result["diff"].append(
        {
            "before": {"path": helper, "sha256": current or "absent"},
            "after": {"path": helper, "sha256": wanted},
        }
    )
    if module.check_mode:
        return False
    with open(src, "rb") as handle:
        data = handle.read()
    try:
        os.makedirs(os.path.dirname(helper), mode=0o755, exist_ok=True)
        _atomic.write_atomic(helper, data, mode=HELPER_MODE, prepare=lambda temporary: os.chown(temporary, 0, 0))
    except OSError as error:
        module.fail_json(msg=f"cannot install {helper} from {src}: {error}")
    return True


def prove_helper(module, helper):
    """The helper hashes ``foobar`` as llama.cpp does; the module fails, saying what it answered, otherwise."""
    rc, out, err = module.run_command([helper, "/dev/stdin"], data=PROOF_INPUT, binary_data=True)
    failure = proof_failure(helper, rc, out, err)
    if failure:
        module.fail_json(msg=failure, rc=rc)


def running_binary(module, service, proc="/proc"):
    """The executable the main process of ``service`` runs now (``<proc>/<MainPID>/exe``, `` (deleted)`` dropped);
    empty when the service is not active (a worker still checking its tensor cache runs the verifier, not its RPC
    server, and serves nobody yet), has no main process, or systemd cannot be asked."""
    systemctl = _systemd.Systemctl(module)
    if not systemctl.available:
        return ""
    rc, out, _err = systemctl.run("show", "--property=ActiveState", "--property=MainPID", "--", service)
    properties = _systemd.parse_properties(out) if rc == 0 else {}
    pid = properties.get("MainPID", "0")
    if properties.get("ActiveState") != "active" or not pid.isdigit() or pid == "0":
        return ""
    try:
        return os.readlink(os.path.join(proc, pid, "exe")).removesuffix(" (deleted)")
    except OSError:
        return ""


def switches(server, running):
    """Whether a worker running ``running`` switches to ``server``: it runs, and another file than ``server`` (a
    symbolic link to the same file is the same binary)."""
    if not running:
        return False
    return os.path.realpath(running) != os.path.realpath(server)


def run_module(module):
    """The flags, then the helper (copied when ``helper_src`` is given, proven whenever ``helper`` is)."""
    params = module.params
    if params["helper_src"] and not params["helper"]:
        module.fail_json(msg="helper is required with helper_src (where the helper is installed)")
    result = {"changed": False, "checked": [], "diff": []}
    if params["service"]:
        result["service"] = params["service"]
        result["running"] = running_binary(module, params["service"])
        result["switch"] = switches(params["server"], result["running"])
        # Left running for the coordinator's cutover (which restarts exactly these), instead of restarted by its role.
        result["waits"] = result["switch"] and params["cutover"]
        if params["check_unit"]:
            result["check_unit"] = params["check_unit"]
    if check_server(module, params["server"]):
        result["checked"].append("flags")
    if params["helper"]:
        in_place = True
        if params["helper_src"]:
            in_place = install_helper(module, params["helper"], params["helper_src"], result)
        if in_place:
            prove_helper(module, params["helper"])
            result["checked"].append("helper")
    return result
