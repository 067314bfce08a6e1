"""The worker's tensor-cache verifier: a file stays only if it is a regular file named by the FNV-1a hash of its
bytes (as llama.cpp names it) and larger than the 10 MiB llama.cpp caches from; the C++ helper hashes alike."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import worker_unit

from ansible_collections.llamarpc.cluster.plugins.module_utils.model._model_profile import CACHE_THRESHOLD_BYTES

FILES = Path(__file__).resolve().parents[3] / "roles/llama_rpc_worker/files"
spec = importlib.util.spec_from_file_location("llamarpc_cache_verify", FILES / "llamarpc_cache_verify.py")
verify_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verify_mod)

THRESHOLD = 64 * 1024  # instead of 10 MiB, so that hashing in Python stays quick here
SIZE = THRESHOLD + 4096


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    monkeypatch.setattr(verify_mod, "HASH_THRESHOLD", THRESHOLD)


def test_the_threshold_is_llama_cpps():
    # ggml-rpc.cpp: HASH_THRESHOLD = 10 * 1024 * 1024, and only tensors of more bytes are cached
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    assert fresh.HASH_THRESHOLD == 10 * 1024 * 1024
    # The verifier runs on the host without the collection: its copy must stay the collection's one figure.
    assert fresh.HASH_THRESHOLD == CACHE_THRESHOLD_BYTES


@pytest.fixture(scope="module")
def hasher(tmp_path_factory):
    if not shutil.which("g++"):
        pytest.fail("no g++ to build the helper (tools/setup.sh installs it): the fast path would go untested")
    return worker_unit.build_hasher(tmp_path_factory.mktemp("hasher"))


def entry(directory, data):
    """A cache file named as llama.cpp names it (the hash computed here in Python)."""
    path = directory / f"{verify_mod.fnv1a(data):016x}"
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def tensor():
    return os.urandom(SIZE)


def test_fnv1a_matches_the_published_test_vectors():
    # FNV-1a 64 of "", "a" and "foobar" (the FNV reference vectors); ggml-rpc.cpp's fnv_hash is the same function.
    assert verify_mod.fnv1a(b"") == 0xCBF29CE484222325
    assert verify_mod.fnv1a(b"a") == 0xAF63DC4C8601EC8C
    assert verify_mod.fnv1a(b"foobar") == 0x85944171F73967E8
    assert verify_mod.fnv1a(b"bar", verify_mod.fnv1a(b"foo")) == verify_mod.fnv1a(b"foobar")


def test_the_helper_hashes_as_python_does(hasher, tmp_path):
    files = {name: os.urandom(size) for name, size in (("empty", 0), ("one", 1), ("odd", 3 * 2**20 + 7))}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    out = subprocess.run([hasher, *(str(tmp_path / n) for n in files)], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines == [f"{verify_mod.fnv1a(data):016x}  {tmp_path / name}" for name, data in files.items()]


def test_the_helper_reports_an_unreadable_file(hasher, tmp_path):
    out = subprocess.run([hasher, str(tmp_path / "gone")], capture_output=True, text=True, check=False)
    assert (out.returncode, out.stdout) == (1, f"-  {tmp_path / 'gone'}\n")
    assert "No such file" in out.stderr


@pytest.mark.parametrize("fast", [True, False], ids=["helper", "python"])
def test_good_files_stay_and_every_kind_of_bad_one_goes(fast, hasher, tensor, tmp_path):
    good = entry(tmp_path, tensor)
    truncated = entry(tmp_path, tensor[::-1])  # another tensor, then cut as by a kill mid-write
    with truncated.open("r+b") as handle:
        handle.truncate(SIZE - 1)
    flipped = entry(tmp_path, tensor[1:] + b"x")
    data = bytearray(flipped.read_bytes())
    data[SIZE // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    small = entry(tmp_path, tensor[:THRESHOLD])  # right name, but llama.cpp never caches it
    upper = tmp_path / good.name.upper()
    upper.write_bytes(tensor)
    other = tmp_path / "notes.txt"
    other.write_text("x")
    link = tmp_path / f"{verify_mod.fnv1a(b'x'):016x}"
    link.symlink_to(good)
    subdir = tmp_path / "sub"
    subdir.mkdir()
    logged = []
    counts = verify_mod.verify(str(tmp_path), hasher if fast else None, log=logged.append)
    assert counts == (1, 6, 0, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([good.name, "sub"])
    assert good.read_bytes() == tensor
    text = "\n".join(logged)
    assert f"{truncated}: removed, its bytes hash to" in text
    assert f"{flipped}: removed, its bytes hash to" in text
    assert f"{small}: removed, {THRESHOLD} bytes" in text
    assert f"{upper}: removed, name is not" in text
    assert f"{other}: removed, name is not" in text
    assert f"{link}: removed, not a regular file" in text
    assert f"{subdir}: a directory (left alone)" in text


def test_a_bad_file_that_cannot_be_removed_fails_the_start(monkeypatch, tensor, tmp_path, capsys):
    bad = tmp_path / "0123456789abcdef"
    bad.write_bytes(tensor)

    def refuse(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(verify_mod.os, "unlink", refuse)  # e.g. a root-owned file in a root-owned directory
    assert verify_mod.main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}: its bytes hash to" in out and "cannot remove it: Permission denied" in out
    assert "0 removed, 1 not removable" in out


def test_main_hashes_in_python_without_the_helper_and_says_so(tensor, tmp_path, capsys):
    good = entry(tmp_path, tensor)
    assert verify_mod.main(["verify", "--hasher", str(tmp_path / "missing"), str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hashing in Python" in out
    assert f"tensor cache {tmp_path}: 1 file(s) verified, 0 removed, 0 not removable (0 of them unchanged" in out
    assert good.exists()


def test_main_rejects_bad_usage(capsys):
    assert verify_mod.main(["verify"]) == 2
    assert verify_mod.main(["verify", "--hash", "x", "y"]) == 2
    assert verify_mod.main(["verify", "--record", "x", "--record", "y", "z"]) == 2
    assert verify_mod.main(["verify", "--record", "x"]) == 2
    assert "Usage" in capsys.readouterr().err


def test_a_missing_directory_has_nothing_to_verify(tmp_path):
    assert verify_mod.verify(str(tmp_path / "nope")) == (0, 0, 0, 0)


class Counting:
    """hash_in_python, counting the files it is asked to hash."""

    def __init__(self):
        self.asked = []
        self.real = verify_mod.hash_in_python

    def __call__(self, paths):
        self.asked += [os.path.basename(p) for p in paths]
        return self.real(paths)


@pytest.fixture
def counting(monkeypatch):
    counter = Counting()
    monkeypatch.setattr(verify_mod, "hash_in_python", counter)
    return counter


def test_the_record_spares_unchanged_files_and_a_change_is_hashed_again(counting, tensor, tmp_path):
    """A file found good and not changed since (same inode, size, times) is not hashed again; one changed in place
    - even to the same size, its modification time put back - is, and goes when its bytes no longer match."""
    cache, record = tmp_path / "rpc", tmp_path / "verified.json"
    cache.mkdir()
    kept = entry(cache, tensor)
    changed = entry(cache, tensor[::-1])
    assert verify_mod.verify(str(cache), record=str(record)) == (2, 0, 0, 0)
    assert sorted(counting.asked) == sorted([kept.name, changed.name])
    assert sorted(json.loads(record.read_text())) == sorted([kept.name, changed.name])

    counting.asked.clear()
    assert verify_mod.verify(str(cache), record=str(record)) == (2, 0, 0, 2)
    assert counting.asked == []

    before = changed.stat()
    data = bytearray(changed.read_bytes())
    data[7] ^= 0x01
    changed.write_bytes(bytes(data))
    os.utime(changed, ns=(before.st_atime_ns, before.st_mtime_ns))  # only the change time tells
    added = entry(cache, tensor[1:] + b"y")
    counting.asked.clear()
    logged = []
    assert verify_mod.verify(str(cache), record=str(record), log=logged.append) == (2, 1, 0, 1)
    assert sorted(counting.asked) == sorted([changed.name, added.name])
    assert f"{changed}: removed, its bytes hash to" in "\n".join(logged)
    assert sorted(json.loads(record.read_text())) == sorted([kept.name, added.name])


def test_a_record_that_does_not_read_as_one_means_hashing_everything(counting, tensor, tmp_path):
    cache, record = tmp_path / "rpc", tmp_path / "verified.json"
    cache.mkdir()
    good = entry(cache, tensor)
    for text in ("{not json", "[1, 2]", json.dumps({good.name: "a string"})):
        record.write_text(text)
        counting.asked.clear()
        assert verify_mod.verify(str(cache), record=str(record)) == (1, 0, 0, 0)
        assert counting.asked == [good.name]
    assert verify_mod.read_record(str(tmp_path / "none")) == {}


def test_a_record_that_cannot_be_written_is_said_and_the_check_still_passes(tensor, tmp_path, capsys):
    cache = tmp_path / "rpc"
    cache.mkdir()
    entry(cache, tensor)
    record = tmp_path / "missing-directory" / "verified.json"
    assert verify_mod.main(["verify", "--record", str(record), str(cache)]) == 0
    out = capsys.readouterr().out
    assert f"tensor cache record {record}: not written" in out
    assert "1 file(s) verified, 0 removed, 0 not removable (0 of them unchanged" in out
    assert not list((tmp_path).glob("missing-directory*"))


def test_after_a_double_dash_the_pruner_runs_in_the_same_process_once_the_cache_is_clean(tensor, tmp_path, capsys):
    """The worker's start: verify, then the pruner with the arguments after ``--`` (a cap of 0 bytes
    here, so it removes the good file too); a bad file that cannot be removed stops it before the pruner."""
    good = entry(tmp_path, tensor)
    assert verify_mod.main(["verify", str(tmp_path), "--", str(tmp_path), "0"]) == 0
    out = capsys.readouterr().out
    assert "1 file(s) verified, 0 removed" in out and f"tensor cache {tmp_path}: removed 1 file(s)" in out
    assert not good.exists()
    assert verify_mod.main(["verify", str(tmp_path), "--", str(tmp_path), "not-a-number"]) == 2  # the pruner's usage


def test_a_failed_verification_runs_no_pruner(monkeypatch, tensor, tmp_path, capsys):
    (tmp_path / "0123456789abcdef").write_bytes(tensor)

    def refuse(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(verify_mod.os, "unlink", refuse)
    assert verify_mod.main(["verify", str(tmp_path), "--", str(tmp_path), "0"]) == 1
    assert "removed 0 file(s)" not in capsys.readouterr().out


def test_with_exec_a_clean_cache_tells_systemd_it_is_ready_then_becomes_the_command(tensor, tmp_path, monkeypatch):
    """The worker's start in one sandboxed process: verify, prune, ``READY=1`` on systemd's socket, then exec the RPC
    server (its argv as given); a failed prune or a bad file that cannot be removed sends nothing and execs nothing."""
    cache = tmp_path / "cache"
    cache.mkdir()
    entry(cache, tensor)
    notify = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(notify))
        listener.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", str(notify))
        execs = []
        command = ["/opt/llama/bin/rpc-server", "-H", "10.0.0.2", "-p", "50052", "-c"]
        argv = ["verify", str(cache), "--", str(cache), "20000000000", "--exec", *command]
        assert verify_mod.main(argv, execv=lambda path, args: execs.append((path, args))) == 0
        assert execs == [(command[0], command)]
        assert listener.recv(64) == b"READY=1"
        assert "NOTIFY_SOCKET" not in os.environ  # not handed on to the RPC server
        monkeypatch.setenv("NOTIFY_SOCKET", str(notify))

        execs.clear()
        failing = ["verify", str(cache), "--", str(cache), "not-a-number", "--exec", *command]
        assert verify_mod.main(failing, execv=lambda path, args: execs.append((path, args))) == 2

        def refuse(path):
            raise PermissionError(13, "Permission denied", path)

        monkeypatch.setattr(verify_mod.os, "unlink", refuse)
        (cache / "0123456789abcdef").write_bytes(tensor)  # a bad file that cannot go
        assert verify_mod.main(["verify", str(cache), "--exec", *command], execv=execs.append) == 1
        assert execs == []
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.recv(64)


def test_exec_without_a_command_is_a_usage_error_and_without_notify_socket_nothing_is_sent(tmp_path, monkeypatch):
    assert verify_mod.main(["verify", str(tmp_path), "--exec"], execv=lambda *a: pytest.fail("exec")) == 2
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert verify_mod.notify_ready() is False
    execs = []
    assert verify_mod.main(["verify", str(tmp_path), "--exec", "/bin/true"], execv=lambda *a: execs.append(a)) == 0
    assert execs == [("/bin/true", ["/bin/true"])]


def test_an_abstract_notify_socket_is_reached_by_its_name(monkeypatch):
    name = f"llamarpc-verify-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        listener.settimeout(5)
        assert verify_mod.notify_ready({"NOTIFY_SOCKET": "@" + name}) is True
        assert listener.recv(64) == b"READY=1"
