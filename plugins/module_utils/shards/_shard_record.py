# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's own record of the models in a model directory, and what it may remove there.

Two files, both written only by the collection (atomically, under the directory's lock):

- the shard manifest (``_shard_fetch.MANIFEST``): per file name its size, mtime and sha256; ``placed: true`` on
  the files the collection wrote itself (a verified download or copy renamed into place). A file that was already
  there and verified (a user's copy) is recorded without it: it is used, never removed.
- the model record (``RECORD``): per model (``model_id``: the shards' names and sha256 of the whole set) the files
  and links this host holds for it, and on the coordinator the models served, newest first, each with the source
  it came from (what the rollback playbook places again).

What may go (``removable``): a file recorded under a model that is not kept, that no kept model lists, that the
manifest says the collection placed, and that is still the file it placed (same size and mtime: a file changed or
replaced since is someone else's); a link recorded under such a model that still points where the collection made
it point. Nothing else in the directory is ever removed.

Which models are kept (``keep_models``): while a new model is staged, the new one and the models served last (at
least the one serving now, which keeps serving until the switch; ``keep_previous`` of them); after the switch, the
one serving and ``keep_previous`` before it; an in-place replacement keeps only the new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch

RECORD = ".llamarpc-models.json"
REPLACE = ("staged", "in_place")


def model_id(shards):
    """A short stable id of a model: the sha256 of its shards' names, sizes and sha256 in file order (16 hex
    digits)."""
    text = "\n".join(f"{shard['name']} {shard.get('size')} {shard.get('sha256') or ''}" for shard in shards)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def read(model_dir):
    """The model record of ``model_dir``: ``{"models": {id: {"files": [names], "links": {name: target}}},
    "served": [{"model", "source"}, newest first]}`` (empty when there is none)."""
    data = _shard_fetch.read_json(os.path.join(model_dir, RECORD)) or {}
    models = data.get("models") if isinstance(data.get("models"), dict) else {}
    served = data.get("served") if isinstance(data.get("served"), list) else []
    return {"models": models, "served": [entry for entry in served if isinstance(entry, dict) and "model" in entry]}


def write(model_dir, record):
    _shard_fetch.write_json(os.path.join(model_dir, RECORD), record)


def note_placed(record, model, files, links, model_dir=None):
    """``record`` with this host's ``files`` and ``links`` of ``model`` added to what it holds for it (with
    ``model_dir``, the names recorded before that are no longer there are left out)."""
    models = dict(record["models"])
    before = models.get(model) or {}
    kept = [
        name for name in before.get("files", []) if model_dir is None or os.path.lexists(os.path.join(model_dir, name))
    ]
    models[model] = {
        "files": sorted(set(kept) | set(files)),
        "links": dict(sorted({**before.get("links", {}), **links}.items())),
    }
    return {**record, "models": models}


def note_served(record, model, source, keep_previous):
    """``record`` with ``model`` served now (first), its ``source`` kept for a rollback; at most ``keep_previous``
    models before it stay listed."""
    served = [{"model": model, "source": source}]
    served += [entry for entry in record["served"] if entry["model"] != model]
    return {**record, "served": served[: 1 + max(0, int(keep_previous))]}


def served_ids(record):
    return [entry["model"] for entry in record["served"]]


def keep_models(served, new, keep_previous, replace="staged", switched=False):
    """The models whose files stay: see the module docstring. ``served`` are the ids served, newest first."""
    if replace not in REPLACE:
        raise ValueError(f"replace is one of {', '.join(REPLACE)}, not {replace!r}")
    keep_previous = max(0, int(keep_previous))
    if switched:
        kept = [new, *[model for model in served if model != new][:keep_previous]]
    elif replace == "in_place":
        kept = [new]
    else:
        kept = [new, *[model for model in served if model != new][: max(1, keep_previous)]]
    return list(dict.fromkeys(kept))


def placed_now(model_dir, manifest, name):
    """Whether ``model_dir/name`` is the file the collection placed: a regular file, recorded ``placed`` with the
    size and mtime it has now."""
    entry = manifest.get(name)
    if not isinstance(entry, dict) or entry.get("placed") is not True:
        return False
    try:
        info = os.lstat(os.path.join(model_dir, name))
    except FileNotFoundError:
        return False
    return (
        os.path.isfile(os.path.join(model_dir, name))
        and not os.path.islink(os.path.join(model_dir, name))
        and entry.get("size") == info.st_size
        and entry.get("mtime_ns") == info.st_mtime_ns
    )


def removable(model_dir, record, manifest, keep, current=()):
    """``(files, links, kept_foreign)``: the files and links of the models not in ``keep`` that the collection may
    remove (see the module docstring), and the recorded names it leaves because they are not (or no longer) its own.
    ``current`` names files the run at hand holds for its model (never removed)."""
    protected = set(current)
    for model in keep:
        entry = record["models"].get(model) or {}
        protected.update(entry.get("files", []))
        protected.update(entry.get("links", {}))
    files, links, foreign = [], {}, []
    for model, entry in sorted(record["models"].items()):
        if model in keep:
            continue
        for name in entry.get("files", []):
            if name in protected or name in files:
                continue
            if placed_now(model_dir, manifest, name):
                files.append(name)
            elif os.path.lexists(os.path.join(model_dir, name)):
                foreign.append(name)
        for name, target in entry.get("links", {}).items():
            path = os.path.join(model_dir, name)
            if name in protected or name in links:
                continue
            if os.path.islink(path) and os.readlink(path) == target:
                links[name] = target
            elif os.path.lexists(path):
                foreign.append(name)
    return sorted(files), links, sorted(set(foreign))


def prune(model_dir, record, manifest, keep, current=(), check=False):
    """Remove what ``removable`` allows; ``(record, manifest, removed, kept_foreign, freed bytes)`` after it. The
    models not kept leave the record; their manifest entries go with their files."""
    files, links, foreign = removable(model_dir, record, manifest, keep, current)
    freed = 0
    for name in files:
        freed += int(manifest[name]["size"])
        if not check:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(model_dir, name))
    for name in links:
        if not check:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(model_dir, name))
    if (files or links) and not check:
        _atomic.fsync_dir(model_dir)
    manifest = {name: entry for name, entry in manifest.items() if name not in files}
    models = {model: entry for model, entry in record["models"].items() if model in keep}
    return {**record, "models": models}, manifest, sorted(files + list(links)), foreign, freed


def report(model_dir):
    """What gguf_shard_facts adds to its report: the record's models and served list, and per placed file its size
    (only the files the collection placed that are still as it placed them)."""
    record = read(model_dir)
    manifest = _shard_fetch.read_json(os.path.join(model_dir, _shard_fetch.MANIFEST)) or {}
    placed = {name: int(manifest[name]["size"]) for name in manifest if placed_now(model_dir, manifest, name)}
    return {"models": record["models"], "served": record["served"], "placed": placed}


def footprint(host_report, model):
    """Bytes of ``model``'s files the collection placed on a host (from its ``report``)."""
    names = ((host_report.get("models") or {}).get(model) or {}).get("files", [])
    placed = host_report.get("placed") or {}
    return sum(int(placed.get(name, 0)) for name in names)


def reclaimable(host_report, keep, new_names):
    """Bytes a host gets back when the models not in ``keep`` are pruned (files the new model does not use)."""
    protected = set(new_names)
    models = host_report.get("models") or {}
    for model in keep:
        protected.update((models.get(model) or {}).get("files", []))
    placed = host_report.get("placed") or {}
    names = {name for model, entry in models.items() if model not in keep for name in entry.get("files", [])}
    return sum(int(placed[name]) for name in names - protected if name in placed)


def run_served(module):
    """gguf_model_served: ``module.params["model"]`` recorded as the model served now, in one locked write."""
    params = module.params
    model_dir = params["model_dir"]
    # In check mode on a fresh host the placement that would create the directory created nothing: an empty record.
    if not os.path.isabs(model_dir) or not (os.path.isdir(model_dir) or module.check_mode):
        module.fail_json(msg=f"model_dir must be an existing absolute directory, got {model_dir!r}")
    lock = None if module.check_mode else _shard_fetch.lock_dir(model_dir)
    try:
        before = read(model_dir)
        after = note_served(before, params["model"], params["source"], params["keep_previous"])
        changed = after["served"] != before["served"]
        if changed and not module.check_mode:
            write(model_dir, after)
    except (OSError, _shard_fetch.FetchError) as exc:
        module.fail_json(msg=f"{model_dir}: cannot record the model served: {exc}")
    finally:
        if lock is not None:
            lock.close()
    served = served_ids(after)
    result = {
        "changed": changed,
        "served": after["served"],
        "keep": keep_models(served, params["model"], params["keep_previous"], switched=True),
        "previous": after["served"][1] if len(after["served"]) > 1 else None,
    }
    if module._diff:  # noqa: SLF001 - AnsibleModule's diff flag
        result["diff"] = {
            "before": "".join(f"{model}\n" for model in served_ids(before)),
            "after": "".join(f"{model}\n" for model in served),
            "before_header": f"{model_dir}: models served, newest first",
            "after_header": f"{model_dir}: models served, newest first",
        }
    return result
