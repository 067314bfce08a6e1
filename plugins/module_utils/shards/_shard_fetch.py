# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Host side of shard placement (gguf_shard_facts, gguf_shard_place): inspect a model directory, fetch shards
resumably, verify, link.

Standard library only (managed hosts run Debian's python3 without huggingface_hub).

On-disk contract in a model directory:

- ``NAME``: a complete, verified shard, mode 0444 (or on the coordinator a symlink to another host's copy
  through a mount).
- ``NAME.partial``: the bytes received so far, always a prefix of the file; ``NAME.partial.json`` (the
  sidecar) records what they are a prefix of: ``{"size", "sha256", "etag"}``. A download resumes from the
  partial's length with ``Range: bytes=N-`` only when the sidecar matches the expected file.
- ``.llamarpc-shards.json`` (the manifest): ``{NAME: {"size", "mtime_ns", "sha256"}}`` for every shard this
  code verified; a shard whose size and mtime still match is not hashed again (unless asked).
- ``.llamarpc-progress.json``: progress of the running download, rewritten about once a second.

Ownership: everything written here (run as root) gets the owner and group of the directory it is written in, and a
directory created here those of its nearest existing parent. A model directory in a user's home (the seed kept its
shards in ``/home/pool/work/models``) then holds the user's files, not root's: the user can delete or replace
anything in their own directory anyway, so root-owned shards would protect nothing and only leave files in a home
that its user cannot chmod; the sha256 check of every run is what guards the shards.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
import urllib.error
import urllib.parse

from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf_header

MANIFEST = ".llamarpc-shards.json"
LOCK = ".llamarpc-shards.lock"
PROGRESS = ".llamarpc-progress.json"
PARTIAL = ".partial"
SIDECAR = ".partial.json"
REPAIR = ".repair.json"
CHUNK = 1 << 20
PROGRESS_EVERY = 1.0
READ_ONLY = 0o444


class FetchError(Exception):
    """A shard could not be fetched or verified; the message is meant for the user."""


# -- ownership --------------------------------------------------------------------------------------------


def owner_of(path):
    """``(uid, gid)`` of ``path`` (not following a final symlink)."""
    info = os.lstat(path)
    return info.st_uid, info.st_gid


def give_to_directory_owner(path, check=False):
    """Make ``path`` (a file or symlink, not followed) belong to the owner and group of its directory; True if it
    changed (with ``check``: would change, and nothing is changed). Only root can give files away: for anyone else
    this does nothing (their files are theirs already)."""
    if os.geteuid() != 0:
        return False
    want = owner_of(os.path.dirname(os.path.abspath(path)))
    if owner_of(path) == want:
        return False
    if not check:
        os.lchown(path, *want)
    return True


def make_dirs(path):
    """Create ``path`` and its missing parents (mode 0755 less the umask), each owned like the nearest parent that
    existed: a model directory made inside a user's home belongs to that user, never to root behind their back.
    Returns the directories created."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        current = os.path.dirname(current)
    created = []
    for directory in reversed(missing):
        os.mkdir(directory, 0o755)
        give_to_directory_owner(directory)
        created.append(directory)
    return created


# -- inspection -------------------------------------------------------------------------------------------


def existing_ancestor(path):
    """``path`` or its nearest existing parent (free space of a directory still to be created)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path):
    """Bytes an unprivileged writer may still use on the filesystem holding ``path`` (statvfs f_bavail)."""
    stats = os.statvfs(existing_ancestor(path))
    return stats.f_bavail * stats.f_frsize


def same_filesystem(path, other):
    """True when ``path`` and ``other`` are on one filesystem (same ``st_dev``).

    A path that does not exist yet (a tensor cache or model directory still to be created) counts as being
    where its nearest existing parent is: that is where it will be created unless a mount appears there first.
    """
    return os.stat(existing_ancestor(path)).st_dev == os.stat(existing_ancestor(other)).st_dev


def cached_bytes(directory):
    """Bytes held in ``directory`` as the RPC worker's cache pruner counts them (0 when it does not exist).

    The sum of ``st_size`` of the regular files directly in it, like ``llamarpc_cache_prune.py`` of the
    llama_rpc_worker role, whose cap this is measured against. One directory listing: cheap.
    """
    total = 0
    try:
        scan = os.scandir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    with scan:
        for entry in scan:
            with contextlib.suppress(FileNotFoundError):  # the pruner may remove a file while we list
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def inspect_tensor_cache(model_dir, cache_dir):
    """Where an RPC worker's tensor cache (``LLAMA_CACHE``; tensors in its ``rpc`` directory) is, seen from the
    model directory: ``{"path", "same_filesystem", "cached"}``; ``cached`` is measured only when the cache
    shares the model's filesystem (else it is 0: it takes no room from the shards)."""
    same = same_filesystem(model_dir, cache_dir)
    return {
        "path": cache_dir,
        "same_filesystem": same,
        "cached": cached_bytes(os.path.join(cache_dir, "rpc")) if same else 0,
    }


def held_names(model_dir):
    """The names of the files and links in ``model_dir`` and of the partial downloads there (``NAME`` for
    ``NAME.partial``); dot files and sidecars left out; none when it is not a directory."""
    names = set()
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.listdir(model_dir):
            if entry.startswith(".") or entry.endswith((SIDECAR, REPAIR)):
                continue
            names.add(entry[: -len(PARTIAL)] if entry.endswith(PARTIAL) else entry)
    return sorted(names)


def inspect(model_dir, names, tensor_cache=None):
    """What the model directory holds for ``names`` (None: everything it holds, ``held_names``): free bytes,
    partial bytes, complete files, per-name state; with ``tensor_cache`` (the worker's cache directory) also
    ``inspect_tensor_cache`` of it."""
    if names is None:
        names = held_names(model_dir)
    files = {}
    partial_bytes = 0
    complete = {}
    for name in names:
        path = os.path.join(model_dir, name)
        entry = {"state": "absent"}
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(path)
            if os.path.islink(path):
                entry = {"state": "link", "target": os.readlink(path)}
            elif os.path.isfile(path):
                entry = {"state": "file", "size": info.st_size}
                complete[name] = info.st_size
            else:
                entry = {"state": "other"}
        with contextlib.suppress(FileNotFoundError):
            partial = os.stat(path + PARTIAL).st_size
            entry["partial"] = partial
            partial_bytes += partial
        files[name] = entry
    report = {
        "free": free_bytes(model_dir),
        "partial_bytes": partial_bytes,
        "complete": complete,
        "files": files,
        "exists": os.path.isdir(model_dir),
    }
    if tensor_cache:
        report["tensor_cache"] = inspect_tensor_cache(model_dir, tensor_cache)
    return report


def lock_dir(model_dir, wait=10.0):
    """Hold an exclusive lock on the model directory (one writer at a time); returns the open lock file.

    A download left running by a killed play (an orphaned module process) keeps its lock: this run then
    fails with a clear message instead of racing it for the same partial file.
    """
    handle = open(os.path.join(model_dir, LOCK), "a+", encoding="utf-8")  # noqa: SIM115 - held by the caller
    give_to_directory_owner(handle.name)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                handle.close()
                raise FetchError(
                    f"another gguf_shard_place run (pid {holder}) is still working in {model_dir}; "
                    "wait for it to finish or stop it, then run again"
                ) from None
            time.sleep(0.2)
            continue
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        return handle


# -- manifest ----------------------------------------------------------------------------------------------


def read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path, data):
    """Write JSON atomically and durably (``_atomic.write_atomic``: a temporary beside it, fsync, mode 0644, owned like
    its directory, rename, fsync of the directory; no temporary left on failure)."""
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    _atomic.write_atomic(path, text, mode=0o644, prepare=give_to_directory_owner, prefix=".tmp-")


def sha256_file(path, progress=None):
    digest = hashlib.sha256()
    done = 0
    with open(path, "rb") as handle:
        while True:
            block = handle.read(CHUNK)
            if not block:
                break
            digest.update(block)
            done += len(block)
            if progress:
                progress(done)
    return digest.hexdigest()


def verify_file(model_dir, shard, manifest, full=False):
    """Check ``model_dir/NAME`` against the expected size and sha256.

    Returns ``(ok, hashed, record)``: ``hashed`` says whether the file was read (the manifest said nothing
    usable, size/mtime changed, or ``full``); ``record`` is the manifest entry that describes the file now.
    """
    path = os.path.join(model_dir, shard["name"])
    info = os.stat(path)
    if info.st_size != int(shard["size"]):
        return False, False, None
    known = manifest.get(shard["name"])
    if (
        not full
        and not os.path.exists(path + REPAIR)  # an in-place repair was interrupted: the file is a mix
        and isinstance(known, dict)
        and known.get("size") == info.st_size
        and known.get("mtime_ns") == info.st_mtime_ns
        and known.get("sha256") == shard["sha256"]
    ):
        return True, False, known
    digest = sha256_file(path)
    record = {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": digest}
    if isinstance(known, dict) and known.get("placed") and known.get("sha256") == digest:
        record["placed"] = True  # the file the collection placed, touched since (its bytes are still the same)
    return digest == shard["sha256"], True, record


# -- fetching ----------------------------------------------------------------------------------------------


class Progress:
    """Rewrites the progress file about once a second while bytes arrive."""

    def __init__(self, path, name, total, start):
        self.path = path
        self.name = name
        self.total = total
        self.start_bytes = start
        self.started = time.monotonic()
        self.last = 0.0

    def update(self, done, force=False):
        now = time.monotonic()
        if not self.path or (not force and now - self.last < PROGRESS_EVERY):
            return
        self.last = now
        elapsed = max(now - self.started, 1e-6)
        rate = (done - self.start_bytes) / elapsed
        remaining = (self.total - done) / rate if rate > 0 else None
        with contextlib.suppress(OSError):
            write_json(
                self.path,
                {
                    "file": self.name,
                    "done": done,
                    "total": self.total,
                    "percent": round(100.0 * done / self.total, 1) if self.total else 100.0,
                    "resumed_from": self.start_bytes,
                    "bytes_per_second": int(rate),
                    "eta_seconds": int(remaining) if remaining is not None else None,
                    "pid": os.getpid(),
                    "updated": int(time.time()),
                },
            )


def sidecar_matches(sidecar, shard):
    return (
        isinstance(sidecar, dict)
        and sidecar.get("size") == int(shard["size"])
        and sidecar.get("sha256") == shard["sha256"]
        and sidecar.get("etag") == shard.get("etag")
    )


def _prepare_partial(partial, sidecar_path, shard):
    """Bytes of a usable partial file (0 after starting afresh); writes the sidecar."""
    sidecar = read_json(sidecar_path)
    have = 0
    if os.path.isfile(partial) and sidecar_matches(sidecar, shard):
        have = os.path.getsize(partial)
        if have > int(shard["size"]):
            have = 0
    if have == 0:
        with open(partial, "wb"):
            pass
        write_json(sidecar_path, {"size": int(shard["size"]), "sha256": shard["sha256"], "etag": shard.get("etag")})
    return have


def open_range(url, headers, start, timeout, validate_certs, end=None):
    """GET ``url`` from byte ``start`` (to byte ``end`` included, when given); redirects are followed here so the
    token never leaves its origin.

    A hub answers a resolve URL with a redirect to a CDN: the Authorization header goes to the hub only.
    """
    origin = urllib.parse.urlsplit(url).netloc
    for _hop in range(10):
        same_origin = urllib.parse.urlsplit(url).netloc == origin
        request_headers = {
            key: value
            for key, value in (headers or {}).items()
            if same_origin or key.lower() not in {"authorization", "cookie"}
        }
        request_headers["Accept-Encoding"] = "identity"
        if end is not None:
            request_headers["Range"] = f"bytes={start}-{end}"
        elif start:
            request_headers["Range"] = f"bytes={start}-"
        try:
            return open_url(
                url,
                headers=request_headers,
                timeout=timeout,
                validate_certs=validate_certs,
                follow_redirects="none",
                http_agent="llamarpc.cluster gguf_shard_place",
            )
        except urllib.error.HTTPError as exc:
            location = exc.headers.get("Location") if exc.headers else None
            if exc.code in {301, 302, 303, 307, 308} and location:
                url = urllib.parse.urljoin(url, location)
                continue
            raise
    raise FetchError(f"too many redirects for {url}")


def range_total(reply, start, label, end=None):
    """The file size a 206 reply states (None when it does not say), once its Content-Range is checked to start at
    ``start`` (and to end at ``end``, when given): a part from elsewhere would corrupt a resumed download, a header
    or a tensor."""
    content_range = reply.headers.get("Content-Range", "")
    expected = f"bytes {start}-" if end is None else f"bytes {start}-{end}/"
    if not content_range.startswith(expected):
        asked = f"from {start}" if end is None else f"{start}-{end}"
        raise FetchError(f"{label}: server answered {content_range!r} to a range {asked}")
    total = content_range.rpartition("/")[2]
    return int(total) if total.isdigit() else None


class _AppendSink:
    """Where ``download`` puts the bytes: appended to the partial file (truncated when a reply starts at byte 0)."""

    def __init__(self, partial):
        self.path = partial
        self.handle = None

    def begin(self, offset):
        self.handle = open(self.path, "ab" if offset else "wb")  # noqa: SIM115 - closed by end()

    def write(self, block, _offset):
        self.handle.write(block)

    def end(self):
        if self.handle is not None:
            with contextlib.closing(self.handle):
                self.handle.flush()
                os.fsync(self.handle.fileno())
            self.handle = None


class _InPlaceSink:
    """Where ``repair_in_place`` puts the bytes: into the shard's own file (same inode), each block written only
    where it differs from what the file holds. Every ``PROGRESS_EVERY`` seconds the file is synced and the repair
    sidecar records how far the file is known to equal the source, so that a killed run resumes there."""

    def __init__(self, handle, sidecar_path, record):
        self.handle = handle
        self.path = handle.name
        self.sidecar_path = sidecar_path
        self.record = record
        self.rewritten = 0
        self.last = time.monotonic()

    def begin(self, offset):
        self.handle.seek(offset)

    def write(self, block, offset):
        if self.handle.read(len(block)) != block:
            self.handle.seek(offset)
            self.handle.write(block)
            self.rewritten += len(block)
        if time.monotonic() - self.last >= PROGRESS_EVERY:
            self.checkpoint(offset + len(block))

    def checkpoint(self, done):
        self.last = time.monotonic()
        self.handle.flush()
        os.fsync(self.handle.fileno())
        with contextlib.suppress(OSError):  # no room even for the sidecar: the repair goes on, without resume
            write_json(self.sidecar_path, {**self.record, "done": done})

    def end(self):
        self.handle.flush()
        os.fsync(self.handle.fileno())


def _pull(url, have, shard, sink, *, headers=None, timeout=60, retries=5, progress=None, validate_certs=True):
    """Feed the bytes of ``url`` from ``have`` to its end into ``sink`` (Range requests, resumed after any failure;
    a server that ignores Range starts over from byte 0). Returns ``(end, received)``."""
    if not url.startswith(("http://", "https://")):
        raise FetchError(f"{shard['name']}: only http(s) URLs can be fetched, got {url!r}")
    size = int(shard["size"])
    received = 0
    attempt = 0
    while have < size:
        try:
            with open_range(url, headers, have, timeout, validate_certs) as response:
                status = response.status
                if status == 206:
                    range_total(response, have, shard["name"])
                elif status == 200:
                    have = 0  # Range ignored (or not asked): the body starts at byte 0
                else:
                    raise FetchError(f"{shard['name']}: unexpected HTTP status {status} from {url}")
                sink.begin(have)
                try:
                    while True:
                        block = response.read(CHUNK)
                        if not block:
                            break
                        if have + len(block) > size:
                            raise FetchError(f"{shard['name']}: {url} sends more than the expected {size} bytes")
                        sink.write(block, have)
                        have += len(block)
                        received += len(block)
                        if progress:
                            progress.update(have)
                finally:
                    sink.end()
                if have < size:
                    raise ConnectionError(f"connection closed at {have} of {size} bytes")
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have == size:
                break
            if exc.code in {401, 403, 404, 410}:
                raise FetchError(f"{shard['name']}: HTTP {exc.code} {exc.reason} from {url}") from None
            attempt += 1
            if attempt > retries:
                raise FetchError(f"{shard['name']}: HTTP {exc.code} {exc.reason} after {retries} retries") from None
            time.sleep(min(2**attempt, 30))
        except (OSError, ConnectionError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise FetchError(f"{shard['name']}: no space left in {os.path.dirname(sink.path)}") from None
            attempt += 1
            if attempt > retries:
                raise FetchError(f"{shard['name']}: download failed after {retries} retries: {exc}") from None
            time.sleep(min(2**attempt, 30))
    if progress:
        progress.update(have, force=True)
    return have, received


def download(url, partial, shard, *, headers=None, timeout=60, retries=5, progress=None, validate_certs=True):
    """Append the missing bytes of ``url`` to ``partial`` (Range requests, resumed after any failure).

    Returns ``(resumed_from, downloaded)``: the partial's length before this call and the bytes added.
    A server that ignores Range (answers 200) makes the download start over from byte 0.
    """
    if not url.startswith(("http://", "https://")):
        raise FetchError(f"{shard['name']}: only http(s) URLs can be fetched, got {url!r}")
    sidecar_path = partial[: -len(PARTIAL)] + SIDECAR
    have = _prepare_partial(partial, sidecar_path, shard)
    _end, downloaded = _pull(
        url,
        have,
        shard,
        _AppendSink(partial),
        headers=headers,
        timeout=timeout,
        retries=retries,
        progress=progress,
        validate_certs=validate_certs,
    )
    return have, downloaded


class RangeReader:
    """A shard's first bytes, read in order like a file, over HTTP Range requests of growing size.

    Each ``read`` past what arrived so far asks for the next ``window`` bytes (at least what it needs), and the window
    doubles after every request up to ``max_window``: a small header costs one small request, a large one (a split
    GGUF's tensor table, a tokenizer of 150,000 tokens) a few, and nothing far beyond the header is ever asked for.
    A server that ignores Range (200, whole file) is read only as far as needed and the connection is closed.
    ``requests`` and ``received`` count what crossed the network.
    """

    def __init__(self, url, *, headers=None, timeout=60, validate_certs=True, window=64 << 10, max_window=64 << 20):
        self.url = url
        self.headers = headers
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.window = window
        self.max_window = max_window
        self.buffer = b""
        self.offset = 0  # file offset of buffer[0]
        self.position = 0
        self.requests = 0
        self.received = 0
        self.size = None  # the file's size, when the server said it

    def tell(self):
        return self.position

    def read(self, size):
        while self.position + size > self.offset + len(self.buffer):
            start = self.offset + len(self.buffer)
            want = max(self.window, self.position + size - start)
            if self.size is not None and start >= self.size:
                break
            block = self._fetch(start, want)
            if not block:
                break
            # Keep only what is not consumed yet: the header is read once, in order.
            keep = self.position - self.offset
            self.buffer = self.buffer[keep:] + block
            self.offset += keep
            self.window = min(self.window * 2, self.max_window)
        begin = self.position - self.offset
        data = self.buffer[begin : begin + size]
        self.position += len(data)
        return data

    def _fetch(self, start, length):
        self.requests += 1
        try:
            with open_range(
                self.url, self.headers, start, self.timeout, self.validate_certs, end=start + length - 1
            ) as reply:
                if reply.status == 206:
                    self.size = range_total(reply, start, self.url) or self.size
                    skip = 0
                elif reply.status == 200:
                    skip = start  # Range ignored: the body starts at byte 0
                else:
                    raise FetchError(f"{self.url}: unexpected HTTP status {reply.status}")
                raw = _read_exactly(reply, skip + length)
                block = raw[skip:]
        except urllib.error.HTTPError as exc:
            if exc.code == 416:
                return b""  # asked beyond the end: the file is shorter than the header it claims
            raise FetchError(f"{self.url}: HTTP {exc.code} {exc.reason}") from None
        except OSError as exc:
            raise FetchError(f"{self.url}: {exc}") from None
        self.received += len(raw)
        return block


def read_headers(shards, *, headers=None, timeout=60, validate_certs=True, window=64 << 10):
    """The GGUF headers of a model's shards (in order, shard 1 first), none of their tensor data: a shard with
    ``src_controller`` is read from that local file, one with ``url`` by growing Range requests.

    Returns ``(model, reads)``: ``model`` as ``_gguf_header.read_model`` gives it (``paths`` are the shard names),
    ``reads`` one ``{"name", "header_bytes", "data_offset", "requests", "received"}`` per shard.
    Raises FetchError or ``_gguf_header.GGUFError``.
    """
    parsed, reads = [], []
    for shard in shards:
        if shard.get("src_controller"):
            with open(shard["src_controller"], "rb") as handle:
                header = gguf_header.parse_header(handle, shard["name"])
            requests, received = 0, header["header_bytes"]
        elif shard.get("url"):
            reader = RangeReader(
                shard["url"], headers=headers, timeout=timeout, validate_certs=validate_certs, window=window
            )
            header = gguf_header.parse_header(reader, shard["name"])
            requests, received = reader.requests, reader.received
        else:
            raise FetchError(f"{shard['name']}: no URL and no local file to read its header from")
        parsed.append(header)
        reads.append(
            {
                "name": shard["name"],
                "header_bytes": header["header_bytes"],
                "data_offset": header["data_offset"],
                "requests": requests,
                "received": received,
            }
        )
    return gguf_header.merge_headers([shard["name"] for shard in shards], parsed), reads


def _read_exactly(reply, size):
    """Up to ``size`` bytes of a response body (fewer only at its end); the rest is never read."""
    chunks, have = [], 0
    while have < size:
        block = reply.read(min(CHUNK, size - have))
        if not block:
            break
        chunks.append(block)
        have += len(block)
    return b"".join(chunks)


def copy_local(source, partial, shard):
    """Copy a file already on this host (transferred from the controller) into the partial file."""
    sidecar_path = partial[: -len(PARTIAL)] + SIDECAR
    write_json(sidecar_path, {"size": int(shard["size"]), "sha256": shard["sha256"], "etag": shard.get("etag")})
    shutil.copyfile(source, partial)
    return 0, os.path.getsize(partial)


def repair_sidecar_matches(sidecar, shard):
    """The repair sidecar ``NAME.repair.json`` describes a repair towards this very ``shard`` (and says how far)."""
    done = sidecar.get("done") if isinstance(sidecar, dict) else None
    return sidecar_matches(sidecar, shard) and isinstance(done, int) and 0 <= done <= int(shard["size"])


def repair_resume_point(path, shard):
    """Offset up to which an interrupted in-place repair of ``path`` left the file equal to the source (0: none)."""
    sidecar = read_json(path + REPAIR)
    return sidecar["done"] if repair_sidecar_matches(sidecar, shard) else 0


def repair_in_place(path, shard, *, headers=None, timeout=60, retries=5, progress=None, validate_certs=True):
    """Repair the corrupt shard at ``path`` inside its own inode from its source (``shard["url"]`` by Range, or the
    local file ``shard["src"]``), then verify its sha256 and make it read-only; returns
    ``(resumed_from, received, rewritten, record)``.

    Nothing is unlinked and no second copy is made, so this needs no room beyond the growth of a short file. A
    process that holds the file open (sftp-server behind an SSHFS mount, an mmap) reads the repaired bytes through
    its open descriptor, and no blocks stay held by an unlinked file. Only blocks that differ from the source are
    written: the good bytes are never touched. The file was corrupt already, so a repair that fails midway leaves
    nothing worse; its sidecar ``NAME.repair.json`` lets the next run resume where it stopped (the sha256 of the
    whole file decides in the end; a resumed pass that does not verify is done once more from byte 0).
    """
    size = int(shard["size"])
    sidecar_path = path + REPAIR
    record = {"size": size, "sha256": shard["sha256"], "etag": shard.get("etag")}
    start = repair_resume_point(path, shard)
    resumed_from, received = start, 0
    try:
        handle = open(path, "r+b")  # noqa: SIM115 - closed below
    except PermissionError:  # not root: make the owner's read-only file writable for the repair
        os.chmod(path, 0o644)
        handle = open(path, "r+b")  # noqa: SIM115 - closed below
    with handle:
        sink = _InPlaceSink(handle, sidecar_path, record)
        while True:
            if shard.get("src"):
                got = _copy_into(shard["src"], start, sink)
            else:
                _end, got = _pull(
                    shard["url"],
                    start,
                    shard,
                    sink,
                    headers=headers,
                    timeout=timeout,
                    retries=retries,
                    progress=progress,
                    validate_certs=validate_certs,
                )
            received += got
            handle.truncate(size)
            sink.end()
            digest = sha256_file(path)
            if digest == shard["sha256"] or start == 0:
                break
            start = 0  # the part before the resume point changed since: compare the whole file once more
    rewritten = sink.rewritten
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sidecar_path)
    if digest != shard["sha256"]:
        raise FetchError(
            f"{shard['name']}: the source's bytes have sha256 {digest}, expected {shard['sha256']}: the file now holds "
            f"what {shard.get('url') or shard.get('src')} serves (it was corrupt before); check that the source and "
            "its sha256 belong together, then run again"
        )
    os.chmod(path, READ_ONLY)
    give_to_directory_owner(path)
    info = os.stat(path)
    return resumed_from, received, rewritten, {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": digest}


def _copy_into(source, start, sink):
    """Feed the local file ``source`` from byte ``start`` into ``sink``."""
    with open(source, "rb") as src:
        src.seek(start)
        sink.begin(start)
        offset = start
        for block in iter(lambda: src.read(CHUNK), b""):
            sink.write(block, offset)
            offset += len(block)
    return offset - start


def deleted_but_open(directory):
    """Files of ``directory`` that were deleted but are still held open by a process (their blocks stay allocated
    until it closes them): ``[{"pid", "command", "path", "size"}]``, largest first. Reads ``/proc``; processes this
    user cannot inspect are skipped."""
    prefix = os.path.join(os.path.realpath(directory), "")
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if not (target.startswith(prefix) and target.endswith(" (deleted)")):
                    continue
                info = os.stat(f"{fd_dir}/{fd}")
                with open(f"/proc/{pid}/comm", encoding="utf-8") as comm:
                    command = comm.read().strip()
            except OSError:
                continue
            key = (int(pid), info.st_dev, info.st_ino)
            found[key] = {
                "pid": int(pid),
                "command": command,
                "path": target[: -len(" (deleted)")],
                "size": info.st_size,
            }
    return sorted(found.values(), key=lambda entry: (-entry["size"], entry["pid"]))


def finish(model_dir, shard, partial):
    """Verify the partial file, make it read-only and move it into place; returns its manifest record."""
    size = os.path.getsize(partial)
    if size != int(shard["size"]):
        raise FetchError(f"{shard['name']}: got {size} bytes, expected {shard['size']}")
    digest = sha256_file(partial)
    sidecar_path = partial[: -len(PARTIAL)] + SIDECAR
    if digest != shard["sha256"]:
        os.unlink(partial)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sidecar_path)
        raise FetchError(
            f"{shard['name']}: checksum mismatch - sha256 {digest}, expected {shard['sha256']} "
            "(the download was discarded)"
        )
    os.chmod(partial, READ_ONLY)
    give_to_directory_owner(partial)
    final = os.path.join(model_dir, shard["name"])
    _atomic.finalise(partial, final)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sidecar_path)
    info = os.stat(final)
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": digest, "placed": True}


def remove_partial(model_dir, name):
    """Remove a partial download and its sidecar; True if something was there."""
    removed = False
    for suffix in (PARTIAL, SIDECAR):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(model_dir, name + suffix))
            removed = True
    return removed


def link(model_dir, name, target):
    """Make ``model_dir/name`` a symlink to ``target`` (atomically replacing what is there); True if changed."""
    path = os.path.join(model_dir, name)
    if os.path.islink(path) and os.readlink(path) == target:
        return False
    tmp = os.path.join(model_dir, f".{name}.link-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    give_to_directory_owner(tmp)
    os.replace(tmp, path)
    _atomic.fsync_dir(model_dir)
    return True
