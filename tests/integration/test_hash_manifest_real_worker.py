"""A seeded load with llama-server's tensor hashes (``--rpc-tensor-hashes``, the llama_cpp role's patch
``rpc-tensor-hashes.patch``) reads none of the bytes its worker's cache holds, and the output stays a single
process's.

A real ggml-rpc-server (``-c``) on loopback holds every layer; its cache is seeded by the collection's seeder
(``_tensor_seed``, the role's C++ helper for the FNV-1a) and the hashes file is what the coordinator role would make of
that seeding (``_tensor_seed.verify_rows`` against the placement's record of the shard, then
``_tensor_hashes.decide``). Two models: Gemma 3 270M Q4_K_M (its one tensor over 10 MiB is the 178 MB token embedding,
which the tied output sends to the worker) and lab/tools/tiny_gguf.py's ``cache`` preset (14 tensors of 10-21 MiB on
the worker, each measured on its own).

What was read is measured on a copy of the model of this test's own: its pages are evicted from the page cache
(``posix_fadvise(POSIX_FADV_DONTNEED)``, that file only) before each load, and after the load (``--no-warmup``: no
token computed yet) ``mincore`` says which of its pages are resident, per tensor; ``/proc/PID/io`` says how many bytes
llama-server read from the disk.

- With the hashes: the seeded tensors' pages stay out of memory, the log says every one was set from the cache, and
  the greedy ids equal one process's. The check of the check: the same load without them reads those pages.
- Hashes of other bytes: the worker has no file of those names, llama-server reads the bytes (and sends their real
  hash, which hits), the ids are the same. Hashes of another model: its names are ignored.
- A tensor removed from the cache after seeding: that one is read and sent (and cached again), the others are not read.
- ``--load-mode none`` (shards on SSHFS): plain reads skip the seeded tensors the same way.

Needs a llama.cpp build with the patch: LLAMARPC_LLAMA_BIN_DIR when its llama-server knows the flag, else the newest
build in the controller's cache whose record says the patch was applied (the llama_cpp role applies it by default).
Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import mmap
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import test_real_model_identity as identity
from conftest import tiny_model

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_smoke
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_fetch import MANIFEST
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_hashes
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed as ts

pytestmark = pytest.mark.needs_llama

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = identity.LOOPBACK
PATCH = "rpc-tensor-hashes.patch"
PROMPTS = ("The capital of France is", "Six small machines")
#: After a load that took tensors by hash, at most this share of their bytes, plus two read-ahead windows of the model's
#: disk, may be resident: the kernel's read-ahead of what was read before them runs on into them. Measured with an 8 MiB
#: window: with mmap, the first 5.8 MB of the gemma model's token embedding, after its 6.5 MB header; with plain reads,
#: 12.4 MB past the cache preset's first tensors (the header's pages, read by another open file, carry read-ahead
#: marks that start an asynchronous read-ahead of up to two windows when the loader reads past them, even on a file
#: advised POSIX_FADV_RANDOM).
UNREAD = 0.05
#: At least this share of a tensor's pages is resident after a load that read it.
READ = 0.95

_spec = importlib.util.spec_from_file_location("tests_conftest", REPO / "tests/conftest.py")
tests_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tests_conftest)


def knows_flag(directory):
    server = Path(directory) / "llama-server"
    if not server.is_file():
        return False
    done = subprocess.run([str(server), "--help"], capture_output=True, text=True, timeout=60, check=False)
    return _tensor_hashes.FLAG in done.stdout + done.stderr


def patched_build():
    """A bin directory whose llama-server knows the flag, or None."""
    given = os.environ.get("LLAMARPC_LLAMA_BIN_DIR")
    if given and knows_flag(given):
        return given
    entries = []
    for record in Path(tests_conftest.LLAMA_CACHE).glob("*/build.json"):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        applied = any(p.get("name") == PATCH and p.get("applied") for p in data.get("patches", []))
        if applied and "llama-server" in data.get("built_targets", []):
            entries.append((record.stat().st_mtime, str(record.parent)))
    for _mtime, entry in sorted(entries, reverse=True):
        found = tests_conftest.unpacked(entry)
        if knows_flag(found):
            return found
    return None


@pytest.fixture(scope="module")
def bin_dir():
    found = patched_build()
    if not found:
        message = (
            f"no llama.cpp build with {PATCH}: neither LLAMARPC_LLAMA_BIN_DIR nor the controller's cache "
            f"({tests_conftest.LLAMA_CACHE}) has one (the llama_cpp role applies it by default: the worker scenario)"
        )
        pytest.skip(message)  # a failure under LLAMARPC_REQUIRE_LLAMA=1 (the needs_llama marker's plugin)
    return Path(found)


@pytest.fixture(scope="module")
def helper(tmp_path_factory):
    """The FNV-1a helper from the worker role's source, as the llama_cpp role builds it (Python is too slow here)."""
    if not shutil.which("g++"):
        pytest.fail("g++ is needed to build the seeder's FNV-1a helper")
    out = tmp_path_factory.mktemp("helper") / "llamarpc-fnv1a"
    source = REPO / "roles/llama_rpc_worker/files/llamarpc_fnv1a.cpp"
    subprocess.run(["g++", "-O2", "-Wall", "-o", str(out), str(source)], check=True, timeout=300)
    return str(out)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def placed_copy(source, directory):
    """A copy of ``source`` in ``directory`` of this test's own, with the shard placement's record of its sha256 (what
    gguf_shard_place leaves beside a verified shard), fsynced so that its pages can be evicted."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / Path(source).name
    shutil.copyfile(source, path)
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())
    info = path.stat()
    record = {path.name: {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": sha256(path)}}
    (directory / MANIFEST).write_text(json.dumps(record))
    return str(path)


@pytest.fixture(scope="module")
def models(real_model, tmp_path_factory):
    """name -> (model path, extra arguments of its single-process reference)."""
    work = tmp_path_factory.mktemp("models")
    cache_preset = tiny_model(work / "generated", "cache")
    return {
        "gemma": (placed_copy(real_model, work / "gemma"), ("--device", "none", "--no-repack")),
        "cache": (placed_copy(cache_preset, work / "cache"), ("--device", "none")),
    }


# -- the page cache ---------------------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
PAGE = os.sysconf("SC_PAGE_SIZE")


def evict(path):
    """Drop ``path``'s pages from the page cache (clean pages that nothing maps: nothing else maps this copy)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    assert sum(resident(path)) <= 4, "the model's pages could not be evicted"


def resident(path):
    """One 0/1 per page of ``path``: whether it is in the page cache (mincore over a mapping of our own)."""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            pages = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
            if _libc.mincore(addr, size, pages) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return [page & 1 for page in pages]
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def share(pages, offset, size):
    """The share of a byte range's pages that are resident."""
    first, last = offset // PAGE, (offset + size - 1) // PAGE
    return sum(pages[first : last + 1]) / (last - first + 1)


def read_ahead(path):
    """The read-ahead window (bytes) of the block device ``path`` is on (sysfs; a partition's is its disk's); 8 MiB
    when sysfs does not say."""
    dev = os.stat(path).st_dev
    device = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for queue in (device / "queue", device / ".." / "queue"):
        try:
            return int((queue / "read_ahead_kb").read_text()) * 1024
        except (OSError, ValueError):
            continue
    return 8 << 20


def resident_bytes(pages, row):
    first, last = row["offset"] // PAGE, (row["offset"] + row["size"] - 1) // PAGE
    return sum(pages[first : last + 1]) * PAGE


def unread(pages, rows, window):
    """Whether the tensors of ``rows`` were not read: at most UNREAD of their bytes resident, beyond two read-ahead
    windows (one burst of the kernel's read-ahead per file)."""
    return sum(resident_bytes(pages, row) for row in rows) <= UNREAD * sum(row["size"] for row in rows) + 2 * window


def read_bytes(pid):
    """Bytes the process has read from storage (/proc/PID/io)."""
    with open(f"/proc/{pid}/io", encoding="ascii") as handle:
        return int(next(line for line in handle if line.startswith("read_bytes:")).split()[1])


# -- the worker, the seeding, the hashes file, a load -------------------------------------------------------------


class Worker:
    """ggml-rpc-server with its tensor cache (``-c``, LLAMA_CACHE=workdir/cache) on loopback."""

    def __init__(self, bin_dir, workdir):  # noqa: F811 (the fixture's value)
        self.workdir = workdir
        self.cache = workdir / "cache" / "rpc"
        self.cache.mkdir(parents=True)
        self.port = _llama_smoke.free_port()
        argv = [str(bin_dir / "ggml-rpc-server"), "-H", LOOPBACK, "-p", str(self.port), "-t", "1", "-c"]
        self.proc = identity.Process(argv, workdir, "worker")
        identity.wait_ready(self.proc, self.port)

    def seed(self, model, helper):
        """The collection's seeding of every tensor this worker is offered; the rows, marked as the role's seeding
        marks them (``shards``: the shard's sha256 in force, from the placement's record)."""
        tensors, n_layer = ts.model_tensors(model)
        entries = ts.seed_lists(tensors, n_layer, ["worker"], [1.0])["worker"]
        rows, _stale = ts.seed(entries, str(self.cache), helper)
        ts.verify_rows(rows, [], shards(model), "")
        assert rows and all(row["shard_sha256"] for row in rows), rows
        return rows

    def stop(self):
        self.proc.stop()


def shards(model):
    """The shards in force as llama_model's plan names them: file name -> sha256 (the placement's record)."""
    return {name: record["sha256"] for name, record in json.loads((Path(model).parent / MANIFEST).read_text()).items()}


def hashes_file(bin_dir, rows, model, path):  # noqa: F811
    """The hashes file the coordinator role makes of the seeding, written to ``path``."""
    help_text = subprocess.run(
        [str(bin_dir / "llama-server"), "--help"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    decided = _tensor_hashes.decide(shards(model), rows=rows, help_text=help_text)
    assert decided["use"] and decided["tensors"] == len({row["name"] for row in rows}), decided
    path.write_text(decided["content"], encoding="utf-8")
    return str(path)


def greedy(port):
    tokens = {}
    for prompt in PROMPTS:
        body = {
            "prompt": prompt,
            "n_predict": 16,
            "temperature": 0,
            "cache_prompt": False,
            "return_tokens": True,
            "ignore_eos": True,
        }
        answer = identity.post_json(f"http://{LOOPBACK}:{port}/completion", body, timeout=300)
        assert len(answer["tokens"]) == 16, answer
        tokens[prompt] = answer["tokens"]
    return tokens


def load(bin_dir, model, workdir, name, worker=None, hashes=None, reference=(), load_mode=None):  # noqa: F811
    """llama-server on ``model`` from a cold page cache, with every layer on ``worker`` (None: on its own CPU, with
    the ``reference`` arguments) and ``hashes`` (and ``--load-mode``); after /health: the resident pages and the bytes
    it read, then the greedy ids and its log."""
    evict(model)
    extra = ["--no-warmup", "--log-verbosity", "4", *reference]
    if load_mode:
        extra += ["--load-mode", load_mode]
    if worker:
        extra += ["--rpc", f"{LOOPBACK}:{worker.port}", "-dev", "RPC0", "-ngl", "all", "--fit", "off"]
    if hashes:
        extra += [_tensor_hashes.FLAG, hashes]
    started, port = identity.server(bin_dir, model, workdir, name, *extra)
    try:
        pages, read = resident(model), read_bytes(started.proc.pid)
        ids = greedy(port)
    finally:
        started.stop()
    return {"ids": ids, "pages": pages, "read_bytes": read, "log": started.log.read_text(errors="replace")}


def hashed_summary(log):
    """(set by hash, read and sent) from the loader's line, or None when it wrote none."""
    found = re.search(r"RPC tensor hashes: (\d+) tensors \([\d.]+ MiB\) set .*?, (\d+) not in a server's cache", log)
    return (int(found.group(1)), int(found.group(2))) if found else None


@pytest.fixture(scope="module")
def single(bin_dir, models, tmp_path_factory):  # noqa: F811
    """Greedy ids of one process computing on its own CPU, per model."""
    work = tmp_path_factory.mktemp("single")
    return {name: load(bin_dir, model, work, f"single-{name}", reference=ref) for name, (model, ref) in models.items()}


@pytest.fixture
def worker(bin_dir, tmp_path):  # noqa: F811
    started = Worker(bin_dir, tmp_path)
    yield started
    started.stop()


MEASURED = {}  # printed at the end of the module (pytest -s): the report's figures


def report(key, **figures):
    MEASURED[key] = figures
    print(f"\n{key}: {json.dumps(figures)}")


# -- the tests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gemma", "cache"])
def test_a_seeded_load_with_the_hashes_reads_none_of_the_seeded_bytes_and_answers_as_one_process(
    name,
    bin_dir,  # noqa: F811
    models,
    single,
    worker,
    helper,
    tmp_path,
):
    model, _ref = models[name]
    rows = worker.seed(model, helper)
    hashes = hashes_file(bin_dir, rows, model, tmp_path / "tensor-hashes.txt")

    with_hashes = load(bin_dir, model, tmp_path, f"hashes-{name}", worker, hashes)
    assert with_hashes["ids"] == single[name]["ids"]
    assert hashed_summary(with_hashes["log"]) == (len(rows), 0), with_hashes["log"][-3000:]
    shares = {row["name"]: share(with_hashes["pages"], row["offset"], row["size"]) for row in rows}
    assert unread(with_hashes["pages"], rows, read_ahead(model)), shares

    # The check of the check: the same worker, the same cache, no hashes - llama-server reads every seeded byte.
    without = load(bin_dir, model, tmp_path, f"plain-{name}", worker, None)
    assert without["ids"] == single[name]["ids"]
    assert hashed_summary(without["log"]) is None
    read = {row["name"]: share(without["pages"], row["offset"], row["size"]) for row in rows}
    assert min(read.values()) >= READ, read
    assert not unread(without["pages"], rows, read_ahead(model))  # the check above fails here

    seeded_bytes = sum(row["size"] for row in rows)
    report(
        f"{name}: seeded load",
        model_bytes=os.path.getsize(model),
        seeded_tensors=len(rows),
        seeded_bytes=seeded_bytes,
        read_bytes_with_hashes=with_hashes["read_bytes"],
        read_bytes_without=without["read_bytes"],
        resident_seeded_with_hashes=round(sum(shares[r["name"]] * r["size"] for r in rows) / seeded_bytes, 4),
        resident_seeded_without=round(sum(read[r["name"]] * r["size"] for r in rows) / seeded_bytes, 4),
        resident_model_with_hashes=round(sum(with_hashes["pages"]) / len(with_hashes["pages"]), 4),
        resident_model_without=round(sum(without["pages"]) / len(without["pages"]), 4),
    )


def test_hashes_of_other_bytes_miss_and_the_bytes_are_read_with_the_same_answer(
    bin_dir,  # noqa: F811
    models,
    single,
    worker,
    helper,
    tmp_path,
):
    model, _ref = models["gemma"]
    rows = worker.seed(model, helper)
    # Other bytes: every hash of the file changed (the sizes and names are right, the worker has no such file).
    other = [dict(row, hash=f"{int(row['hash'], 16) ^ 1:016x}") for row in rows]
    wrong = hashes_file(bin_dir, other, model, tmp_path / "wrong-hashes.txt")
    missed = load(bin_dir, model, tmp_path, "wrong", worker, wrong)
    assert missed["ids"] == single["gemma"]["ids"]
    assert hashed_summary(missed["log"]) == (0, len(rows)), missed["log"][-3000:]
    assert min(share(missed["pages"], row["offset"], row["size"]) for row in rows) >= READ

    # Another model's hashes: none of its names is a tensor of this one (or of this size) - all ignored, said so.
    cache_model, _ref = models["cache"]
    foreign_rows = ts.seed_lists(*ts.model_tensors(cache_model), ["w"], [1.0])["w"]
    foreign = _tensor_hashes.text(
        {row["name"]: (row["size"], "0123456789abcdef") for row in foreign_rows}, shards(cache_model)
    )
    (tmp_path / "foreign-hashes.txt").write_text(foreign, encoding="utf-8")
    ignored = load(bin_dir, model, tmp_path, "foreign", worker, str(tmp_path / "foreign-hashes.txt"))
    assert ignored["ids"] == single["gemma"]["ids"]
    said = re.search(
        r"ignoring (\d+) entries that name no tensor of this model and (\d+) whose size differs", ignored["log"]
    )
    assert said and int(said.group(1)) + int(said.group(2)) == len(foreign_rows), ignored["log"][-3000:]
    assert hashed_summary(ignored["log"]) is None  # nothing left to offer
    assert min(share(ignored["pages"], row["offset"], row["size"]) for row in rows) >= READ
    report("gemma: other bytes", read_bytes_wrong_hashes=missed["read_bytes"], read_bytes_foreign=ignored["read_bytes"])


def test_a_tensor_removed_from_the_cache_after_seeding_is_read_and_sent_and_only_that_one(
    bin_dir,  # noqa: F811
    models,
    single,
    worker,
    helper,
    tmp_path,
):
    model, _ref = models["cache"]
    rows = worker.seed(model, helper)
    hashes = hashes_file(bin_dir, rows, model, tmp_path / "tensor-hashes.txt")
    gone = max(rows, key=lambda row: (row["size"], row["name"]))
    (worker.cache / gone["hash"]).unlink()

    loaded = load(bin_dir, model, tmp_path, "removed", worker, hashes)
    assert loaded["ids"] == single["cache"]["ids"]
    assert hashed_summary(loaded["log"]) == (len(rows) - 1, 1), loaded["log"][-3000:]
    assert share(loaded["pages"], gone["offset"], gone["size"]) >= READ
    others = [row for row in rows if row is not gone]
    assert unread(loaded["pages"], others, read_ahead(model)), [
        share(loaded["pages"], row["offset"], row["size"]) for row in others
    ]
    # Sent with its real hash and the cache flag: the worker cached it again, whole, under its name.
    again = worker.cache / gone["hash"]
    assert again.is_file() and again.stat().st_size == gone["size"]
    assert ts.plan_seed([gone], str(worker.cache), helper)[0]["state"] == "present"


def test_without_mmap_as_over_sshfs_the_seeded_bytes_are_not_read_either(
    bin_dir,  # noqa: F811
    models,
    single,
    worker,
    helper,
    tmp_path,
):
    """``--load-mode none``, as the coordinator loads shards that sit on SSHFS (mmap fails there): plain reads, into a
    buffer per tensor. (Not the gemma model: its token embedding, on the coordinator's CPU too, is read whole then.)"""
    model, _ref = models["cache"]
    rows = worker.seed(model, helper)
    hashes = hashes_file(bin_dir, rows, model, tmp_path / "tensor-hashes.txt")
    with_hashes = load(bin_dir, model, tmp_path, "none-hashes", worker, hashes, load_mode="none")
    assert with_hashes["ids"] == single["cache"]["ids"]
    assert hashed_summary(with_hashes["log"]) == (len(rows), 0), with_hashes["log"][-3000:]
    assert unread(with_hashes["pages"], rows, read_ahead(model))
    without = load(bin_dir, model, tmp_path, "none-plain", worker, None, load_mode="none")
    assert without["ids"] == single["cache"]["ids"]
    assert not unread(without["pages"], rows, read_ahead(model))
    report(
        "cache: --load-mode none",
        read_bytes_with_hashes=with_hashes["read_bytes"],
        read_bytes_without=without["read_bytes"],
        resident_model_with_hashes=round(sum(with_hashes["pages"]) / len(with_hashes["pages"]), 4),
        resident_seeded_with_hashes=sum(resident_bytes(with_hashes["pages"], row) for row in rows),
        seeded_bytes=sum(row["size"] for row in rows),
    )
