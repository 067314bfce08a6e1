# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What llama-server needs before it is (re)started, checked in one module run, changing nothing:

- its binary knows every flag its unit passes: llama-server refuses an unknown flag and exits, and systemd starts it
  again and again (a crash loop, seen only in the journal);
- its user reads every shard of the model in the unit's own view of the files (the unit's sandbox properties: a model
  directory in a user's home of mode 0700 is bound into it): a model it cannot read fails only at load time.
"""

from __future__ import annotations

import os

from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd import _systemd_run

ARGUMENT_SPEC = {
    "server": {"type": "path"},
    "flags": {"type": "list", "elements": "str", "default": []},
    "user": {"type": "str"},
    "model_files": {"type": "list", "elements": "path", "default": []},
    "sandbox": {"type": "list", "elements": "str", "default": []},
    "read_timeout": {"type": "int", "default": 120},
    "host": {"type": "str", "default": "this host"},
}
#: What the read runs on each shard: four bytes (GGUF's magic) prove the file opens and reads.
READ = ["/usr/bin/head", "--bytes=4"]


def missing_flags(help_text, flags):
    """The ``flags`` that ``--help``'s text does not name, in their order."""
    return [flag for flag in flags if flag not in help_text]


def flags_failure(server, rc, out, err, flags, unit="llama-server's unit"):
    """The message for a binary whose ``--help`` (``rc``, ``out``, ``err``) fails or lacks some of ``flags`` (which
    ``unit`` passes it); None when it knows them all."""
    if rc != 0:
        return f"{server} --help failed (rc={rc}): {(err or out).strip()[-2000:]}"
    missing = missing_flags(out + err, flags)
    if missing:
        return (
            f"{server} does not know {', '.join(missing)}, which {unit} passes: it would exit at each "
            "start, in a restart loop. Install a llama.cpp build that has them."
        )
    return None


def read_failure(user, host, model_dir, rc, err):
    """The message for a read of the model as ``user`` that ended with ``rc`` and ``err``."""
    reason = err.strip() or f"exit {rc}"
    return (
        f"{user} (llama-server) cannot read the model on {host}: {reason}. The model directory ({model_dir}) must be "
        "readable and searchable by others and its files readable by others (its owner can chmod o+rx the directory, "
        "o+r the files); outside /home each parent directory must be searchable by others too (/home is shown to "
        "llama-server with only the model directory in it). This role changes none of them."
    )


def check_flags(module, server, flags, unit="llama-server's unit"):
    """``server --help`` names every flag of ``flags`` (which ``unit`` passes); the module fails otherwise."""
    rc, out, err = module.run_command([server, "--help"], environ_update={"LC_ALL": "C"})
    failure = flags_failure(server, rc, out, err, flags, unit)
    if failure:
        module.fail_json(msg=failure, rc=rc)


def check_read(module, params):
    """``params['user']`` reads every model file in the unit's view; the module fails, saying why, otherwise."""
    files = params["model_files"]
    rc, _out, err = _systemd_run.run_as_unit(
        module, READ + files, user=params["user"], properties=params["sandbox"], timeout=params["read_timeout"]
    )
    if rc != 0:
        model_dir = os.path.dirname(files[0])
        module.fail_json(msg=read_failure(params["user"], params["host"], model_dir, rc, err), rc=rc)


def run_module(module):
    """The flags when a server is given, then the read (not in check mode, where the user may not exist yet)."""
    params = module.params
    checked = []
    if params["server"]:
        check_flags(module, params["server"], params["flags"])
        checked.append("flags")
    if params["model_files"] and not params["user"]:
        module.fail_json(msg="user is required with model_files (the account that reads them)")
    if params["model_files"] and not module.check_mode:
        check_read(module, params)
        checked.append("read")
    return {"changed": False, "checked": checked}
