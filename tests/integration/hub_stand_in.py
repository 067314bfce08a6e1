"""A stand-in for the Hugging Face Hub on loopback: a public model repository, served the way huggingface_hub 2.x
expects the real hub to serve it, and its files' bytes from a second origin the way the hub's CDN does.

Test support, not a hub: it answers only what the collection uses (plugins/action/gguf_shard_plan.py on the
controller, plugins/module_utils/shards/_shard_fetch.py on the hosts), modelled on huggingface_hub's client code
(hf_api.py ``list_repo_tree``, file_download.py ``get_hf_file_metadata`` and ``hf_hub_url``):

- ``GET /api/models/REPO/tree/REV[/PATH]?recursive=&expand=``: a JSON list of ``{"type": "file", "oid", "size",
  "path", "lfs": {"oid": sha256, "size", "pointerSize"}}`` (and ``"directory"`` entries, which this flat repo has
  none of). An unknown repository or revision answers 404 with ``X-Error-Code`` RepoNotFound / RevisionNotFound.
- ``HEAD|GET /REPO/resolve/REV/FILE`` (REV a branch or the commit): for an LFS file a 302 to the CDN origin with
  ``X-Repo-Commit``, ``X-Linked-Etag`` (the quoted sha256), ``X-Linked-Size``, ``ETag`` (the pointer's git blob id)
  and ``Location``; huggingface_hub does not follow a redirect to another origin and reads the metadata from the
  302 itself. A non-LFS file (README.md) is served directly (200, ``ETag`` its git blob id).
- ``HEAD|GET /blobs/SHA256`` on the CDN origin: the bytes, honouring ``Range: bytes=A-[B]`` with 206 and
  ``Content-Range: bytes A-B/SIZE`` (416 beyond the end), ``Accept-Ranges: bytes``, like the hub's storage.

Not served: xet (no ``X-Xet-Hash``: clients fall back to plain HTTP), ``paths-info``, ``revision`` (model_info),
uploads, private repositories (a token is accepted and recorded, never required).

Controls for tests: ``stall_after(name, n)`` makes the next GET of that file send ``n`` bytes of its body, then hold
the connection until ``release()`` (a download interrupted mid-file; the test kills the client meanwhile);
``cut_after(name, n)`` closes the next GET's connection after ``n`` body bytes; ``honour_range = False`` makes the CDN
answer every GET with the whole file (200), as olah does. ``log`` holds one entry per request: ``{"origin": "hub" |
"cdn", "method", "path", "range" (the Range header or None), "status", "sent" (body bytes), "auth" (whether an
Authorization header came)}``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 64 << 10
RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


def git_blob_id(data):
    """The git object id of a blob with ``data`` (what the hub calls a file's ``oid``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def lfs_pointer(sha256, size):
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


class HubStandIn:
    """A public repository ``repo_id`` holding ``files`` (``[{"name", "path", "size", "sha256"}]``, all LFS) and a
    README, on two loopback origins: the hub (``endpoint``) and its CDN. Use as a context manager."""

    def __init__(self, repo_id, files, revision="main"):
        self.repo_id = repo_id
        self.revision = revision
        self.files = {entry["name"]: dict(entry) for entry in files}
        self.by_sha = {entry["sha256"]: entry for entry in self.files.values()}
        self.readme = f"# {repo_id}\n\nA stand-in repository for tests.\n".encode()
        self.commit = hashlib.sha1(  # a fixed commit id for this content
            json.dumps(sorted((e["name"], e["sha256"]) for e in files)).encode(), usedforsecurity=False
        ).hexdigest()
        self.honour_range = True
        self.log = []
        self._lock = threading.Lock()
        self._faults = {}  # name -> ("stall" | "cut", bytes)
        self._release = threading.Event()
        self.stalled = threading.Event()  # set once a stalled GET has sent its bytes
        self._stall_done = threading.Event()
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "hub"))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "cdn"))
        self.hub.daemon_threads = self.cdn.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_base = f"http://127.0.0.1:{self.cdn.server_address[1]}"
        self._threads = []

    # -- lifecycle --------------------------------------------------------------------------------------------

    def __enter__(self):
        for server in (self.hub, self.cdn):
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc):
        self.release()
        for server in (self.hub, self.cdn):
            server.shutdown()
            server.server_close()

    # -- test controls ----------------------------------------------------------------------------------------

    def stall_after(self, name, size):
        """The next GET of file ``name`` sends ``size`` body bytes, then waits for ``release()`` and drops."""
        self._release.clear()
        self.stalled.clear()
        self._stall_done.clear()
        self._faults[name] = ("stall", int(size))

    def cut_after(self, name, size):
        """The next GET of file ``name`` closes its connection after ``size`` body bytes."""
        self._faults[name] = ("cut", int(size))

    def release(self):
        """Let a stalled GET end (its connection is closed); returns once its handler has finished."""
        self._release.set()
        if self.stalled.is_set():
            self._stall_done.wait(30)

    def requests(self, origin=None, method=None):
        with self._lock:
            return [
                entry
                for entry in self.log
                if (origin is None or entry["origin"] == origin) and (method is None or entry["method"] == method)
            ]

    def clear_log(self):
        with self._lock:
            self.log.clear()

    # -- what the hub answers ---------------------------------------------------------------------------------

    def tree(self):
        entries = [
            {"type": "file", "oid": git_blob_id(self.readme), "size": len(self.readme), "path": "README.md"},
        ]
        for name in sorted(self.files):
            entry = self.files[name]
            pointer = lfs_pointer(entry["sha256"], entry["size"])
            entries.append(
                {
                    "type": "file",
                    "oid": git_blob_id(pointer),
                    "size": entry["size"],
                    "path": name,
                    "lfs": {"oid": entry["sha256"], "size": entry["size"], "pointerSize": len(pointer)},
                }
            )
        return entries

    def known_revision(self, revision):
        return revision in {self.revision, self.commit}

    def _record(self, entry):
        with self._lock:
            self.log.append(entry)

    def _fault(self, name):
        with self._lock:
            return self._faults.pop(name, None)


def _handler(hub, origin):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "hub-stand-in"

        def log_message(self, format, *args):  # noqa: A002 - the base class's signature
            return  # requests go to hub.log, not to stderr

        def do_HEAD(self):  # noqa: N802 - http.server's naming
            self._serve(head=True)

        def do_GET(self):  # noqa: N802 - http.server's naming
            self._serve(head=False)

        def _serve(self, head):
            self.entry = {
                "origin": origin,
                "method": self.command,
                "path": self.path,
                "range": self.headers.get("Range"),
                "status": None,
                "sent": 0,
                "auth": self.headers.get("Authorization") is not None,
            }
            hub._record(self.entry)  # logged in arrival order, completed as the reply goes out
            try:
                if origin == "cdn":
                    self._cdn(head)
                else:
                    self._hub(head)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        # -- hub origin ---------------------------------------------------------------------------------------

        def _hub(self, head):
            url = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(url.path)
            prefix = f"/api/models/{hub.repo_id}/tree/"
            if path.startswith("/api/models/"):
                if not path.startswith(prefix):
                    return self._error(404, "RepoNotFound", "Repository not found")
                revision, _slash, sub = path[len(prefix) :].partition("/")
                if not hub.known_revision(revision):
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                entries = [entry for entry in hub.tree() if not sub or entry["path"].startswith(sub + "/")]
                return self._json(200, entries, head)
            resolve = f"/{hub.repo_id}/resolve/"
            if not path.startswith(resolve):
                return self._error(404, "RepoNotFound", "Repository not found")
            revision, _slash, name = path[len(resolve) :].partition("/")
            if not hub.known_revision(revision):
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            if name == "README.md":
                return self._body(200, hub.readme, head, {"ETag": f'"{git_blob_id(hub.readme)}"'})
            entry = hub.files.get(name)
            if entry is None:
                return self._error(404, "EntryNotFound", f"{name} does not exist on {revision}")
            pointer = lfs_pointer(entry["sha256"], entry["size"])
            headers = {
                "Location": f"{hub.cdn_base}/blobs/{entry['sha256']}?repo={urllib.parse.quote(hub.repo_id, safe='')}",
                "X-Repo-Commit": hub.commit,
                "X-Linked-Etag": f'"{entry["sha256"]}"',
                "X-Linked-Size": str(entry["size"]),
                "ETag": f'"{git_blob_id(pointer)}"',
            }
            return self._body(302, b"", head, headers)

        # -- CDN origin -----------------------------------------------------------------------------------------

        def _cdn(self, head):
            url = urllib.parse.urlsplit(self.path)
            sha = url.path.rpartition("/")[2]
            entry = hub.by_sha.get(sha)
            if not url.path.startswith("/blobs/") or entry is None:
                return self._error(404, "EntryNotFound", "no such object")
            size = entry["size"]
            start, end, status = 0, size - 1, 200
            wanted = self.headers.get("Range")
            if wanted and hub.honour_range:
                match = RANGE_RE.match(wanted.strip())
                if match:
                    start = int(match.group(1))
                    end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
                    if start >= size or start > end:
                        return self._body(416, b"", head, {"Content-Range": f"bytes */{size}"})
                    status = 206
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Length": str(end - start + 1),
                "Accept-Ranges": "bytes",
                "ETag": f'"{sha}"',
            }
            if status == 206:
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            self._head(status, headers)
            if head:
                return None
            fault = hub._fault(entry["name"])
            limit = end - start + 1 if fault is None else min(fault[1], end - start + 1)
            with open(entry["path"], "rb") as handle:
                handle.seek(start)
                while self.entry["sent"] < limit:
                    block = handle.read(min(CHUNK, limit - self.entry["sent"]))
                    if not block:
                        break
                    self.wfile.write(block)
                    self.entry["sent"] += len(block)
            self.wfile.flush()
            if fault is not None:
                self.close_connection = True
                if fault[0] == "stall":
                    hub.stalled.set()
                    hub._release.wait()
                    hub._stall_done.set()
            return None

        # -- replies ----------------------------------------------------------------------------------------

        def _head(self, status, headers):
            self.entry["status"] = status
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()

        def _body(self, status, data, head, headers=None):
            self._head(status, {"Content-Length": str(len(data)), **(headers or {})})
            if not head and data:
                self.wfile.write(data)
                self.entry["sent"] = len(data)

        def _json(self, status, data, head):
            self._body(status, json.dumps(data).encode(), head, {"Content-Type": "application/json"})

        def _error(self, status, code, message):
            data = json.dumps({"error": message}).encode()
            headers = {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}
            self._body(status, data, self.command == "HEAD", headers)

    return Handler


def serve_forever(repo_id, directory):  # pragma: no cover - a manual aid: python hub_stand_in.py REPO DIR
    """Serve every ``*.gguf`` of ``directory`` as ``repo_id`` until interrupted; prints the endpoint."""
    files = []
    for path in sorted(Path(directory).glob("*.gguf")):
        data = path.read_bytes()
        files.append(
            {"name": path.name, "path": str(path), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        )
    with HubStandIn(repo_id, files) as hub:
        print(f"HF_ENDPOINT={hub.endpoint}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    import sys

    serve_forever(sys.argv[1], sys.argv[2])
