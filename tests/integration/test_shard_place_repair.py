"""gguf_shard_place repairs a corrupt shard on a nearly full disk, under a real SSHFS export (issue #20, item 4b).

The user's case, at a small scale and with real parts: the model directory is a small ext4 on a loop device; the
tiny model's shards are fetched by URL from nginx (Range, rate-limited: the fixtures of test_shard_place_url);
OpenSSH's sftp-server exports the directory to an sshfs mount (``-o passive,direct_io``: the two talk over pipes,
as the coordinator's mount talks to a worker's sftp-server over SSH), and a reader holds shard 1 open through the
mount, so that sftp-server holds the file open on the disk. The disk is then filled until less than a shard is
free, 16 bytes at offset 4096 are overwritten (the mtime changes), and the placement runs again.

sftp-server comes from Debian's openssh-sftp-server package. It needs only libc: when this machine has no
sftp-server, the test fetches the package with ``apt-get download`` and unpacks it under .cache (not installed).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import test_shard_place_url as url_tests
from test_shard_place_url import REPO, free_port, kill_tree, run_play, sha256, start_play, urls_of

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as sf

model = url_tests.model  # the tiny model and its nginx, as the URL tests have them
nginx = url_tests.nginx
SFTP_CACHE = REPO / ".cache" / "sftp-server"
DISK_MB = 24
MODEL_DIR = "models/tiny"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop mount, FUSE)"),
    pytest.mark.skipif(not shutil.which("sshfs"), reason="needs sshfs (apt-get install sshfs)"),
]


def sftp_server():
    """Path of an OpenSSH sftp-server binary: the system's, else one unpacked from Debian's package into .cache."""
    for path in ("/usr/lib/openssh/sftp-server", SFTP_CACHE / "usr/lib/openssh/sftp-server"):
        if os.access(path, os.X_OK):
            return str(path)
    debs = SFTP_CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(
        ["apt-get", "download", "openssh-sftp-server"], cwd=debs, capture_output=True, text=True, check=False
    )
    found = glob.glob(str(debs / "openssh-sftp-server_*.deb"))
    if got.returncode != 0 or not found:
        # A failure, not a skip: the open holder is what this test is about.
        pytest.fail(f"no sftp-server here and apt-get download openssh-sftp-server failed: {got.stderr[-2000:]}")
    subprocess.run(["dpkg-deb", "-x", found[0], str(SFTP_CACHE)], check=True)
    return str(SFTP_CACHE / "usr/lib/openssh/sftp-server")


@pytest.fixture
def disk(tmp_path):
    """A small ext4 on a loop device (no blocks reserved for root: full means full), unmounted afterwards."""
    image, mount = tmp_path / "disk.img", tmp_path / "disk"
    mount.mkdir()
    with image.open("wb") as handle:
        handle.truncate(DISK_MB << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@contextlib.contextmanager
def sshfs_export(directory, mountpoint):
    """sftp-server serving ``directory`` to an sshfs mount at ``mountpoint`` (as a worker exports its shards to the
    coordinator); yields sftp-server's process."""
    mountpoint.mkdir()
    to_server, from_client = os.pipe()
    to_client, from_server = os.pipe()
    server = subprocess.Popen([sftp_server()], stdin=to_server, stdout=from_server, stderr=subprocess.DEVNULL)
    client = subprocess.Popen(
        ["sshfs", "-f", "-o", "passive,direct_io", f"worker:{directory}", str(mountpoint)],
        stdin=to_client,
        stdout=from_client,
        stderr=subprocess.DEVNULL,
    )
    for fd in (to_server, from_client, to_client, from_server):
        os.close(fd)
    try:
        deadline = time.monotonic() + 60
        while not os.path.ismount(mountpoint):
            assert time.monotonic() < deadline and client.poll() is None, "the sshfs mount did not come up"
            time.sleep(0.1)
        yield server
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
        for proc in (client, server):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def open_files(pid):
    """The paths a process holds open (``(deleted)`` marks an unlinked file)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    return {os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)}


def fill(directory, leave):
    """Fill the filesystem of ``directory`` with one file until only ``leave`` bytes are free."""
    stats = os.statvfs(directory)
    extra = stats.f_bavail * stats.f_frsize - leave
    assert extra > 0
    fd = os.open(Path(directory) / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, extra)
    finally:
        os.close(fd)


def free(directory):
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


def damage(path, offset):
    """16 bytes at ``offset`` overwritten, the mtime changed: the case of the issue."""
    path.chmod(0o644)
    with path.open("r+b") as handle:
        handle.seek(offset)
        good = handle.read(16)
        handle.seek(offset)
        handle.write(bytes(byte ^ 0xFF for byte in good))
    return good


def task_for(model, nginx, **more):  # noqa: F811 - the fixtures' values
    return {
        "model_dir": f"{{{{ disk }}}}/{MODEL_DIR}",
        "coordinator": "a",
        "urls": urls_of(model, nginx),
        "reserve": "64k",
        "mount_root": "/mnt/llamarpc-test",
        **more,
    }


def gets(nginx):  # noqa: F811
    return nginx["access_log"].read_text(encoding="utf-8").count("GET ")


def corrupt_on_a_full_disk(tmp_path, model, disk):  # noqa: F811
    """Shard 1 placed from the controller file (fast: no rate limit; repairs take it from a URL), the disk filled until
    less than a quarter of the shard is free, 16 bytes at 4096 overwritten: ``(hosts, shard, path)``."""
    hosts = {"a": disk}
    task = {
        "model_dir": f"{{{{ disk }}}}/{MODEL_DIR}",
        "coordinator": "a",
        "files": [entry["path"] for entry in model["files"]],
        "reserve": "64k",
        "mount_root": "/mnt/llamarpc-test",
    }
    run_play(tmp_path, hosts, task)
    shard = model["files"][0]
    path = disk / MODEL_DIR / shard["name"]
    fill(disk, shard["size"] // 4)
    damage(path, 4096)
    return hosts, shard, path


def test_a_corrupt_shard_on_a_nearly_full_disk_held_open_by_sftp_server_is_repaired(tmp_path, model, nginx, disk):  # noqa: F811
    hosts = {"a": disk}
    _code, results, _out = run_play(tmp_path, hosts, task_for(model, nginx))  # fetched by URL
    shard = model["files"][0]
    path = disk / MODEL_DIR / shard["name"]
    assert sha256(path) == shard["sha256"]

    with (
        sshfs_export(disk / MODEL_DIR, tmp_path / "coordinator") as server,
        (tmp_path / "coordinator" / shard["name"]).open("rb") as reader,  # the coordinator's open shard
    ):
        assert reader.read(8)[:4] == b"GGUF"
        assert str(path) in open_files(server.pid)  # sftp-server holds the shard open on the worker's disk
        fill(disk, shard["size"] // 4)
        good = damage(path, 4096)
        inode, room = path.stat().st_ino, free(disk)
        assert room < shard["size"]  # no room for a second copy

        # Check mode and diff report the repair and do nothing.
        served = gets(nginx)
        _code, checked, _out = run_play(tmp_path, hosts, task_for(model, nginx), "--check", "--diff")
        assert f"repair {shard['name']} in place" in checked["a"]["actions"]
        assert any(f"{shard['name']}: repaired in its own inode" in part["after"] for part in checked["a"]["diff"])
        assert gets(nginx) == served and path.read_bytes()[4096:4112] != good

        _code, results, _out = run_play(tmp_path, hosts, task_for(model, nginx))
        assert results["a"]["refetched"] == [shard["name"]]
        assert results["a"]["actions"] == [f"repair {shard['name']} in place"]
        assert sha256(path) == shard["sha256"]
        assert path.stat().st_ino == inode and path.stat().st_nlink == 1
        assert (path.stat().st_mode & 0o777) == 0o444
        assert free(disk) > room - (64 << 10)  # the disk is not full afterwards: no blocks were double-held
        assert sf.deleted_but_open(str(disk / MODEL_DIR)) == []
        assert str(path) in open_files(server.pid)  # the same file, not a deleted one
        reader.seek(4096)
        assert reader.read(16) == good  # the coordinator reads the repaired bytes through sftp-server's open file
    leftovers = sorted(entry.name for entry in (disk / MODEL_DIR).iterdir() if entry.name.startswith(shard["name"]))
    assert leftovers == [shard["name"]]  # no .partial, no repair sidecar
    _code, results, _out = run_play(tmp_path, hosts, task_for(model, nginx))
    assert not results["a"]["changed"]


def test_a_killed_repair_resumes_by_range(tmp_path, model, nginx, disk):  # noqa: F811
    hosts, shard, path = corrupt_on_a_full_disk(tmp_path, model, disk)
    damage(path, shard["size"] - 4096)  # still corrupt when the run is killed midway
    inode = path.stat().st_ino
    # The llama_model role's way (the coordinator drives its candidates): check mode's diff names host and repair.
    _code, checked, _out = run_play(
        tmp_path, hosts, task_for(model, nginx, candidates=["a"]), "--check", "--diff", "--limit", "a"
    )
    repairs = [part for part in checked["a"]["diff"] if part["before_header"].startswith("a: ")]
    assert repairs and repairs[0]["after"] == f"{shard['name']}: repaired in its own inode\n", checked["a"]["diff"]
    assert checked["a"]["per_host"]["a"]["actions"] == [f"repair {shard['name']} in place"]
    proc = start_play(tmp_path, hosts, task_for(model, nginx))
    sidecar = Path(f"{path}{sf.REPAIR}")
    deadline = time.monotonic() + 300
    while (sf.read_json(str(sidecar)) or {}).get("done", 0) < (2 << 20):
        assert time.monotonic() < deadline, "the repair did not start"
        assert proc.poll() is None, "the play ended before it could be killed"
        time.sleep(0.05)
    kill_tree(proc)
    done = json.loads(sidecar.read_text(encoding="utf-8"))["done"]
    assert sha256(path) != shard["sha256"] and path.stat().st_ino == inode

    _code, results, _out = run_play(tmp_path, hosts, task_for(model, nginx))
    fetched = results["a"]["fetched"][0]
    assert fetched["resumed_from"] >= done and fetched["resumed_from"] + fetched["downloaded"] == shard["size"]
    assert sha256(path) == shard["sha256"] and path.stat().st_ino == inode and not sidecar.exists()
    assert " 206 " in Path(nginx["access_log"]).read_text(encoding="utf-8")


def test_no_reachable_source_keeps_the_corrupt_shard_and_says_what_to_do(tmp_path, model, disk):  # noqa: F811
    hosts, shard, path = corrupt_on_a_full_disk(tmp_path, model, disk)
    before, inode, room = path.read_bytes(), path.stat().st_ino, free(disk)
    dead = f"http://127.0.0.1:{free_port()}"
    urls = urls_of(model, {"base": dead})
    for entry, file in zip(urls, model["files"], strict=True):
        entry["size"] = file["size"]  # no HEAD on the controller: the host's own fetch is what fails
    task = {**task_for(model, {"base": dead}), "urls": urls, "retries": 0}
    code, results, _out = run_play(tmp_path, hosts, task, check=False)
    assert code
    message = results["a"]["msg"]
    assert f"The corrupt {shard['name']} was kept in place" in message, message
    assert f"Make {dead}/{shard['name']} reachable" in message, message
    assert path.read_bytes() == before and path.stat().st_ino == inode
    assert not Path(f"{path}{sf.PARTIAL}").exists() and free(disk) >= room - (64 << 10)
    print(message)
