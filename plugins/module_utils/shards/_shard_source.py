# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The shards of a model source, resolved once on the controller (gguf_shard_plan): a Hugging Face repository and
pattern, plain URLs with their sha256, or files on the controller.

Every resolver returns the shards sorted by name, each ``{"name", "size", "sha256", "etag"}`` plus ``url`` (and
``hub: True`` for the hub's, whose requests carry the token) or ``src_controller`` (a path on the controller). It
raises SourceError with a message for the user.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import urllib.parse

from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_plan as shard_plan

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class SourceError(ValueError):
    """The source cannot give a usable set of shards; the message says why."""


def hub_client():
    """huggingface_hub's pieces the controller uses, or SourceError when the package is missing."""
    try:
        import huggingface_hub  # noqa: PLC0415 - only the hub source needs it
        from huggingface_hub.errors import HfHubHTTPError  # noqa: PLC0415
        from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415
    except ImportError:
        raise SourceError(
            "hf_repo needs the huggingface_hub Python package on the controller (pip install huggingface_hub)"
        ) from None
    return huggingface_hub, HfHubHTTPError, RepoFile


def hub_token(given=None):
    """``given``, else the token huggingface_hub finds on the controller (HF_TOKEN, its token file), else None."""
    if given:
        return given
    try:
        from huggingface_hub import get_token  # noqa: PLC0415
    except ImportError:
        return None
    return get_token()


def resolve_hf(repo, pattern, revision="main", token=None, endpoint=None):
    """Shards, URLs, sizes and sha256 of the files of ``repo`` matching ``pattern``, pinned to the commit the
    revision resolves to: ``(shards, {"headers", "revision"})``."""
    hub, http_error, repo_file = hub_client()
    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None
    token = hub_token(token)
    api = hub.HfApi(endpoint=endpoint, token=token)
    try:
        entries = list(api.list_repo_tree(repo, revision=revision, recursive=True))
    except http_error as exc:
        raise SourceError(f"cannot list {repo}@{revision}: {first_line(exc)}") from None
    except OSError as exc:
        raise SourceError(f"cannot reach the hub for {repo}@{revision}: {exc}") from None
    matched = sorted(
        (
            entry
            for entry in entries
            if isinstance(entry, repo_file) and fnmatch.fnmatchcase(entry.path.lower(), pattern.lower())
        ),
        key=lambda entry: entry.path,
    )
    if not matched:
        raise SourceError(f"pattern {pattern!r} matches no file in {repo}@{revision}")
    shards, commit = [], None
    for entry in matched:
        shard, found = _hub_shard(hub, http_error, entry, repo, commit or revision, token, endpoint, commit is None)
        commit = commit or found
        shards.append(shard)
    check_names(shards)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return shards, {"headers": headers, "revision": commit or revision}


def _hub_shard(hub, http_error, entry, repo, revision, token, endpoint, pin):
    """One matched repository file as a shard, and the commit its resolve URL answered with; ``pin``: the URL is
    moved to that commit (the first file; the others are asked at the commit already)."""
    if entry.lfs is None or not getattr(entry.lfs, "sha256", None):
        raise SourceError(f"{entry.path} in {repo} has no sha256 in the hub's metadata (not an LFS file)")
    url = hub.hf_hub_url(repo, entry.path, revision=revision, endpoint=endpoint)
    try:
        meta = hub.get_hf_file_metadata(url, token=token)
    except http_error as exc:
        raise SourceError(f"cannot resolve {entry.path}: {first_line(exc)}") from None
    if pin and meta.commit_hash:
        url = hub.hf_hub_url(repo, entry.path, revision=meta.commit_hash, endpoint=endpoint)
    if meta.size is not None and int(meta.size) != int(entry.size):
        raise SourceError(f"{entry.path}: the hub reports {meta.size} and {entry.size} bytes")
    shard = {
        "name": os.path.basename(entry.path),
        "size": int(entry.size),
        "sha256": entry.lfs.sha256.lower(),
        "etag": meta.etag,
        "url": url,
        "hub": True,
    }
    return shard, meta.commit_hash


def first_line(exc):
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def resolve_urls(entries, timeout, validate_certs=True):
    """Shards of plain HTTP(S) URLs with their sha256; a size not given is asked of the server (HEAD)."""
    shards = []
    for entry in entries:
        url = entry["url"]
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in {"http", "https"}:
            raise SourceError(f"only http(s) URLs are supported, got {url!r}")
        sha = str(entry["sha256"]).lower()
        if not SHA256_RE.match(sha):
            raise SourceError(f"sha256 of {url} must be 64 hex digits, got {entry['sha256']!r}")
        name = entry.get("name") or os.path.basename(urllib.parse.unquote(parsed.path))
        size = entry.get("size")
        etag = None
        if size is None:
            try:
                with open_url(url, method="HEAD", timeout=timeout, validate_certs=validate_certs) as response:
                    size = int(response.headers["Content-Length"])
                    etag = response.headers.get("ETag")
            except (OSError, TypeError, ValueError) as exc:
                raise SourceError(f"cannot get the size of {url} (give size): {exc}") from None
        shards.append({"name": name, "size": int(size), "sha256": sha, "etag": etag, "url": url})
    check_names(shards)
    return shards


def resolve_files(paths, digest=True):
    """Controller files as shards; ``digest=False`` (a plan only) leaves their sha256 out instead of reading them."""
    shards = []
    for path in paths:
        sha256 = None
        if digest:
            hasher = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda handle=handle: handle.read(1 << 20), b""):
                    hasher.update(block)
            sha256 = hasher.hexdigest()
        shards.append(
            {
                "name": os.path.basename(path),
                "size": os.path.getsize(path),
                "sha256": sha256,
                "etag": None,
                "src_controller": path,
            }
        )
    check_names(shards)
    return shards


def resolve(args, find_file):
    """The shards of the one source ``args`` names (gguf_shard_plan's options: ``hf_repo`` with ``hf_pattern``,
    ``hf_revision``, ``hf_token``, ``hf_endpoint``; ``urls``; ``files``; and ``timeout``, ``validate_certs``,
    ``fetch``: controller files are hashed only for a fetching run) and ``{"headers", "revision"}`` (hub only).
    ``find_file`` locates a controller file as the copy module does (an action's ``_find_needle``)."""
    if args.get("hf_repo"):
        return resolve_hf(
            args["hf_repo"], args["hf_pattern"], args["hf_revision"], args.get("hf_token"), args.get("hf_endpoint")
        )
    if args.get("urls"):
        return resolve_urls(args["urls"], args["timeout"], args["validate_certs"]), {}
    files = []
    for entry in args.get("files") or ():
        try:
            files.append(find_file(entry))
        except Exception as exc:  # noqa: BLE001 - Ansible raises several kinds for a missing file
            raise SourceError(f"controller file {entry!r} not found: {exc}") from None
    return resolve_files(files, digest=args.get("fetch", True)), {}


def check_names(shards):
    """Sort ``shards`` by name in place; SourceError unless the names are one file or a complete split set."""
    for shard in shards:
        name = shard["name"]
        if not name or name.startswith(".") or "/" in name:
            raise SourceError(f"not a usable shard file name: {name!r}")
    shards.sort(key=lambda shard: shard["name"])
    try:
        shard_plan.check_split_names([shard["name"] for shard in shards])
    except shard_plan.PlanError as exc:
        raise SourceError(str(exc)) from None
