"""The worker's tensor cache on a real ggml-rpc-server (``-c``) and a real llama-server, started as the role's unit
starts it: its ExecStart (verify, then prune, then exec the RPC server, in one process), rendered from the role's
template.

- A cache file truncated (a worker killed mid-write) or with one flipped bit is removed before the next start, and
  the next load gives the same greedy tokens as one process. The check of the check: started without the verifier,
  the same worker serves the bad file and the tokens differ.
- The cache cap (llama_rpc_worker_cache_max_size) holds after a load that exceeds it.

The model is lab/tools/tiny_gguf.py's ``cache`` preset (14 tensors of 10-21 MiB go to the worker and its cache). Only
127.0.0.1 is contacted.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import test_real_model_identity as identity
from conftest import tiny_model

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_smoke

pytestmark = pytest.mark.needs_llama
bin_dir = identity.bin_dir  # its fixture: the llama.cpp build to run

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
PROMPTS = ("hello world, the cluster", "six small machines")
CACHED_TENSORS = 14  # the cache preset's tensors over 10 MiB: attn q/k/v/output and ffn gate/up/down of 2 blocks

_spec = importlib.util.spec_from_file_location("worker_unit", REPO / "tests/unit/roles/worker_unit.py")
worker_unit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker_unit)
VERIFIER = str(REPO / "roles/llama_rpc_worker/files/llamarpc_cache_verify.py")


@pytest.fixture(scope="module")
def hasher(tmp_path_factory):
    if not shutil.which("g++"):
        pytest.fail("g++ is needed to build the verifier's helper, as the role builds it on the host")
    return worker_unit.build_hasher(tmp_path_factory.mktemp("hasher"))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("model"), "cache")


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


def run_server(bin_dir, model, workdir, name, *extra):  # noqa: F811 (the fixture's value)
    started, port = identity.server(bin_dir, model, workdir, name, *extra)
    try:
        return greedy(port)
    finally:
        started.stop()


@pytest.fixture(scope="module")
def single(bin_dir, model, tmp_path_factory):  # noqa: F811
    """Greedy tokens of one process computing on its own CPU (no RPC)."""
    return run_server(bin_dir, model, tmp_path_factory.mktemp("single"), "single", "--device", "none")


class Unit:
    """The role's worker unit for a worker on loopback in ``workdir`` (LLAMA_CACHE=workdir/cache)."""

    def __init__(self, bin_dir, hasher, workdir, cap_bytes=20 * 2**30):  # noqa: F811
        self.workdir = workdir
        self.cache = workdir / "cache" / "rpc"
        self.cache.mkdir(parents=True, exist_ok=True)
        self.port = _llama_smoke.free_port()
        self.text = worker_unit.render(
            llama_rpc_worker_firewall=False,
            llama_rpc_worker_cache_dir=str(workdir / "cache"),
            llama_rpc_worker_port=self.port,
            llama_cpp_rpc_server_bin=str(bin_dir / "ggml-rpc-server"),
            _llama_rpc_worker_bind=LOOPBACK,
            _llama_rpc_worker_threads=1,
            _llama_rpc_worker_cache_bytes=cap_bytes,
            _llama_rpc_worker_prune=str(REPO / "roles/llama_rpc_worker/files/llamarpc_cache_prune.py"),
            _llama_rpc_worker_verify=VERIFIER,
            _llama_rpc_worker_hasher=hasher,
        )
        self.worker = None
        self.pre_output = ""

    def start(self, verify=True):
        """The unit's ExecStart: the verifier and the pruner, then (``--exec``) the RPC server in the same process;
        ``verify=False`` runs the pruner alone and then the RPC server, as a unit without the verifier would."""
        (argv,) = worker_unit.commands(self.text, "ExecStart")
        server = argv[argv.index("--exec") + 1 :]
        assert "-c" in server
        self.pre_output = ""
        if not verify:  # the pruner alone: its arguments follow the verifier's --, up to --exec
            command = [argv[0], str(REPO / "roles/llama_rpc_worker/files/llamarpc_cache_prune.py")]
            command += argv[argv.index("--") + 1 : argv.index("--exec")]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
            assert done.returncode == 0, done.stdout + done.stderr
            self.pre_output = done.stdout
            argv = server
        self.worker = identity.Process(argv, self.workdir, "worker")
        identity.wait_ready(self.worker, self.port, timeout=600)
        # The process that answers is the one started: the verifier became the RPC server.
        assert os.readlink(f"/proc/{self.worker.proc.pid}/exe") == os.path.realpath(server[0])
        if verify:
            self.pre_output = self.worker.log.read_text(errors="replace")

    def stop(self):
        if self.worker:
            self.worker.stop()
            self.worker = None

    def load(self, bin_dir, model, name):  # noqa: F811
        """Greedy tokens of llama-server with every layer on this worker."""
        rpc = ("--rpc", f"{LOOPBACK}:{self.port}", "-dev", "RPC0", "-ngl", "all", "--fit", "off")
        return run_server(bin_dir, model, self.workdir, name, *rpc)

    def files(self):
        return {p.name: p.stat().st_size for p in self.cache.iterdir()}


@pytest.fixture
def unit(bin_dir, hasher, tmp_path):  # noqa: F811
    made = Unit(bin_dir, hasher, tmp_path)
    yield made
    made.stop()


def truncate(path):
    """What a worker killed mid-write leaves: the first part of the bytes under the right name."""
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size // 2)


def flip(path):
    """One bit flipped: the top exponent bit of the first f16 weight (a small weight becomes a large one)."""
    with path.open("r+b") as handle:
        handle.seek(1)
        byte = handle.read(1)[0]
        handle.seek(1)
        handle.write(bytes([byte ^ 0x40]))


@pytest.mark.parametrize("corrupt", [truncate, flip], ids=["truncated", "flipped"])
def test_a_bad_cache_file_is_removed_before_the_start_and_the_output_stays_right(
    corrupt,
    unit,
    bin_dir,  # noqa: F811
    model,
    single,
    hasher,
):
    unit.start()
    assert unit.load(bin_dir, model, "fill") == single
    unit.stop()
    cached = unit.files()
    assert len(cached) == CACHED_TENSORS, cached
    victim = unit.cache / max(cached, key=lambda name: (cached[name], name))
    corrupt(victim)

    # The check of the check: without the verifier the worker serves the bad file, and the tokens differ.
    unit.start(verify=False)
    assert unit.load(bin_dir, model, "unverified") != single
    unit.stop()
    assert victim.exists()

    unit.start()
    assert unit.load(bin_dir, model, "verified") == single
    unit.stop()
    assert f"{victim}: removed, its bytes hash to" in unit.pre_output
    assert f"{CACHED_TENSORS - 1} file(s) verified, 1 removed" in unit.pre_output
    # The coordinator sent the tensor again, and the worker cached it again: whole, under its name.
    assert unit.files() == cached
    assert subprocess.run([hasher, str(victim)], capture_output=True, text=True, check=True).stdout.split()[0] == (
        victim.name
    )


def test_the_cache_cap_holds_after_a_load_that_exceeds_it(bin_dir, hasher, model, single, tmp_path):  # noqa: F811
    cap = 64 * 2**20
    unit = Unit(bin_dir, hasher, tmp_path, cap_bytes=cap)
    try:
        unit.start()
        assert unit.load(bin_dir, model, "fill") == single
        unit.stop()
        filled = unit.files()
        assert len(filled) == CACHED_TENSORS and sum(filled.values()) > 3 * cap, filled

        unit.start()  # the pruner runs before the start, after the verifier
        kept = unit.files()
        assert 0 < sum(kept.values()) <= cap, kept
        assert f"{CACHED_TENSORS} file(s) verified, 0 removed" in unit.pre_output
        assert f"removed {len(filled) - len(kept)} file(s), {sum(kept.values())} bytes kept (cap {cap})" in (
            unit.pre_output
        )
        # The kept tensors still serve: the next load gives the same tokens.
        assert unit.load(bin_dir, model, "pruned") == single
    finally:
        unit.stop()
    assert os.path.isdir(unit.cache)
