# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tensor hashes file that llama-server takes with ``--rpc-tensor-hashes`` (the llama_cpp role's patch
``rpc-tensor-hashes.patch``), so that a seeded load does not read the weights its workers already hold.

One line per tensor, ``HASH SIZE NAME``: the FNV-1a 64 of the tensor's bytes in 16 hex digits (the name of the
worker's cache file), its size in bytes and its GGUF name. Lines starting with ``#`` are comments to llama-server;
``# shard NAME SHA256`` lines name the shard files (and their sha256) the hashes were computed from, so that a file
made from other bytes is never passed (``stale``): llama-server trusts a hash it is given, and a worker whose cache
holds a file of that name would load those bytes.
"""

from __future__ import annotations

import re

FLAG = "--rpc-tensor-hashes"
HEADER = "# llama.cpp tensor hashes (llama-server --rpc-tensor-hashes): FNV-1a 64, size, tensor name"
_HASH = re.compile(r"^[0-9a-f]{16}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class HashesError(ValueError):
    """A tensor hashes file that does not parse, or entries that contradict each other."""


def text(tensors, shards):
    """The file's text: ``tensors`` ({name: (size, hash)}) sorted by name, after a ``# shard`` line per item of
    ``shards`` ({file name: sha256}). Raises HashesError for a malformed hash, size, name or sha256."""
    lines = [HEADER]
    for name in sorted(shards):
        if not _SHA256.match(str(shards[name])) or not name or any(c.isspace() for c in name):
            raise HashesError(f"shard {name!r}: needs a file name without spaces and a sha256 (64 hex digits)")
        lines.append(f"# shard {name} {shards[name]}")
    for name in sorted(tensors):
        size, digest = tensors[name]
        if not _HASH.match(str(digest)) or not isinstance(size, int) or size < 0:
            raise HashesError(f"tensor {name!r}: needs a size and a 16 hex digit FNV-1a, not {size!r}, {digest!r}")
        if not name or any(c.isspace() for c in name):
            raise HashesError(f"tensor name {name!r}: llama-server reads names without spaces")
        lines.append(f"{digest} {size} {name}")
    return "".join(f"{line}\n" for line in lines)


def parse(content):
    """``{"tensors": {name: (size, hash)}, "shards": {file name: sha256}}`` of a file's text, read as llama-server
    reads it (a tensor twice, or a line it would refuse, raises HashesError)."""
    tensors, shards = {}, {}
    for number, line in enumerate((content or "").splitlines(), start=1):
        fields = line.split()
        if line.startswith("#"):
            if len(fields) == 4 and fields[1] == "shard" and _SHA256.match(fields[3]):
                shards[fields[2]] = fields[3]
            continue
        if not line:
            continue
        if len(fields) != 3 or not _HASH.match(fields[0].lower()) or not fields[1].isdigit():
            raise HashesError(f"line {number}: expected HASH SIZE NAME, got {line!r}")
        if fields[2] in tensors:
            raise HashesError(f"line {number}: tensor {fields[2]} is listed twice")
        tensors[fields[2]] = (int(fields[1]), fields[0].lower())
    return {"tensors": tensors, "shards": shards}


ENV = "LLAMA_ARG_RPC_TENSOR_HASHES"  # the flag's environment variable: what the coordinator's unit sets
SEEDED_STATES = ("present", "written")


def from_seeding(rows, shards):
    """({name: (size, hash)}, {shard file name: sha256}) of the seeded ``rows`` (tensor_cache_seed's ``tensors``, of
    every worker) whose hash is of bytes of a shard in force: ``shard_sha256`` equal to ``shards``' sha256 for their
    file. A tensor two rows give different hashes is left out (its bytes are not known)."""
    tensors, used, clash = {}, {}, set()
    for row in rows:
        name = row.get("name")
        shard = str(row.get("file") or "").rsplit("/", 1)[-1]
        sha = shards.get(shard)
        if not name or row.get("state") not in SEEDED_STATES or not row.get("hash") or not sha:
            continue
        if row.get("shard_sha256") != sha:
            continue
        entry = (int(row["size"]), str(row["hash"]))
        if tensors.get(name, entry) != entry:
            clash.add(name)
        tensors[name] = entry
        used[shard] = sha
    for name in clash:
        del tensors[name]
    return tensors, used


def stale(parsed, shards):
    """Why a parsed file must not be used with the shards in force (``shards``: file name -> sha256); "" when it
    may: every shard it was made from is in force with the same sha256."""
    if not parsed["shards"]:
        return "it names no shard it was made from"
    for name, sha in sorted(parsed["shards"].items()):
        if name not in shards:
            return f"it was made from {name}, which is not a shard in force"
        if shards[name] != sha:
            return f"it was made from {name} of sha256 {sha}, the shard in force has {shards[name]}"
    return ""


def decide(shards, *, existing=None, rows=None, help_text=None):
    """What the coordinator does with the tensor hashes file: ``{"state": present|absent, "content", "use",
    "reason", "tensors", "shards"}``.

    ``rows``: this run's seeding (the file is made again from them); otherwise ``existing`` (the file's text, None
    when there is none) is kept while it matches the shards in force, and removed when it does not. ``use``: the file
    is there and llama-server's ``help_text`` names the flag (None: no llama-server to ask yet).
    """
    shards = {name: str(sha).lower() for name, sha in (shards or {}).items() if sha}
    out = {"state": "absent", "content": None, "use": False, "reason": "", "tensors": 0, "shards": []}
    if not shards:
        return {**out, "reason": "the sha256 of the shards in force is not known"}
    if rows is not None:
        tensors, used = from_seeding(rows, shards)
        if not tensors:
            return {**out, "reason": "no seeded tensor is known to be of the shards in force"}
        content = text(tensors, used)
    elif existing is None:
        return {**out, "reason": "no seeding has written tensor hashes"}
    else:
        try:
            parsed = parse(existing)
        except HashesError as exc:
            return {**out, "reason": f"the file does not parse ({exc}): removed"}
        why = stale(parsed, shards)
        if why:
            return {**out, "reason": f"stale - {why}: removed"}
        if not parsed["tensors"]:
            return {**out, "reason": "it names no tensor: removed"}
        content = existing
    parsed = parse(content)
    out.update(state="present", content=content, tensors=len(parsed["tensors"]), shards=sorted(parsed["shards"]))
    if help_text is None:
        return {**out, "reason": "llama-server is not installed yet"}
    if FLAG not in help_text:
        lacks = f"llama-server lacks {FLAG} (a build without rpc-tensor-hashes.patch): it reads every weight it sends"
        return {**out, "reason": lacks}
    return {**out, "use": True}


ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "shards": {"type": "dict", "default": {}},
    "seeded": {"type": "list", "elements": "dict"},
    "server": {"type": "path"},
}


def read_existing(path):
    """The file's text, or None when there is none (a file that is not text reads as "", which does not parse)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ""


def seeded_rows(results):
    """Every worker's seeded tensors from the seeding's results (tensor_cache_seed's, one per worker); None when no
    result has them (nothing seeded in this run: skipped, or check mode)."""
    done = [
        item["tensors"] for item in results or () if isinstance(item, dict) and isinstance(item.get("tensors"), list)
    ]
    return [row for tensors in done for row in tensors] if done else None


def run_module(module):
    """The module ``tensor_cache_hashes``: ``decide`` on what it reads (the file, llama-server's ``--help``)."""
    params = module.params
    help_text = None
    if params["server"]:
        rc, out, err = module.run_command([params["server"], "--help"], environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"{params['server']} --help failed (rc={rc}): {(err or out).strip()[-2000:]}")
        help_text = out + err
    existing = read_existing(params["path"])
    result = decide(params["shards"], existing=existing, rows=seeded_rows(params["seeded"]), help_text=help_text)
    result["environment"] = {ENV: params["path"]} if result["use"] else {}
    return {**result, "changed": False}
