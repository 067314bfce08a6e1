# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gguf_vocabulary_check's mechanism (an action on the controller): a model and its draft, each read from its source
(a Hugging Face repository, URLs or controller files: ``_shard_source``) as far as shard 1's GGUF header and no further
(``_shard_fetch.read_headers``), and their vocabularies compared (``_gguf_header.vocabulary_problem``, llama.cpp's
rule). Nothing is downloaded beyond the headers."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as shard_fetch
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_source as source
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_options import PLAN

#: A source's options, as gguf_shard_plan's.
SOURCE = {
    "type": "dict",
    "required": True,
    "options": {name: PLAN[name] for name in ("hf_repo", "hf_revision", "hf_pattern", "hf_token", "hf_endpoint")}
    | {"urls": PLAN["urls"], "files": PLAN["files"]},
}
ARGUMENT_SPEC = {
    "model": SOURCE,
    "draft": SOURCE,
    "timeout": {"type": "int", "default": 60},
    "validate_certs": {"type": "bool", "default": True},
}
#: The fingerprint's keys a result shows (the prefix digests are for the comparison only).
SHOWN = ("count", "sha256", "model", "bos", "eos", "add_bos", "add_eos")


class CheckError(Exception):
    """A source cannot be read; the message says why."""


def read_vocabulary(spec, find_file, timeout=60, validate_certs=True):
    """``(vocabulary, read)`` of the one source ``spec`` names: shard 1's header only, no hashing of controller
    files."""
    named = [name for name in ("hf_repo", "urls", "files") if spec.get(name)]
    if len(named) != 1:
        raise CheckError(f"give exactly one source of hf_repo, urls and files (got {', '.join(named) or 'none'})")
    if spec.get("hf_repo") and not spec.get("hf_pattern"):
        raise CheckError("hf_repo needs hf_pattern (the files of the repository)")
    args = {**spec, "timeout": timeout, "validate_certs": validate_certs, "fetch": False}
    try:
        shards, info = source.resolve(args, find_file)
        model, reads = shard_fetch.read_headers(
            shards[:1], headers=info.get("headers", {}), timeout=timeout, validate_certs=validate_certs
        )
    except (source.SourceError, shard_fetch.FetchError, gguf.GGUFError, OSError) as exc:
        raise CheckError(str(exc)) from None
    return gguf.vocabulary(model), reads[0]


def check(args, find_file):
    """The result: both vocabularies (``SHOWN``), how their headers were read, and ``failed`` with ``msg`` when the
    draft cannot draft for the model."""
    found, reads = {}, []
    for role in ("model", "draft"):
        try:
            vocabulary, read = read_vocabulary(args[role], find_file, args["timeout"], args["validate_certs"])
        except CheckError as exc:
            return {"failed": True, "changed": False, "msg": f"cannot read the {role}'s GGUF header: {exc}"}
        found[role] = vocabulary
        reads.append({**read, "role": role})
    problem = gguf.vocabulary_problem(found["model"], found["draft"])
    result = {
        "changed": False,
        "compatible": not problem,
        "header_reads": reads,
        **{role: {key: (value or {}).get(key) for key in SHOWN} for role, value in found.items()},
    }
    if problem:
        result.update(failed=True, msg=f"the draft model cannot draft for the model: {problem}")
    else:
        count = found["model"]["count"]
        result["msg"] = f"the draft's vocabulary is the model's ({count} tokens; llama.cpp's rule)"
    return result
