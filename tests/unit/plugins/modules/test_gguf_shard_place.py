"""gguf_shard_place, host side: the module's stat and apply phases, and the download helpers.

A small in-process HTTP server on 127.0.0.1 serves bytes and honours Range (or, when told, ignores it, like
olah); it can also stop after N bytes to simulate a broken connection.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import socket
import stat
import threading

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _textfile
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as sf
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_place_run as place_run
from ansible_collections.llamarpc.cluster.plugins.modules import gguf_shard_facts, gguf_shard_place

DATA = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes
SHA = hashlib.sha256(DATA).hexdigest()
NAME = "m-00001-of-00001.gguf"


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "test"

    def log_message(self, *args):
        pass

    def do_GET(self):
        state = self.server.state
        state["auth"].append(self.headers.get("Authorization"))
        if state["redirect"]:
            self.send_response(302)
            self.send_header("Location", state["redirect"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        state["requests"].append(self.headers.get("Range"))
        start = 0
        if self.headers.get("Range") and state["range"]:
            start = int(self.headers["Range"].split("=")[1].rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(DATA) - 1}/{len(DATA)}")
        else:
            self.send_response(200)
        body = DATA[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"v1"')
        self.end_headers()
        cut = state["cut"].pop(0) if state["cut"] else None
        self.wfile.write(body if cut is None else body[:cut])
        if cut is not None:
            self.wfile.flush()
            self.connection.shutdown(2)


def start_server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.state = {"requests": [], "range": True, "cut": [], "auth": [], "redirect": None}
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture
def server():
    httpd = start_server()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def hub(server):
    """A second server (another origin) that redirects every request to ``server`` (like a hub to its CDN)."""
    httpd = start_server()
    httpd.state["redirect"] = url_of(server)
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url_of(server):
    return f"http://127.0.0.1:{server.server_address[1]}/{NAME}"


def shard(server, **more):
    return {"name": NAME, "size": len(DATA), "sha256": SHA, "etag": '"v1"', "url": url_of(server), **more}


def apply_args(tmp_path, shards, **more):
    return {
        "model_dir": str(tmp_path / "models"),
        "shards": shards,
        "retries": 1,
        **more,
    }


def facts_of(outcome):
    """The gguf_shard_dir fact a gguf_shard_facts run returned."""
    return outcome.result["ansible_facts"]["gguf_shard_dir"]


def test_stat_reports_free_space_and_files(run_module, tmp_path):
    (tmp_path / NAME).write_bytes(b"x" * 10)
    (tmp_path / "m-00002-of-00002.gguf.partial").write_bytes(b"y" * 5)
    report = facts_of(run_module(gguf_shard_facts, {"model_dir": str(tmp_path)}))
    assert report["complete"] == {NAME: 10}
    assert report["partial_bytes"] == 5
    assert report["free"] > 0
    missing = facts_of(run_module(gguf_shard_facts, {"model_dir": str(tmp_path / "not/yet")}))
    assert missing["exists"] is False and missing["free"] > 0


def test_stat_reports_the_tensor_cache_on_the_model_filesystem(run_module, tmp_path):
    (tmp_path / "models").mkdir()
    rpc = tmp_path / "cache/rpc"
    rpc.mkdir(parents=True)
    (rpc / "0123456789abcdef").write_bytes(b"t" * 40)
    args = {"model_dir": str(tmp_path / "models"), "tensor_cache": str(rpc.parent)}
    report = facts_of(run_module(gguf_shard_facts, args))
    assert report["tensor_cache"] == {"path": str(rpc.parent), "same_filesystem": True, "cached": 40}
    plain = facts_of(run_module(gguf_shard_facts, {"model_dir": str(tmp_path / "models")}))
    assert "tensor_cache" not in plain


def test_relative_model_dir_is_refused(run_module):
    outcome = run_module(gguf_shard_facts, {"model_dir": "models"})
    assert outcome.failed and "absolute path" in outcome.result["msg"]


def test_four_runs_check_apply_apply_check(run_module, server, tmp_path):
    args = apply_args(tmp_path, [shard(server)])
    first = run_module(gguf_shard_place, args, check_mode=True)
    assert first.result["changed"] and not (tmp_path / "models").exists()
    second = run_module(gguf_shard_place, args)
    assert second.result["changed"] and second.result["fetched"][0]["downloaded"] == len(DATA)
    path = tmp_path / "models" / NAME
    assert path.read_bytes() == DATA and (path.stat().st_mode & 0o777) == 0o444
    assert not (tmp_path / "models" / f"{NAME}.partial").exists()
    manifest = json.loads((tmp_path / "models" / sf.MANIFEST).read_text(encoding="utf-8"))
    assert manifest[NAME]["sha256"] == SHA
    third = run_module(gguf_shard_place, args)
    fourth = run_module(gguf_shard_place, args, check_mode=True)
    assert not third.result["changed"] and not fourth.result["changed"]
    assert third.result["verified"] == []  # the manifest spared the hash
    full = run_module(gguf_shard_place, {**args, "verify": "full"})
    assert not full.result["changed"] and full.result["verified"] == [NAME]


def test_resume_after_broken_connection(server, tmp_path):
    server.state["cut"] = [300_000]
    partial = str(tmp_path / f"{NAME}.partial")
    resumed_from, downloaded = sf.download(url_of(server), partial, shard(server), retries=2)
    assert (resumed_from, downloaded) == (0, len(DATA))
    assert server.state["requests"] == [None, "bytes=300000-"]


def test_resume_across_processes_uses_the_sidecar(server, tmp_path):
    partial = tmp_path / f"{NAME}.partial"
    partial.write_bytes(DATA[:1000])
    sf.write_json(str(tmp_path / f"{NAME}.partial.json"), {"size": len(DATA), "sha256": SHA, "etag": '"v1"'})
    assert sf.download(url_of(server), str(partial), shard(server)) == (1000, len(DATA) - 1000)
    assert sf.finish(str(tmp_path), shard(server), str(partial))["sha256"] == SHA


def test_changed_etag_starts_over(server, tmp_path):
    partial = tmp_path / f"{NAME}.partial"
    partial.write_bytes(b"old bytes")
    sf.write_json(str(tmp_path / f"{NAME}.partial.json"), {"size": len(DATA), "sha256": SHA, "etag": '"v0"'})
    assert sf.download(url_of(server), str(partial), shard(server)) == (0, len(DATA))
    assert partial.read_bytes() == DATA


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    server.state["range"] = False
    partial = tmp_path / f"{NAME}.partial"
    partial.write_bytes(DATA[:5000])
    sf.write_json(str(tmp_path / f"{NAME}.partial.json"), {"size": len(DATA), "sha256": SHA, "etag": '"v1"'})
    sf.download(url_of(server), str(partial), shard(server))
    assert partial.read_bytes() == DATA


def test_checksum_mismatch_discards_and_changes_nothing(run_module, server, tmp_path):
    outcome = run_module(gguf_shard_place, apply_args(tmp_path, [shard(server, sha256="0" * 64)]))
    assert outcome.failed and "checksum mismatch" in outcome.result["msg"]
    left = sorted(os.listdir(tmp_path / "models"))
    assert NAME not in left and f"{NAME}.partial" not in left


@pytest.fixture
def corrupted(run_module, server, tmp_path):
    """The shard placed, then overwritten with as many wrong bytes: (apply arguments, its path)."""
    args = apply_args(tmp_path, [shard(server)])
    run_module(gguf_shard_place, args)
    path = tmp_path / "models" / NAME
    path.chmod(0o644)
    path.write_bytes(b"z" * len(DATA))
    return args, path


def test_corrupt_file_is_fetched_again(run_module, corrupted):
    args, path = corrupted
    outcome = run_module(gguf_shard_place, args)
    assert outcome.result["refetched"] == [NAME] and path.read_bytes() == DATA


def damage(path, *spots):
    """Overwrite 16 bytes at each offset (``-N``: N bytes from the end); the mtime changes, as after a stray write."""
    path.chmod(0o644)
    with path.open("r+b") as handle:
        for spot in spots:
            handle.seek(spot if spot >= 0 else len(DATA) + spot)
            handle.write(b"\xa5" * 16)


@pytest.fixture
def placed(run_module, server, tmp_path):
    """The shard placed and verified: (apply arguments, its path)."""
    args = apply_args(tmp_path, [shard(server)])
    assert not run_module(gguf_shard_place, args).failed
    return args, tmp_path / "models" / NAME


@pytest.fixture
def no_room(monkeypatch):
    """The model filesystem has less room than a second copy of the shard needs."""

    real = shutil.disk_usage

    def full(path):
        return real(path)._replace(free=len(DATA) - 1)

    monkeypatch.setattr(place_run.shutil, "disk_usage", full)


def test_a_corrupt_shard_is_repaired_in_its_own_inode_by_range(run_module, server, placed, no_room):
    args, path = placed
    damage(path, 4096)
    inode = path.stat().st_ino
    with open(path, "rb") as held:  # sftp-server (or an mmap) holding the file open
        server.state["requests"].clear()
        outcome = run_module(gguf_shard_place, args)
        assert not outcome.failed, outcome.result
        held.seek(4096)
        assert held.read(16) == DATA[4096:4112]  # the holder's open file reads the repaired bytes
    assert outcome.result["refetched"] == [NAME]
    assert outcome.result["actions"] == [f"repair {NAME} in place"]
    assert outcome.result["repaired"] == [{"name": NAME, "rewritten": sf.CHUNK}]  # only the damaged block written
    assert path.read_bytes() == DATA and path.stat().st_ino == inode and path.stat().st_nlink == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert sorted(os.listdir(path.parent)) == sorted([NAME, sf.MANIFEST, sf.LOCK])  # no .partial, no sidecar
    assert server.state["requests"] == [None]
    again = run_module(gguf_shard_place, args)
    assert not again.result["changed"] and again.result["verified"] == []


def test_check_mode_and_diff_report_the_repair_and_do_nothing(run_module, server, placed, no_room):
    args, path = placed
    damage(path, 4096)
    before = path.read_bytes()
    server.state["requests"].clear()
    outcome = run_module(gguf_shard_place, {**args, "_ansible_diff": True}, check_mode=True)
    assert outcome.result["changed"] and outcome.result["actions"] == [f"repair {NAME} in place"]
    assert NAME in outcome.result["diff"]["before"] and "corrupt" in outcome.result["diff"]["before"]
    assert outcome.result["diff"]["after"] == f"{NAME}: repaired in its own inode\n"
    assert path.read_bytes() == before and server.state["requests"] == []


def test_an_interrupted_repair_resumes_where_it_stopped(run_module, server, placed, monkeypatch):
    args, path = placed
    monkeypatch.setattr(sf, "CHUNK", 64 << 10)
    monkeypatch.setattr(sf, "PROGRESS_EVERY", 0.0)  # a checkpoint after every block
    damage(path, 4096, -100)
    server.state["cut"] = [300_000]
    failed = run_module(gguf_shard_place, {**args, "retries": 0})
    assert failed.failed and "kept in place" in failed.result["msg"] and "resumes" in failed.result["msg"]
    assert sf.read_json(str(path) + sf.REPAIR)["done"] == 300_000
    assert NAME not in sf.read_json(str(path.parent / sf.MANIFEST))  # a half-repaired file is never trusted
    checked = run_module(gguf_shard_place, args, check_mode=True)
    assert checked.result["actions"] == [f"repair {NAME} in place (resume from 300000)"]
    server.state["requests"].clear()
    done = run_module(gguf_shard_place, args)
    assert not done.failed, done.result
    assert server.state["requests"] == ["bytes=300000-"]
    assert done.result["fetched"][0]["resumed_from"] == 300_000
    assert done.result["fetched"][0]["downloaded"] == len(DATA) - 300_000
    assert path.read_bytes() == DATA and not os.path.exists(str(path) + sf.REPAIR)


def test_a_resume_point_that_no_longer_holds_is_repaired_from_the_start(run_module, server, placed):
    args, path = placed
    damage(path, 4096)
    sf.write_json(str(path) + sf.REPAIR, {"size": len(DATA), "sha256": SHA, "etag": '"v1"', "done": 8192})
    server.state["requests"].clear()
    done = run_module(gguf_shard_place, args)
    assert not done.failed, done.result
    assert server.state["requests"] == ["bytes=8192-", None]
    assert path.read_bytes() == DATA


def test_an_unreachable_source_keeps_the_corrupt_shard_and_says_what_to_do(run_module, tmp_path, placed, no_room):
    args, path = placed
    damage(path, 4096)
    before, inode = path.read_bytes(), path.stat().st_ino
    dead = {**args["shards"][0], "url": f"http://127.0.0.1:{closed_port()}/{NAME}"}
    outcome = run_module(gguf_shard_place, apply_args(tmp_path, [dead], retries=0))
    assert outcome.failed
    message = outcome.result["msg"]
    assert "kept in place" in message and f"Make {dead['url']} reachable" in message, message
    assert path.read_bytes() == before and path.stat().st_ino == inode
    assert not os.path.exists(str(path) + sf.PARTIAL)


def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_a_source_that_does_not_match_its_sha256_is_named_and_never_trusted(run_module, server, tmp_path, placed):
    args, path = placed
    damage(path, 4096)
    wrong = apply_args(tmp_path, [shard(server, sha256="0" * 64)])
    outcome = run_module(gguf_shard_place, wrong)
    assert outcome.failed and "the source's bytes have sha256 " + SHA in outcome.result["msg"]
    assert NAME not in (sf.read_json(str(path.parent / sf.MANIFEST)) or {})
    assert run_module(gguf_shard_place, wrong).result["refetched"] == [NAME]  # still not trusted


def test_a_corrupt_shard_of_the_wrong_size_is_kept_when_its_download_fails(run_module, server, tmp_path, placed):
    path = placed[1]
    path.chmod(0o644)
    path.write_bytes(b"z" * 100)
    outcome = run_module(gguf_shard_place, apply_args(tmp_path, [shard(server, sha256="0" * 64)]))
    assert outcome.failed and "checksum mismatch" in outcome.result["msg"] and "was kept" in outcome.result["msg"]
    assert path.read_bytes() == b"z" * 100  # replaced only by a verified copy


def test_a_corrupt_shard_of_the_wrong_size_without_room_changes_nothing(run_module, server, placed, monkeypatch):
    args, path = placed
    path.chmod(0o644)
    path.write_bytes(b"z" * 100)
    full = shutil.disk_usage(path.parent)._replace(free=50)
    monkeypatch.setattr(place_run.shutil, "disk_usage", lambda _: full)
    server.state["requests"].clear()
    outcome = run_module(gguf_shard_place, args)
    assert (
        outcome.failed
        and "more room is needed" in outcome.result["msg"]
        and "Nothing was changed" in (outcome.result["msg"])
    )
    assert path.read_bytes() == b"z" * 100 and server.state["requests"] == []


def test_a_corrupt_shard_of_the_wrong_size_grows_in_place_when_only_that_fits(run_module, server, placed, monkeypatch):
    args, path = placed
    path.chmod(0o644)
    path.write_bytes(DATA[:1000])
    inode = path.stat().st_ino
    full = shutil.disk_usage(path.parent)._replace(free=len(DATA) - 500)
    monkeypatch.setattr(place_run.shutil, "disk_usage", lambda _: full)
    outcome = run_module(gguf_shard_place, args)
    assert outcome.result["actions"] == [f"repair {NAME} in place"]
    assert path.read_bytes() == DATA and path.stat().st_ino == inode


def test_a_corrupt_shard_from_a_local_source_is_rewritten_in_its_own_blocks(run_module, tmp_path, no_room):
    source = tmp_path / "source.gguf"
    source.write_bytes(DATA)
    models = tmp_path / "models"
    models.mkdir()
    path = models / NAME
    path.write_bytes(b"z" * len(DATA))
    inode = path.stat().st_ino
    with open(path, "rb") as held:  # llama-server holding the file open, as in the cluster
        entry = {"name": NAME, "size": len(DATA), "sha256": SHA, "src": str(source)}
        outcome = run_module(gguf_shard_place, apply_args(tmp_path, [entry]))
        assert not outcome.failed, outcome.result
        assert held.read(4) == DATA[:4]  # the holder sees the good bytes now
    assert outcome.result["refetched"] == [NAME]
    assert path.read_bytes() == DATA and path.stat().st_ino == inode
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert not (models / (NAME + ".partial")).exists()


def test_deleted_files_held_open_are_named_in_the_message(tmp_path):
    victim = tmp_path / "gone.gguf"
    victim.write_bytes(b"x" * 5000)
    with open(victim, "rb"):
        victim.unlink()
        held = sf.deleted_but_open(str(tmp_path))
        hint = place_run.room_hint(str(tmp_path))
    assert held == [{"pid": os.getpid(), "command": held[0]["command"], "path": str(victim), "size": 5000}]
    assert str(victim) in hint and f"pid {os.getpid()}" in hint and "Restart" in hint
    assert sf.deleted_but_open(str(tmp_path)) == []


def test_links_and_stale_partials(run_module, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "m-00002-of-00002.gguf.partial").write_bytes(b"p")
    args = {
        "model_dir": str(models),
        "links": {"m-00002-of-00002.gguf": "/mnt/llamarpc/b/m-00002-of-00002.gguf"},
        "drop": ["m-00002-of-00002.gguf"],
    }
    checked = run_module(gguf_shard_place, args, check_mode=True)
    assert checked.result["changed"] and (models / "m-00002-of-00002.gguf.partial").exists()
    done = run_module(gguf_shard_place, args)
    assert done.result["changed"]
    assert os.readlink(models / "m-00002-of-00002.gguf") == "/mnt/llamarpc/b/m-00002-of-00002.gguf"
    assert not (models / "m-00002-of-00002.gguf.partial").exists()
    assert not run_module(gguf_shard_place, args).result["changed"]


def test_refuses_to_replace_a_file_with_a_link(run_module, tmp_path):
    (tmp_path / NAME).write_bytes(b"data")
    outcome = run_module(gguf_shard_place, {"model_dir": str(tmp_path), "links": {NAME: "/x"}})
    assert outcome.failed and "is not a symlink" in outcome.result["msg"]
    assert (tmp_path / NAME).read_bytes() == b"data"


def test_controller_file_without_copy_asks_for_it(run_module, tmp_path):
    entry = {"name": NAME, "size": len(DATA), "sha256": SHA}
    outcome = run_module(gguf_shard_place, apply_args(tmp_path, [entry]))
    assert outcome.result["need_source"] == [NAME]
    source = tmp_path / "copied"
    source.write_bytes(DATA)
    outcome = run_module(gguf_shard_place, apply_args(tmp_path, [{**entry, "src": str(source)}]))
    assert outcome.result["changed"] and (tmp_path / "models" / NAME).read_bytes() == DATA


def test_progress_file(tmp_path):
    progress = sf.Progress(str(tmp_path / sf.PROGRESS), NAME, 100, 10)
    progress.update(55, force=True)
    data = json.loads((tmp_path / sf.PROGRESS).read_text(encoding="utf-8"))
    assert data["done"] == 55 and data["percent"] == 55.0 and data["resumed_from"] == 10


def test_a_second_writer_is_refused(tmp_path):
    held = sf.lock_dir(str(tmp_path))
    try:
        with pytest.raises(sf.FetchError, match=f"pid {os.getpid()}"):
            sf.lock_dir(str(tmp_path), wait=0.3)
    finally:
        held.close()


def test_token_stays_with_its_origin_across_a_redirect(server, hub, tmp_path):
    partial = tmp_path / f"{NAME}.partial"
    partial.write_bytes(DATA[:10])
    sf.write_json(str(tmp_path / f"{NAME}.partial.json"), {"size": len(DATA), "sha256": SHA, "etag": '"v1"'})
    headers = {"Authorization": "Bearer secret"}
    sf.download(url_of(hub), str(partial), shard(hub), headers=headers)
    assert partial.read_bytes() == DATA
    assert hub.state["auth"] == ["Bearer secret"]
    assert server.state["auth"] == [None]
    assert server.state["requests"] == ["bytes=10-"]


def test_the_hub_token_goes_only_with_the_hubs_shards(run_module, server, tmp_path):
    """hf_token is sent with a shard marked hub, never with a plain URL's (a token the controller found must not leak
    to another origin)."""
    plain = {**apply_args(tmp_path, [shard(server)]), "hf_token": "hf_secret"}
    assert not run_module(gguf_shard_place, plain).failed
    assert server.state["auth"] == [None]
    server.state["auth"].clear()
    (tmp_path / "models" / NAME).chmod(0o644)
    (tmp_path / "models" / NAME).unlink()
    hub_shard = {**apply_args(tmp_path, [shard(server, hub=True)]), "hf_token": "hf_secret"}
    assert not run_module(gguf_shard_place, hub_shard).failed
    assert server.state["auth"] == ["Bearer hf_secret"]


USER = (54321, 54322)  # a uid and gid nobody has: the test runs as root (the module does, on the hosts)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root, like the module on a host")
def test_a_model_directory_in_a_users_home_keeps_the_users_files(run_module, server, tmp_path):
    home = tmp_path / "home" / "pool" / "work"
    home.mkdir(parents=True)
    os.chown(home, *USER)
    models = home / "models"
    args = {
        **apply_args(tmp_path, [shard(server)]),
        "model_dir": str(models),
        "shards": [shard(server)],
        "links": {"m-00002.gguf": "/mnt/x/m-00002.gguf"},
    }
    assert run_module(gguf_shard_place, args).result["changed"]
    # The directory made in pool's tree is pool's; so is every file and link in it, never root's.
    assert sf.owner_of(models) == USER
    written = [models / NAME, models / sf.MANIFEST, models / sf.LOCK, models / "m-00002.gguf"]
    assert {path.name: sf.owner_of(path) for path in written} == {path.name: USER for path in written}
    assert (models / NAME).read_bytes() == DATA
    assert not run_module(gguf_shard_place, args).result["changed"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root, like the module on a host")
def test_a_shard_of_another_owner_is_given_to_the_directorys_owner(run_module, server, tmp_path):
    args = apply_args(tmp_path, [shard(server)])
    run_module(gguf_shard_place, args)
    models = tmp_path / "models"
    os.chown(models, *USER)  # the directory was root's (the old layout) and is now pool's
    checked = run_module(gguf_shard_place, args, check_mode=True)
    assert checked.result["changed"] and f"chown {NAME} {USER[0]}:{USER[1]}" in checked.result["actions"]
    assert sf.owner_of(models / NAME) == (0, 0)
    assert run_module(gguf_shard_place, args).result["changed"]
    assert sf.owner_of(models / NAME) == USER
    assert not run_module(gguf_shard_place, args).result["changed"]


def test_a_root_owned_model_directory_keeps_root_files(run_module, server, tmp_path):
    args = apply_args(tmp_path, [shard(server)])
    run_module(gguf_shard_place, args)
    me = (os.geteuid(), os.getegid())
    assert sf.owner_of(tmp_path / "models") == me and sf.owner_of(tmp_path / "models" / NAME) == me


def test_a_repair_sidecar_makes_the_shard_hashed_whatever_the_manifest_says(run_module, placed):
    """A repair killed before the manifest lost its entry (or with the mtime put back) is not trusted."""
    args, path = placed
    sf.write_json(str(path) + sf.REPAIR, {"size": len(DATA), "sha256": SHA, "etag": '"v1"', "done": 4096})
    outcome = run_module(gguf_shard_place, args)
    assert outcome.result["verified"] == [NAME] and not os.path.exists(str(path) + sf.REPAIR)
    assert outcome.result["actions"] == [f"remove {NAME}{sf.REPAIR} (the shard verifies)"]
    assert run_module(gguf_shard_place, args).result["verified"] == []


def test_each_shards_last_verification_goes_to_its_metrics_file(run_module, server, tmp_path):
    """A fetched shard counts as verified; a quick rerun that hashes nothing keeps the record; a corruption found by a
    full verification shows as result 0 and one more in the count, a whole shard again as 1; check mode writes
    nothing; writing the metrics is no change."""
    metrics = tmp_path / "llamarpc_shards.prom"
    args = apply_args(tmp_path, [shard(server)], metrics_file=str(metrics))
    run_module(gguf_shard_place, args, check_mode=True)
    assert not metrics.exists()
    run_module(gguf_shard_place, args)

    def found():
        return _textfile.parse(metrics.read_text())

    first = found()
    assert first["llamarpc_shard_verify_ok"] == [({"shard": NAME}, 1.0)]
    assert first["llamarpc_shard_corrupt_found_total"] == [({"shard": NAME}, 0.0)]
    quick = run_module(gguf_shard_place, args)
    assert not quick.result["changed"] and found() == first  # nothing hashed: the last verification stands
    path = tmp_path / "models" / NAME
    path.chmod(0o644)
    path.write_bytes(b"z" * len(DATA))
    run_module(gguf_shard_place, {**args, "verify": "full"})
    corrupt = found()
    assert corrupt["llamarpc_shard_verify_ok"] == [({"shard": NAME}, 0.0)]
    assert corrupt["llamarpc_shard_corrupt_found_total"] == [({"shard": NAME}, 1.0)]
    again = run_module(gguf_shard_place, {**args, "verify": "full"})
    assert not again.result["changed"] and found()["llamarpc_shard_verify_ok"] == [({"shard": NAME}, 1.0)]
    assert found()["llamarpc_shard_corrupt_found_total"] == [({"shard": NAME}, 1.0)]
