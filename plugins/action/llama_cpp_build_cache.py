# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of llama_cpp_build_cache (documented in plugins/modules/llama_cpp_build_cache.py): the
controller's cache of llama.cpp builds, read and written as the controller's own user (no connection, no become).
The key and the entry's checks are module_utils/llama_cpp/_llama_platform.py."""

from __future__ import annotations

import os
import shutil

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_platform as lp
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build import (
    BuildError,
    helper_sources,
    patch_sources,
    sha256_file,
)

ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["lookup", "store"], "default": "lookup"},
    "cache_dir": {"type": "path", "required": True},
    "checksum": {"type": "str", "required": True},
    "subdir": {"type": "str", "default": ""},
    "cmake_flags": {"type": "list", "elements": "str", "default": []},
    "cpu": {"type": "str", "choices": ["portable", "native"], "default": "portable"},
    "targets": {"type": "list", "elements": "str", "required": True},
    "helpers": {"type": "list", "elements": "path", "default": []},
    "patches": {"type": "list", "elements": "path", "default": []},
    "platform": {"type": "dict", "required": True},
    "build": {"type": "dict"},
    "build_host": {"type": "str"},
    "archive": {"type": "path"},
}


def entry_result(entry, record):
    return {
        "hit": True,
        "entry_dir": entry,
        "archive": os.path.join(entry, lp.ARCHIVE),
        "key": record["key"],
        "rpc_server": record.get("rpc_server") or "",
        "rpc_protocol": record.get("rpc_protocol"),
        "patches": record.get("patches", []),
        "record": record,
    }


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(
            argument_spec=ARGUMENT_SPEC, required_if=[("state", "store", ("build", "build_host", "archive"))]
        )
        try:
            helpers = helper_sources(args["helpers"], args["targets"])
            key = lp.controller_key(
                args["checksum"],
                subdir=args["subdir"],
                cmake_flags=args["cmake_flags"],
                cpu=args["cpu"],
                targets=args["targets"],
                platform=args["platform"],
                helpers=helpers,
                patches=patch_sources(args["patches"]),
            )
        except BuildError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        entry = os.path.join(args["cache_dir"], key)
        # The programs the helpers become (the build module's own naming): an entry of this key ships them.
        names = [helper["name"] for helper in helpers]
        result.update(changed=False, controller_key=key, entry_dir=entry, hit=False, reason="", helpers=names)
        record = lp.load_record(entry)
        problem = lp.record_problem(entry, record, key) if record is not None else "no entry"
        if args["state"] == "lookup" or self._task.check_mode:
            if problem:
                result["reason"] = problem
            else:
                result.update(entry_result(entry, record))
            return result
        result.update(self._store(args, key, entry))
        return result

    def _store(self, args, key, entry):
        """Put the archive into the entry (unless it is there already) and write build.json last."""
        os.makedirs(entry, mode=0o755, exist_ok=True)
        archive = os.path.join(entry, lp.ARCHIVE)
        source = os.path.realpath(args["archive"])
        if not os.path.isfile(source):
            raise AnsibleActionFail(f"the build's archive {args['archive']} is not on the controller")
        if source != os.path.realpath(archive):
            tmp = f"{archive}.tmp-{os.getpid()}"
            shutil.copyfile(source, tmp)
            _atomic.finalise(tmp, archive)
        build = args["build"]
        if not build.get("key"):
            raise AnsibleActionFail("build must be the result of llamarpc.cluster.llama_cpp_build (it has no key)")
        record = lp.build_record(
            key, build, sha256_file(archive), os.path.getsize(archive), args["build_host"], args["platform"]
        )
        # Said once, when the build is stored: a source a patch does not apply to is built without it.
        warnings = [
            f"llama.cpp was built without the patch {patch['name']}: it {patch['reason']}"
            for patch in record["patches"]
            if not patch.get("applied")
        ]
        if lp.load_record(entry) == record:
            return entry_result(entry, record)
        lp.write_record(entry, record)
        return {"changed": True, **entry_result(entry, record), **({"warnings": warnings} if warnings else {})}
