# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One host's part of shard placement (gguf_shard_place): fetch or repair the shards assigned to it, verify them,
drop partial downloads of shards planned elsewhere, create the coordinator's links. The transfers and the on-disk
contract are in ``_shard_fetch``; this is the order of things, check mode and the messages.

A corrupt shard is never unlinked: it is repaired in its own inode (``in_place``), or replaced by the rename of a
verified copy, so a failed fetch leaves things as they were.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _shard_metrics
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch, _shard_record
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_plan import human

OUTCOMES = ("fetched", "verified", "refetched", "repaired", "actions", "removed", "kept_foreign")


def run_module(module):
    """The module's result for ``module.params`` (see _shard_options.PLACE); fails through ``module.fail_json``."""
    model_dir = module.params["model_dir"]
    if not os.path.isabs(model_dir):
        module.fail_json(msg=f"model_dir must be an absolute path, got {model_dir!r}")
    try:
        return Placement(module).run()
    except OSError as exc:
        module.fail_json(msg=f"{model_dir}: {exc}")
    return None  # pragma: no cover - fail_json does not return


class Placement:
    """One run on one model directory: the outcome so far, the manifest, and the diff of repairs."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.model_dir = module.params["model_dir"]
        self.check = module.check_mode
        self.result = {key: [] for key in OUTCOMES}
        self.result["changed"] = False
        self.manifest_path = os.path.join(self.model_dir, _shard_fetch.MANIFEST)
        self.progress_path = os.path.join(self.model_dir, _shard_fetch.PROGRESS)
        self.manifest = {}
        self.saved = {}
        self.corrupt_found, self.repairs = {}, {}  # the diff: each corrupt shard, and what is done about it
        self.was_placed = set()  # corrupt shards the collection had placed (a repair keeps them its own)
        self.record = {"models": {}, "served": []}

    def act(self, text):
        self.result["actions"].append(text)
        self.result["changed"] = True

    def fail(self, msg):
        self.module.fail_json(msg=msg, **self.result)

    def run(self):
        if not os.path.isdir(self.model_dir) and (self.params["shards"] or self.params["links"]):
            self.act(f"create {self.model_dir}")
            if not self.check:
                _shard_fetch.make_dirs(self.model_dir)  # owned like its parent: a directory in a home is the user's
        lock = None
        if not self.check and os.path.isdir(self.model_dir):
            try:
                lock = _shard_fetch.lock_dir(self.model_dir)  # released when this process ends, whichever way
            except _shard_fetch.FetchError as exc:
                self.fail(str(exc))
        try:
            return self.run_locked()
        finally:
            if lock is not None:
                lock.close()  # also when the module fails (an in-process caller may run it again)

    def run_locked(self):
        if os.path.isdir(self.model_dir):
            self.manifest = _shard_fetch.read_json(self.manifest_path) or {}
        self.saved = dict(self.manifest)
        self.record = _shard_record.read(self.model_dir)
        if self.params["keep_models"]:
            self.prune()  # first: the room of the models not kept is what a staged model may need
        for shard in self.params["shards"]:
            corrupt = self.check_present(shard)
            if corrupt is not None:
                self.fetch(shard, corrupt)
        self.drop_partials()
        self.make_links()
        if self.params["model"]:
            self.note_model()
        if self.module._diff and self.corrupt_found:  # noqa: SLF001 - AnsibleModule's diff flag
            self.result["diff"] = {
                "before_header": f"{self.model_dir}: shards found corrupt",
                "after_header": f"{self.model_dir}: repair",
                "before": "".join(self.corrupt_found.values()),
                "after": "".join(self.repairs.values()),
            }
        if not self.check:
            self.save_manifest()
            if self.result["fetched"]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.progress_path)
            self.write_metrics()
        return self.result

    def prune(self):
        """Remove the files and links the collection placed for the models not in keep_models (_shard_record)."""
        current = [shard["name"] for shard in self.params["shards"]] + list(self.params["links"])
        record, manifest, removed, foreign, freed = _shard_record.prune(
            self.model_dir, self.record, self.manifest, self.params["keep_models"], current, check=self.check
        )
        for name in removed:
            self.act(f"remove {name} (a model not kept)")
        self.result["removed"] = removed
        self.result["kept_foreign"] = foreign
        self.result["freed"] = freed
        if not self.check and record != self.record:
            self.manifest = manifest
            self.save_manifest()  # the manifest first: a file it names is only ever one the collection placed
            _shard_record.write(self.model_dir, record)
        self.record = record

    def note_model(self):
        """This host's files and links of the model in the model record."""
        held = [
            shard["name"]
            for shard in self.params["shards"]
            if os.path.isfile(os.path.join(self.model_dir, shard["name"]))
        ]
        record = _shard_record.note_placed(
            self.record, self.params["model"], held, self.params["links"], self.model_dir
        )
        if record != self.record and not self.check and os.path.isdir(self.model_dir):
            _shard_record.write(self.model_dir, record)
        self.record = record

    def write_metrics(self):
        """Each held shard's last verification into O(metrics_file): a new download was hashed as it came in."""
        path = self.params.get("metrics_file")
        if not path:
            return
        held = [shard["name"] for shard in self.params["shards"]]
        fetched = [item["name"] for item in self.result["fetched"]]
        good = [name for name in held if name in self.result["verified"] or name in fetched]
        try:
            _shard_metrics.write(path, held, good, self.result["refetched"], time.time())
        except (OSError, ValueError) as exc:
            self.module.warn(f"shard metrics not written to {path}: {exc}")

    def save_manifest(self):
        if self.manifest != self.saved and os.path.isdir(self.model_dir):
            _shard_fetch.write_json(self.manifest_path, self.manifest)
            self.saved = dict(self.manifest)

    def check_present(self, shard):
        """None when the shard is in place and verified (its mode and owner set right), else whether the file there
        is corrupt (False: there is none)."""
        name = shard["name"]
        path = os.path.join(self.model_dir, name)
        if not os.path.isfile(path) or os.path.islink(path):
            return False
        full = self.params["verify"] == "full"
        ok, hashed, record = _shard_fetch.verify_file(self.model_dir, shard, self.manifest, full=full)
        if not ok:
            if (self.manifest.pop(name, None) or {}).get("placed"):
                self.was_placed.add(name)
            self.result["refetched"].append(name)
            found = f"sha256 {record['sha256']}" if record else f"{os.path.getsize(path)} bytes"
            self.corrupt_found[name] = (
                f"{name}: corrupt ({found}, expected {shard['size']} bytes, sha256 {shard['sha256']})\n"
            )
            return True
        self.manifest[name] = record
        if hashed:
            self.result["verified"].append(name)
        if stat.S_IMODE(os.stat(path).st_mode) != _shard_fetch.READ_ONLY:
            self.act(f"chmod 0444 {name}")
            if not self.check:
                os.chmod(path, _shard_fetch.READ_ONLY)
                self.manifest[name] = {**record, "mtime_ns": os.stat(path).st_mtime_ns}
        if _shard_fetch.give_to_directory_owner(path, check=self.check):
            self.act("chown {} {}:{}".format(name, *_shard_fetch.owner_of(self.model_dir)))
        if os.path.exists(path + _shard_fetch.REPAIR):  # a killed repair that had already mended the file
            self.act(f"remove {name}{_shard_fetch.REPAIR} (the shard verifies)")
            if not self.check:
                os.unlink(path + _shard_fetch.REPAIR)
        return None

    def fetch(self, shard, corrupt):
        """Download, copy or repair one shard (in check mode: say which)."""
        name = shard["name"]
        path = os.path.join(self.model_dir, name)
        if not shard.get("url") and not shard.get("src") and not self.check:
            self.result.setdefault("need_source", []).append(name)  # the action plugin copies it and calls again
            return
        in_place = corrupt and repair_in_place(self.module, self.model_dir, shard, path, self.result)
        partial = path + _shard_fetch.PARTIAL
        sidecar = _shard_fetch.read_json(path + _shard_fetch.SIDECAR)
        resumable = os.path.isfile(partial) and _shard_fetch.sidecar_matches(sidecar, shard) and shard.get("url")
        start = (
            _shard_fetch.repair_resume_point(path, shard) if in_place else os.path.getsize(partial) if resumable else 0
        )
        verb = f"repair {name} in place" if in_place else f"{'re' if corrupt else ''}fetch {name}"
        if corrupt:
            self.repairs[name] = (
                f"{name}: {'repaired in its own inode' if in_place else 'replaced by a verified copy'}\n"
            )
        self.act(verb + (f" (resume from {start})" if start else ""))
        if self.check:
            return
        if corrupt:
            with contextlib.suppress(OSError):  # a full disk: the repair sidecar still marks the file untrusted
                self.save_manifest()  # a killed repair must not be trusted later
        self.transfer(shard, path, in_place, corrupt, start)

    def transfer(self, shard, path, in_place, corrupt, start):
        name = shard["name"]
        started = time.monotonic()
        token = self.params.get("hf_token")
        fetch_args = {
            "headers": {"Authorization": f"Bearer {token}"} if shard.get("hub") and token else {},
            "timeout": self.params["timeout"],
            "retries": self.params["retries"],
            "progress": _shard_fetch.Progress(self.progress_path, name, int(shard["size"]), start),
            "validate_certs": self.params["validate_certs"],
        }
        partial = path + _shard_fetch.PARTIAL
        try:
            if in_place:
                resumed_from, downloaded, rewritten, self.manifest[name] = _shard_fetch.repair_in_place(
                    path, shard, **fetch_args
                )
                if name in self.was_placed:
                    self.manifest[name]["placed"] = True
                self.result["repaired"].append({"name": name, "rewritten": rewritten})
            elif shard.get("src"):
                resumed_from, downloaded = _shard_fetch.copy_local(shard["src"], partial, shard)
            else:
                resumed_from, downloaded = _shard_fetch.download(shard["url"], partial, shard, **fetch_args)
            if not in_place:
                self.manifest[name] = _shard_fetch.finish(self.model_dir, shard, partial)
        except (_shard_fetch.FetchError, OSError) as exc:
            self.save_manifest()
            self.fail(failure(exc, self.model_dir, shard, corrupt, in_place))
        self.save_manifest()
        seconds = round(time.monotonic() - started, 2)
        self.result["fetched"].append(
            {"name": name, "resumed_from": resumed_from, "downloaded": downloaded, "seconds": seconds}
        )

    def drop_partials(self):
        for name in self.params["drop"]:
            if any(
                os.path.exists(os.path.join(self.model_dir, name + suffix))
                for suffix in (_shard_fetch.PARTIAL, _shard_fetch.SIDECAR)
            ):
                self.act(f"remove {name}{_shard_fetch.PARTIAL} (planned for another host)")
                if not self.check:
                    _shard_fetch.remove_partial(self.model_dir, name)

    def make_links(self):
        for name, target in sorted(self.params["links"].items()):
            path = os.path.join(self.model_dir, name)
            if os.path.islink(path) and os.readlink(path) == target:
                continue
            if os.path.exists(path) and not os.path.islink(path):
                self.fail(f"{path} exists and is not a symlink; refusing to replace it with a link")
            self.act(f"link {name} -> {target}")
            if not self.check:
                _shard_fetch.link(self.model_dir, name, target)


def repair_in_place(module, model_dir, shard, path, result):
    """Whether the corrupt shard at ``path`` is repaired in its own inode (True) or replaced by a verified
    ``.partial`` renamed over it (False); fails, changing nothing, when neither has room.

    In place whenever its size is right: no second copy's room is needed (a worker's disk is often nearly full), a
    process holding the file open (sftp-server behind the coordinator's SSHFS mount, an mmap) reads the repaired
    bytes instead of keeping a corrupt unlinked inode and its blocks, and only differing blocks are written. A file of
    the wrong size is replaced by a verified download when there is room for it (the rename is atomic), else it is
    rewritten in place too when the disk has room for its growth.
    """
    size = int(shard["size"])
    have = os.path.getsize(path)
    free = shutil.disk_usage(model_dir).free
    if have == size or _shard_fetch.repair_resume_point(path, shard):
        return True
    partial = path + _shard_fetch.PARTIAL
    partial_bytes = os.path.getsize(partial) if os.path.isfile(partial) else 0
    if free + partial_bytes >= size:
        return False
    if free >= size - have:
        return True
    module.fail_json(
        msg=f"{shard['name']} is corrupt ({human(have)}, expected {human(size)}) and cannot be repaired: "
        f"{human(size - have - free)} more room is needed in {model_dir} ({human(free)} free). Nothing was changed. "
        + room_hint(model_dir),
        **result,
    )
    return False


def room_hint(model_dir):
    """What to do about a full disk: name the deleted files still held open there, which keep their blocks."""
    held = _shard_fetch.deleted_but_open(model_dir)
    if not held:
        return "Free some space on that filesystem, then run again."
    listed = ", ".join(
        f"{entry['path']} ({human(entry['size'])}, pid {entry['pid']} {entry['command']})" for entry in held
    )
    return (
        f"Deleted files there are still held open, and keep their blocks until closed: {listed}. Restart those "
        "processes (llama-server; sftp-server closes when the coordinator's SSHFS mount of this host is remounted), "
        "or free other space, then run again."
    )


def failure(exc, model_dir, shard, corrupt, in_place):
    """The message of a failed fetch or repair: what went wrong, what was kept, and what to do."""
    name = shard["name"]
    what = str(exc) if isinstance(exc, _shard_fetch.FetchError) else f"{name}: {exc.strerror or exc}"
    source = shard.get("url") or shard.get("src")
    if isinstance(exc, OSError) or "no space left" in what:
        free = shutil.disk_usage(model_dir).free
        what += f" ({human(free)} free in {model_dir}, the shard is {human(int(shard['size']))})"
        todo = room_hint(model_dir)
    else:
        todo = f"Make {source} reachable (or fix the source), then run again."
    if in_place:
        kept = f"The corrupt {name} was kept in place and partly repaired at most; the next run resumes the repair."
    elif corrupt:
        kept = f"The corrupt {name} was kept (it is replaced only by a verified copy)."
    else:
        kept = "The bytes received so far are kept; the next run resumes."
    return f"{what.rstrip('.')}. {kept} {todo}"
