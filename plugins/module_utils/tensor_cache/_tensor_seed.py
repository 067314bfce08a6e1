# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Seeding a worker's RPC tensor cache from local bytes, before llama-server loads a plan (issue 22 item 1).

What a worker will be offered (``seed_lists``): llama-server offers every weight tensor over 10 MiB by its FNV-1a hash
(``SET_TENSOR_HASH``) to the device its layer is on. Layers go to devices by the planner's own mapping
(``_cluster_plan.assign_layers``, llama.cpp's ``load_tensors`` with ``-ngl all``) and tensors to layers by
``_cluster_plan.tensor_slot`` (the token embedding stays on the coordinator, but a tied output sends its bytes to the
output layer's device). Device ``i`` is the ``i``-th endpoint of ``--rpc``.

The seeder (``seed``): for each tensor, its hash is computed from the source bytes; a cache file of that name with the
right size and hash is left alone; otherwise the bytes are copied into a temporary name in the cache directory,
hashed again (a source that changed under the copy is refused), fsynced and renamed to ``<16 hex digits>``, and the
directory is fsynced (``_atomic.finalise``). A temporary file a killed seeder left behind is removed on the next run
(the worker's verifier would remove it too: its name is not a hash).

A tensor whose shard this host lacks is fetched from the shard's URL (``urls``, by file name) with one HTTP Range
request for exactly its bytes (``_shard_fetch.open_range``, the Content-Range checked), into the same temporary name and
then the same hash, fsync and rename. A server that ignores Range or answers another range, and a failed request,
leave the tensor ``unavailable`` (llama-server sends it at the load): nothing beyond the tensor's bytes is read.

Before a URL, the nearest copy: a host that holds the shard and exports it read-only over SFTP (``peers``, by file
name: the ``sshfs_shard_export`` role's view of its model directory). The worker reads exactly the tensor's bytes over
one SFTP session per peer (``_sftp``), so they cross the network once, between the two hosts, never through the
coordinator. A peer that fails is not asked again in the run; its tensors go to the URL when there is one.

The keep file (``keep_file``) lists the plan's tensors now in the cache, one line each, sorted, no line twice:
``HASH NAME FILE OFFSET SIZE`` - the cache file's name (16 hex digits), the tensor's name, its shard's file name
(both percent-encoded, so that neither holds a space), the tensor's offset in the shard and its size. The worker's
pruner keeps the files it names (only the first field counts); a rerun takes a URL tensor's hash from it and fetches
nothing when that cache file is there and right. Two tensors of identical bytes share a hash and so a cache file, but
each has its line.

With ``shards`` (the shards in force: file name -> sha256), a row whose hash is of bytes of a shard of that sha256 gets
``shard_sha256`` (``verify_rows``): a local shard that this host's placement verified (its record in the model
directory, ``.llamarpc-shards.json``, with the file's size and mtime unchanged, as the placement's quick check trusts
it), a tensor fetched in this run (from the shard's host or its URL, the copies of that sha256), or one whose keep line
records that sha256 (a sixth field, ``SHA256``, written for such rows). Only those go into the tensor hashes file that
llama-server takes (``_tensor_hashes``): a hash of other bytes would load those bytes.
"""

from __future__ import annotations

import http.client
import os
import re
import time
import urllib.error
import urllib.parse

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _seed_metrics
from ansible_collections.llamarpc.cluster.plugins.module_utils.model._gguf_header import (
    merge_headers,
    read_header,
    split_paths,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.model._model_profile import CACHE_THRESHOLD_BYTES
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._cluster_plan import (
    PlanError,
    assign_layers,
    is_tied,
    summarize,
    tensor_slot,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_fetch import (
    MANIFEST,
    REPAIR,
    FetchError,
    open_range,
    range_total,
    read_json,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._sftp import Session, SftpError, ssh_argv
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache._fnv1a import NAME, HashError, hash_ranges

TEMP_PREFIX = ".seed-"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
COPY_CHUNK = 8 << 20
FETCH_TIMEOUT = 60  # seconds without a byte before a Range request is given up
#: What RV(summary) repeats of the result: a seeding's outcome without its per-tensor list.
SUMMARY_KEYS = (
    "written",
    "present",
    "unavailable",
    "fetched",
    "bytes_written",
    "bytes_fetched",
    "shards_local",
    "shards_fetched",
    "shards_peer",
    "bytes_peer",
    "finished_at",
    "msg",
)
#: What a peer (an item of the ``peers`` option) names: the SFTP export's host and user, the shard's path in it, and
#: this host's key and known_hosts file for it.
PEER_KEYS = ("host", "user", "path", "identity_file", "known_hosts_file")
KEEP_STATES = ("present", "written")


class SeedError(Exception):
    """Seeding cannot go on; the message says what to do."""


class RangeRefused(Exception):
    """The server did not answer a Range request with exactly the bytes asked for (nothing of its body was read)."""


def model_tensors(first_path):
    """Every tensor of a (possibly split) GGUF: name, the shard holding it, its absolute offset there and its size;
    and the number of repeating layers. ``first_path`` is the model (shard 1 of a split)."""
    paths = split_paths(first_path)
    headers = [read_header(path) for path in paths]
    tensors = [
        {
            "name": tensor["name"],
            "file": path,
            "offset": header["data_offset"] + tensor["offset"],
            "size": tensor["bytes"],
        }
        for path, header in zip(paths, headers, strict=True)
        for tensor in header["tensors"]
    ]
    return tensors, summarize(merge_headers(paths, headers))["n_layer"]


def _as_list(value, kind):
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",") if item.strip()]
    return [kind(item) for item in value]


def seed_lists(tensors, n_layer, rpc, tensor_split, threshold=CACHE_THRESHOLD_BYTES):
    """{endpoint: [tensor dicts]}: the tensors over ``threshold`` each endpoint of ``rpc`` is offered, in file order.

    ``rpc`` and ``tensor_split`` as a plan gives them (comma-separated strings or lists, one proportion per endpoint).
    """
    endpoints = _as_list(rpc, str)
    split = _as_list(tensor_split, float)
    if not endpoints:
        raise PlanError("the plan has no RPC endpoint: a local plan has no worker cache to seed")
    if len(split) != len(endpoints):
        raise PlanError(f"{len(endpoints)} RPC endpoint(s) but {len(split)} tensor split proportion(s)")
    if len(set(endpoints)) != len(endpoints):
        raise PlanError(f"an RPC endpoint is listed twice: {','.join(endpoints)}")
    devices = assign_layers(n_layer, split)
    tied = is_tied(tensors)
    lists = {endpoint: [] for endpoint in endpoints}
    for tensor in tensors:
        if tensor["size"] <= threshold:
            continue
        slot = tensor_slot(tensor["name"], n_layer, tied)
        if slot is not None:
            lists[endpoints[devices[slot]]].append(dict(tensor))
    return lists


def _copy_range(source, offset, size, target):
    """``size`` bytes of ``source`` from ``offset`` into the open descriptor ``target`` (in the kernel when it can)."""
    with open(source, "rb") as handle:
        done = 0
        while done < size:
            want = min(COPY_CHUNK, size - done)
            try:
                copied = os.copy_file_range(handle.fileno(), target, want, offset + done)
            except OSError:
                copied = None
            if not copied:  # not supported across these file systems (or 0 at an early end): plain reads
                handle.seek(offset + done)
                data = handle.read(want)
                if not data:
                    raise SeedError(f"{source}: ends before byte {offset + size} (the tensor's end)")
                copied = os.write(target, data)
            done += copied


def stale_temporaries(cache_dir):
    """Temporary files a killed seeder left in ``cache_dir``."""
    try:
        return sorted(os.path.join(cache_dir, name) for name in os.listdir(cache_dir) if name.startswith(TEMP_PREFIX))
    except FileNotFoundError:
        return []


def _right_files(pairs, hasher=None):
    """For each ``(path, size)``: True when ``path`` is a regular file of that size whose FNV-1a is its name."""
    right = [os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) == n for p, n in pairs]
    sized = [pair for pair, ok in zip(pairs, right, strict=True) if ok]
    if not sized:
        return right
    try:
        found = iter(hash_ranges([(path, 0, size) for path, size in sized], hasher))
    except (HashError, OSError):
        found = iter([None] * len(sized))
    return [ok and next(found) == os.path.basename(path) for (path, _size), ok in zip(pairs, right, strict=True)]


def plan_seed(entries, cache_dir, hasher=None):
    """Each entry with its ``hash`` and ``state``: ``present`` (a cache file of that name, size and hash is there) or
    ``missing`` (to write). Reads the sources and existing cache files, writes nothing."""
    try:
        hashes = hash_ranges([(e["file"], e["offset"], e["size"]) for e in entries], hasher)
    except (HashError, OSError) as exc:
        raise SeedError(f"cannot read a tensor's bytes: {exc}") from exc
    planned = [dict(entry, hash=digest, state="missing") for entry, digest in zip(entries, hashes, strict=True)]
    right = _right_files([(os.path.join(cache_dir, row["hash"]), row["size"]) for row in planned], hasher)
    for row, ok in zip(planned, right, strict=True):
        if ok:
            row["state"] = "present"
    return planned


def write_one(row, cache_dir, hasher=None):
    """Write one tensor's cache file atomically: temporary name, hash check, then fsync, rename and fsync of the
    directory (``_atomic.finalise``)."""
    final = os.path.join(cache_dir, row["hash"])
    temporary = os.path.join(cache_dir, f"{TEMP_PREFIX}{row['hash']}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            _copy_range(row["file"], row["offset"], row["size"], descriptor)
        finally:
            os.close(descriptor)
        written = hash_ranges([(temporary, 0, row["size"])], hasher)[0]
        if written != row["hash"]:
            raise SeedError(
                f"{row['file']}: the bytes of {row['name']} hash to {written} after the copy, {row['hash']} before: "
                "the shard changed while it was read; run again once it is in place"
            )
        os.chmod(temporary, 0o644)
        _atomic.finalise(temporary, final)
    except OSError as exc:
        raise SeedError(f"cannot write {final}: {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def check_room(rows, cache_dir):
    """Refuse before writing when the cache's file system cannot take the missing tensors."""
    need = sum(row["size"] for row in rows if row["state"] == "missing")
    if not need:
        return
    stat = os.statvfs(cache_dir)
    free = stat.f_bavail * stat.f_frsize
    if need > free:
        raise SeedError(
            f"{cache_dir}: the plan's tensors need {need} bytes more and {free} are free; free space there or "
            "lower the cache cap's share of the disk"
        )


def seed(entries, cache_dir, hasher=None, check_mode=False):
    """Seed ``cache_dir`` with ``entries`` (``seed_lists``' dicts). Returns the rows (``state`` ``present``,
    ``written`` or, in check mode, ``missing``) and the stale temporaries removed (or to remove)."""
    if not os.path.isdir(cache_dir):
        if check_mode:  # a check run before the worker role made it: every tensor is to write
            return plan_seed(entries, cache_dir, hasher), []
        raise SeedError(f"{cache_dir} is not a directory: the worker role creates the cache directory first")
    stale = stale_temporaries(cache_dir)
    rows = plan_seed(entries, cache_dir, hasher)
    if check_mode:
        return rows, stale
    for path in stale:
        os.unlink(path)
    check_room(rows, cache_dir)
    done = set()
    for row in rows:
        if row["state"] != "missing":
            continue
        if row["hash"] not in done:  # the same bytes twice (a tied copy) make one file
            write_one(row, cache_dir, hasher)
            done.add(row["hash"])
        row["state"] = "written"
    return rows, stale


def locate(entries, source_dirs=None, urls=None, peers=None):
    """(entries found on this host, entries to fetch, entries with no source). With ``source_dirs`` each tensor's
    shard is looked up by its file name in those directories, in order (this host's copy of the shard), instead of at
    the path the list names; a copy too short to hold the tensor does not count, and in ``source_dirs`` neither does a
    symbolic link (the coordinator's link to a shard on another host's SSHFS mount: a hung mount would hang the seeding,
    and those bytes are not this host's). A tensor not found here whose shard's file name is in ``peers`` or ``urls``
    is to fetch (its entry gets ``sources``: the peer first, the nearer copy, then the URL); the others are
    ``unavailable``."""
    found, remote, missing = [], [], []
    for entry in entries:
        name = os.path.basename(entry["file"])
        candidates = [os.path.join(d, name) for d in source_dirs] if source_dirs else [entry["file"]]
        path = next(
            (
                c
                for c in candidates
                if not (source_dirs and os.path.islink(c))
                and os.path.isfile(c)
                and os.path.getsize(c) >= entry["offset"] + entry["size"]
            ),
            None,
        )
        if path is not None:
            found.append(dict(entry, file=path, source="local"))
            continue
        sources = _sources(name, urls, peers)
        if sources and entry["size"] > 0:
            remote.append(dict(entry, sources=sources))
        else:
            reason = f"no copy of {name} on this host" + (" and no peer or URL for it" if urls or peers else "")
            missing.append(dict(entry, hash=None, state="unavailable", source=None, reason=reason))
    return found, remote, missing


def _write_all(descriptor, data, path):
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(descriptor, view) :]
    except OSError as exc:
        raise SeedError(f"cannot write {path}: {exc.strerror or exc}") from exc


def fetch_range(url, offset, size, descriptor, path, headers=None, timeout=FETCH_TIMEOUT, validate_certs=True):
    """Exactly ``size`` bytes of ``url`` from ``offset`` into the open descriptor ``descriptor`` (the file ``path``),
    by one Range request. Raises RangeRefused (a whole file or another range: its body is not read), FetchError (the
    request failed) or SeedError (the bytes could not be written here)."""
    end = offset + size - 1
    label = os.path.basename(urllib.parse.urlsplit(url).path) or url
    try:
        with open_range(url, headers, offset, timeout, validate_certs, end=end) as reply:
            if reply.status != 206:
                raise RangeRefused(f"{label}: HTTP {reply.status} to a Range request, the server ignores Range")
            try:
                range_total(reply, offset, label, end=end)
            except FetchError as exc:
                raise RangeRefused(str(exc)) from None
            done = 0
            while done < size:
                block = reply.read(min(COPY_CHUNK, size - done))
                if not block:
                    raise FetchError(f"{label}: the connection closed after {done} of {size} bytes")
                _write_all(descriptor, block, path)
                done += len(block)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{label}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise FetchError(f"{label}: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise FetchError(f"{label}: {exc}") from None


def fetch_one(row, read, cache_dir, hasher=None):
    """Fetch one tensor's bytes into a temporary name (``read(descriptor, path)`` writes them there), hash them, fsync,
    rename to the hash, fsync the directory (``_atomic.finalise``); sets the row's ``hash`` and ``state``
    (``present`` when a right file of that name was there)."""
    temporary = os.path.join(cache_dir, f"{TEMP_PREFIX}fetch.{os.getpid()}")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            read(descriptor, temporary)
        finally:
            os.close(descriptor)
        digest = hash_ranges([(temporary, 0, row["size"])], hasher)[0]
        final = os.path.join(cache_dir, digest)
        row.update(hash=digest, state="written")
        if _right_files([(final, row["size"])], hasher)[0]:
            row["state"] = "present"
            return
        os.chmod(temporary, 0o644)
        _atomic.finalise(temporary, final)
    except (OSError, HashError) as exc:
        raise SeedError(f"cannot write {temporary}: {getattr(exc, 'strerror', None) or exc}") from exc
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _sources(name, urls, peers):
    """Where a shard this host lacks can be read, nearest first: ``[("peer", peer), ("url", url)]``, either absent."""
    found = []
    if (peers or {}).get(name):
        found.append(("peer", peers[name]))
    if (urls or {}).get(name):
        found.append(("url", urls[name]))
    return found


def _source_key(kind, where):
    """What fails as one: a peer's SSH session (host, user, key, known hosts), or one URL."""
    if kind == "peer":
        return kind, where["host"], where["user"], where["identity_file"], where["known_hosts_file"]
    return kind, where


class _Peers:
    """One SFTP session per peer for a seeding run, opened at its first tensor; all closed at the end."""

    def __init__(self):
        self.sessions = {}

    def read(self, peer, row):
        key = _source_key("peer", peer)
        if key not in self.sessions:
            argv = ssh_argv(
                peer["host"],
                peer["user"],
                identity_file=peer["identity_file"],
                known_hosts_file=peer["known_hosts_file"],
            )
            self.sessions[key] = Session(argv)
        session = self.sessions[key]
        return lambda descriptor, _path: session.read_range(peer["path"], row["offset"], row["size"], descriptor)

    def drop(self, peer):
        session = self.sessions.pop(_source_key("peer", peer), None)
        if session is not None:
            session.close()

    def close(self):
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()


def _fetch_from(row, kind, where, peers, cache_dir, hasher, headers):
    """Fetch the row's bytes from one source; raises RangeRefused, FetchError or SftpError when that source fails."""
    if kind == "peer":
        fetch_one(row, peers.read(where, row), cache_dir, hasher)
        return

    def read(descriptor, path):
        fetch_range(where, row["offset"], row["size"], descriptor, path, headers)

    fetch_one(row, read, cache_dir, hasher)


def seed_remote(entries, cache_dir, known=None, hasher=None, check_mode=False, headers=None):
    """Seed ``cache_dir`` with ``locate``'s entries to fetch. A tensor whose hash ``known`` (``read_keep``) gives and
    whose cache file of that name is right is ``present`` without a request; the others are fetched from their
    ``sources`` in order (in check mode: ``missing``, hash unknown). A source that failed (a peer's session, a URL) is
    not asked again in the run. Returns the rows (``source``: ``peer`` or ``url``, the one their bytes came from), the
    reasons of the URLs that refused Range and the bytes received, ``{"peer": n, "url": n}``."""
    known = known or {}
    rows = []
    for entry in entries:
        row = {key: value for key, value in entry.items() if key != "sources"}
        rows.append(dict(row, hash=known.get(keep_key(entry)), state="missing", source=entry["sources"][0][0]))
    hashed = [row for row in rows if row["hash"]]
    right = _right_files([(os.path.join(cache_dir, row["hash"]), row["size"]) for row in hashed], hasher)
    for row, ok in zip(hashed, right, strict=True):
        row["state"] = "present" if ok else "missing"
    for row in rows:
        if row["state"] == "missing":
            row["hash"] = None  # a recorded hash whose file is gone or wrong: the bytes decide again
    received = {"peer": 0, "url": 0}
    if check_mode:
        return rows, [], received
    check_room(rows, cache_dir)
    failed, refused, peers = {}, [], _Peers()
    try:
        for entry, row in zip(entries, rows, strict=True):
            if row["state"] != "missing":
                continue
            reasons = []
            for kind, where in entry["sources"]:
                key = _source_key(kind, where)
                if key in failed:
                    reasons.append(f"not tried, an earlier request to the {kind} failed: {failed[key]}")
                    continue
                try:
                    _fetch_from(row, kind, where, peers, cache_dir, hasher, headers)
                except (RangeRefused, FetchError, SftpError) as exc:
                    failed[key] = str(exc) if kind == "url" else f"{where['host']}: {exc}"
                    reasons.append(failed[key])
                    if kind == "peer":
                        peers.drop(where)
                    if isinstance(exc, RangeRefused):
                        refused.append(str(exc))
                    continue
                row["source"] = kind
                received[kind] += row["size"]
                break
            else:
                row.update(state="unavailable", reason="; ".join(reasons))
    finally:
        peers.close()
    return rows, refused, received


def keep_key(entry):
    """What identifies a tensor's bytes across runs and hosts: its shard's file name, offset and size."""
    return os.path.basename(entry["file"]), int(entry["offset"]), int(entry["size"])


def keep_text(rows, check_mode=False):
    """The keep file's text for ``rows``: one ``HASH NAME FILE OFFSET SIZE`` line per tensor in the cache (or, in
    check mode, about to be written), sorted, no line twice; `` SHA256`` after it for a row whose bytes are of a shard
    of that sha256 (``shard_sha256``)."""
    states = (*KEEP_STATES, "missing") if check_mode else KEEP_STATES
    lines = {
        " ".join(
            (
                row["hash"],
                urllib.parse.quote(row["name"], safe=""),
                urllib.parse.quote(os.path.basename(row["file"]), safe=""),
                str(row["offset"]),
                str(row["size"]),
                *((row["shard_sha256"],) if row.get("shard_sha256") else ()),
            )
        )
        for row in rows
        if row["hash"] and row["state"] in states
    }
    return "".join(f"{line}\n" for line in sorted(lines))


def read_text(path):
    """A text file's content, or None when it is not there (or not readable as text)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _keep_lines(text):
    """(key, hash, shard sha256 or None) of each keep line that parses (five fields, or six with the sha256)."""
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) not in (5, 6) or not NAME.fullmatch(fields[0]):
            continue
        if fields[3].isdigit() and fields[4].isdigit():
            sha = fields[5] if len(fields) == 6 and _SHA256.fullmatch(fields[5]) else None
            yield (urllib.parse.unquote(fields[2]), int(fields[3]), int(fields[4])), fields[0], sha


def read_keep(text):
    """{(shard file name, offset, size): hash} from a keep file's text; lines that do not parse are left out."""
    return {key: digest for key, digest, _sha in _keep_lines(text)}


def read_keep_sha256(text):
    """{(shard file name, offset, size): shard sha256} of the keep lines that record one."""
    return {key: sha for key, _digest, sha in _keep_lines(text) if sha}


def placed_sha256(path):
    """The sha256 this host's shard placement verified for the shard file ``path`` (its directory's
    ``.llamarpc-shards.json``), when the file's size and mtime are still the recorded ones and no repair is under way;
    else None."""
    record = (read_json(os.path.join(os.path.dirname(path), MANIFEST)) or {}).get(os.path.basename(path))
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not isinstance(record, dict) or os.path.exists(path + REPAIR):
        return None
    if record.get("size") != info.st_size or record.get("mtime_ns") != info.st_mtime_ns:
        return None
    sha = record.get("sha256")
    return sha if isinstance(sha, str) and _SHA256.fullmatch(sha) else None


def verify_rows(local, fetched, shards, keep_before):
    """Set ``shard_sha256`` on each row whose hash is of bytes of a shard in force (``shards``: file name -> sha256):
    a local row whose shard this host's placement verified (``placed_sha256``), a fetched row fetched in this run, or
    one whose hash and sha256 its keep line records. The others get none: their bytes may be another version's."""
    recorded, recorded_sha = read_keep(keep_before), read_keep_sha256(keep_before)
    for row in local:
        want = shards.get(os.path.basename(row["file"]))
        if want and row["hash"] and row["state"] in KEEP_STATES and placed_sha256(row["file"]) == want:
            row["shard_sha256"] = want
    for row in fetched:
        want = shards.get(os.path.basename(row["file"]))
        if not (want and row["hash"] and row["state"] in KEEP_STATES):
            continue
        key = keep_key(row)
        from_keep = recorded.get(key) == row["hash"]
        if not from_keep or recorded_sha.get(key) == want:
            row["shard_sha256"] = want


def write_text(path, text):
    """Replace ``path`` with ``text`` atomically (``_atomic.write_atomic``: a temporary name beside it, fsync, mode
    0644, rename, fsync of the directory)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SeedError(f"{directory} is not a directory: create it before seeding with keep_file {path}")
    try:
        _atomic.write_atomic(path, text, mode=0o644)
    except OSError as exc:
        raise SeedError(f"cannot write {path}: {exc.strerror or exc}") from exc


def given_tensors(tensors):
    """The ``tensors`` option checked: dicts with name, file, offset and size."""
    checked = []
    for index, tensor in enumerate(tensors):
        try:
            checked.append(
                {
                    "name": str(tensor["name"]),
                    "file": str(tensor["file"]),
                    "offset": int(tensor["offset"]),
                    "size": int(tensor["size"]),
                }
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SeedError(f"tensors[{index}] needs name, file, offset and size (integers): {exc!r}") from exc
    return checked


ARGUMENT_SPEC = {
    "model": {"type": "path"},
    "tensors": {"type": "list", "elements": "dict"},
    "rpc": {"type": "list", "elements": "str"},
    "tensor_split": {"type": "list", "elements": "float"},
    "endpoint": {"type": "str"},
    "cache_dir": {"type": "path"},
    "source_dirs": {"type": "list", "elements": "path"},
    "hasher": {"type": "path"},
    "keep_file": {"type": "path"},
    "urls": {"type": "dict"},
    "url_headers": {"type": "dict", "no_log": True},
    "peers": {"type": "dict"},
    "shards": {"type": "dict"},
    "metrics_file": {"type": "path"},
}
MODULE_RULES = {
    "required_one_of": [["model", "tensors"]],
    "mutually_exclusive": [["model", "tensors"]],
    "required_by": {
        "model": ["rpc", "tensor_split"],
        "keep_file": ["cache_dir"],
        "urls": ["cache_dir"],
        "peers": ["cache_dir"],
        "metrics_file": ["cache_dir"],
    },
}


def _entries(params):
    """This endpoint's tensors (None: not in the plan), or {endpoint: tensors} when there is no cache to seed."""
    if params["tensors"] is not None:
        if not params["cache_dir"]:
            raise SeedError("tensors are given: cache_dir is needed to seed them")
        return given_tensors(params["tensors"])
    tensors, n_layer = model_tensors(params["model"])
    lists = seed_lists(tensors, n_layer, params["rpc"], params["tensor_split"])
    if not params["cache_dir"]:
        return lists
    if not params["endpoint"]:
        raise SeedError("endpoint is needed with model and cache_dir: which endpoint's tensors to seed")
    return lists.get(params["endpoint"])


def given_urls(urls):
    """The ``urls`` option checked: {shard file name: http(s) URL}."""
    checked = {}
    for name, url in (urls or {}).items():
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise SeedError(f"urls[{name!r}] must be an http:// or https:// URL, not {url!r}")
        if os.path.basename(name) != name:
            raise SeedError(f"urls are keyed by a shard's file name, not a path: {name!r}")
        checked[name] = url
    return checked


def given_peers(peers):
    """The ``peers`` option checked: {shard file name: {host, user, path, identity_file, known_hosts_file}}."""
    checked = {}
    for name, peer in (peers or {}).items():
        if os.path.basename(name) != name:
            raise SeedError(f"peers are keyed by a shard's file name, not a path: {name!r}")
        if not isinstance(peer, dict) or any(not isinstance(peer.get(key), str) or not peer[key] for key in PEER_KEYS):
            raise SeedError(f"peers[{name!r}] needs {', '.join(PEER_KEYS)} (strings), not {peer!r}")
        if not all(peer[key].startswith("/") for key in ("path", "identity_file", "known_hosts_file")):
            raise SeedError(f"peers[{name!r}]: path, identity_file and known_hosts_file must be absolute")
        checked[name] = {key: peer[key] for key in PEER_KEYS}
    return checked


def given_shards(shards):
    """The ``shards`` option checked: {shard file name: sha256}."""
    checked = {}
    for name, sha in (shards or {}).items():
        if os.path.basename(name) != name or not isinstance(sha, str) or not _SHA256.fullmatch(sha.lower()):
            raise SeedError(f"shards maps a shard's file name to its sha256 (64 hex digits), not {name!r}: {sha!r}")
        checked[name] = sha.lower()
    return checked


def _keep(params, rows, check_mode, before):
    """The keep file's text after this run; written unless in check mode. Returns (changed, after)."""
    after = keep_text(rows, check_mode)
    pending = check_mode and any(row["state"] == "missing" and not row["hash"] for row in rows)
    changed = after != before or pending
    if after != before and not check_mode:
        write_text(params["keep_file"], after)
    return changed, after


def _summary(rows):
    """The counts of the result from the seeded rows (local and fetched; not the unavailable ones), and the shard files
    whose bytes were written (in check mode, would be), by source: ``shards_local``, ``shards_peer`` (over SFTP) and
    ``shards_fetched`` (by Range from a URL)."""
    to_write = [row for row in rows if row["state"] in ("missing", "written")]
    sizes = {row["hash"]: row["size"] for row in to_write if row["hash"]}
    pending = [row for row in to_write if not row["hash"]]  # check mode: only a fetch would tell the hash
    return {
        "written": len(sizes) + len(pending),
        "bytes_written": sum(sizes.values()) + sum(row["size"] for row in pending),
        "present": sum(row["state"] == "present" for row in rows),
        "fetched": sum(row["source"] in ("url", "peer") for row in to_write),
        "shards_local": _shard_names(row for row in to_write if row["source"] == "local"),
        "shards_fetched": _shard_names(row for row in to_write if row["source"] == "url"),
        "shards_peer": _shard_names(row for row in to_write if row["source"] == "peer"),
    }


def _shard_names(rows):
    return sorted({os.path.basename(row["file"]) for row in rows})


def _diff(params, seeded, stale, keep_before, keep_after):
    """Diff mode: the plan's cache file names before and after (and the keep file's text, when there is one)."""
    present = {row["hash"] for row in seeded if row["state"] == "present"}
    header = f"{params['cache_dir']} (the plan's tensors)"
    diff = {
        "before": "".join(f"{name}\n" for name in sorted(present | {os.path.basename(s) for s in stale})),
        "after": "".join(f"{name}\n" for name in sorted({row["hash"] for row in seeded if row["hash"]})),
        "before_header": header,
        "after_header": header,
    }
    if not params["keep_file"]:
        return diff
    keep = {"before": keep_before, "after": keep_after}
    return [diff, dict(keep, before_header=params["keep_file"], after_header=params["keep_file"])]


def _seed_all(module, params, hasher, keep_before):
    """Seed from local shards, then from peers and by Range; returns (local rows, fetched rows, unavailable rows, stale
    temporaries, URL refusals, bytes received by source)."""
    urls = given_urls(params["urls"])
    peers = given_peers(params["peers"])
    entries = _entries(params)
    if isinstance(entries, dict):
        return entries
    found, remote, missing = locate(entries or [], params["source_dirs"], urls, peers)
    rows, stale = seed(found, params["cache_dir"], hasher, module.check_mode)
    fetched, refused, received = seed_remote(
        remote, params["cache_dir"], read_keep(keep_before), hasher, module.check_mode, params["url_headers"]
    )
    if params["shards"]:
        verify_rows(rows, fetched, given_shards(params["shards"]), keep_before)
    return entries, rows, fetched, missing, stale, refused, received


def _write_metrics(module, path, rows, now):
    """The seeding's record into O(metrics_file) (node exporter's textfile collector); a failure is a warning, never
    the seeding's: the cache is seeded either way."""
    try:
        _seed_metrics.write(path, rows, now)
    except (OSError, ValueError) as exc:
        module.warn(f"seeding metrics not written to {path}: {exc}")


def run_module(module):
    """The module ``tensor_cache_seed``: its result dict (fails through ``module.fail_json``)."""
    params = module.params
    hasher = params["hasher"]
    if hasher and not os.access(hasher, os.X_OK):
        module.warn(f"{hasher} is not there: hashing in Python, over 100 times slower")
        hasher = None
    result = {"changed": False, "tensors": [], "written": 0, "present": 0, "unavailable": 0, "bytes_written": 0}
    result.update(removed_temporaries=[], fetched=0, bytes_fetched=0, keep_file_changed=False)
    result.update(shards_local=[], shards_fetched=[], shards_peer=[], bytes_peer=0)
    keep_before = (read_text(params["keep_file"]) or "") if params["keep_file"] else ""
    try:
        outcome = _seed_all(module, params, hasher, keep_before)
        if isinstance(outcome, dict):
            counts = ", ".join(f"{e} {len(rows)}" for e, rows in outcome.items())
            return dict(result, lists=outcome, msg=f"tensors over 10 MiB per endpoint: {counts}")
        entries, rows, fetched, missing, stale, refused, received = outcome
        keep_changed, keep_after = False, keep_before
        if params["keep_file"]:
            keep_changed, keep_after = _keep(params, rows + fetched, module.check_mode, keep_before)
    except (PlanError, SeedError, OSError, ValueError) as exc:
        module.fail_json(msg=f"tensor cache seeding failed: {exc}")
    if refused:
        module.warn(
            f"{len(refused)} shard URL(s) did not answer a Range request with the tensor's bytes ({refused[0]}); their "
            "tensors were not fetched (llama-server sends them at the load). Serve the shards from a server that "
            "honours Range"
        )
    seeded = [row for row in rows + fetched if row["state"] != "unavailable"]
    unavailable = [row for row in fetched if row["state"] == "unavailable"] + missing
    counts = _summary(seeded)
    result.update(
        counts,
        changed=bool(counts["written"] or stale or keep_changed),
        tensors=rows + fetched + missing,
        unavailable=len(unavailable),
        bytes_fetched=received["url"],
        bytes_peer=received["peer"],
        removed_temporaries=stale,
        keep_file_changed=keep_changed,
    )
    if entries is None:
        result["msg"] = f"{params['endpoint']} is not in the plan ({','.join(params['rpc'])})"
    else:
        result["msg"] = (
            f"{len(entries)} tensor(s) over 10 MiB to seed: {counts['present']} already cached, {counts['written']} "
            f"{'to write' if module.check_mode else 'written'} ({counts['fetched']} of them fetched: "
            f"{len(counts['shards_peer'])} shard(s) over SFTP from a peer, {len(counts['shards_fetched'])} by Range), "
            f"{len(unavailable)} unavailable (llama-server sends those)"
        )
    result["finished_at"] = time.time()
    if params["metrics_file"] and not module.check_mode:
        _write_metrics(module, params["metrics_file"], result["tensors"], result["finished_at"])
    result["summary"] = {key: result[key] for key in SUMMARY_KEYS}
    if module._diff:
        result["diff"] = _diff(params, seeded, stale, keep_before, keep_after)
    return result
