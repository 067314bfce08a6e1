"""lab/tools/tiny_gguf.py models against the real llama.cpp binaries in $LLAMARPC_LLAMA_BIN_DIR.

Skipped unless LLAMARPC_LLAMA_BIN_DIR names a directory with llama-server and llama-gguf-split (and their
lib*.so). Servers listen on 127.0.0.1 only and are always killed when a test ends.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest
import tiny_gguf

pytestmark = pytest.mark.needs_llama

LOOPBACK = "127.0.0.1"
START_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    value = os.environ.get("LLAMARPC_LLAMA_BIN_DIR")
    if not value:
        pytest.skip("LLAMARPC_LLAMA_BIN_DIR is not set")
    return Path(value)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def http_json(port: int, path: str, payload: dict | None = None, timeout: float = 60.0) -> tuple[int, dict]:
    """GET (or POST ``payload`` as JSON) http://127.0.0.1:port/path; return the status and the JSON body.

    http.client talks to the address given and nothing else (no proxy from the environment)."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        if payload is None:
            connection.request("GET", path)
        else:
            connection.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body) if response.status == 200 else {}
    finally:
        connection.close()


@contextlib.contextmanager
def llama_server(bin_dir: Path, model: str, log: Path) -> Iterator[int]:
    """Start llama-server on a free loopback port, wait for /health 200, yield the port, always kill it."""
    port = free_port()
    command = [str(bin_dir / "llama-server"), "-m", model, "-c", "256", "-t", "1", "--host", LOOPBACK]
    with log.open("wb") as output:
        server = subprocess.Popen([*command, "--port", str(port)], stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert server.poll() is None, f"llama-server exited with {server.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, (
                f"llama-server not healthy in {START_TIMEOUT} s:\n{log.read_text()[-3000:]}"
            )
            with contextlib.suppress(OSError):
                if http_json(port, "/health", timeout=2)[0] == 200:
                    break
            time.sleep(0.2)
        yield port
    finally:
        server.kill()
        server.wait(timeout=30)


def complete(port: int) -> dict:
    request = {"prompt": "hello world, the cluster", "n_predict": 8, "temperature": 0, "cache_prompt": False}
    status, body = http_json(port, "/completion", request)
    assert status == 200
    return body


def test_llama_server_loads_three_shards_and_completes(bin_dir: Path, tmp_path: Path) -> None:
    split = tiny_gguf.generate(tmp_path / "split", shards=3)
    single = tiny_gguf.generate(tmp_path / "single")
    with llama_server(bin_dir, split["files"][0]["path"], tmp_path / "split.log") as port:
        first = complete(port)
        assert complete(port)["content"] == first["content"], "greedy decoding is not repeatable"
    assert first["content"]
    assert first["tokens_predicted"] > 0
    assert first["tokens_evaluated"] > 0
    with llama_server(bin_dir, single["files"][0]["path"], tmp_path / "single.log") as port:
        assert complete(port)["content"] == first["content"], "split and unsplit models disagree"


def test_llama_server_refuses_a_model_with_a_missing_shard(bin_dir: Path, tmp_path: Path) -> None:
    split = tiny_gguf.generate(tmp_path, shards=3)
    Path(split["files"][2]["path"]).unlink()
    command = [str(bin_dir / "llama-server"), "-m", split["files"][0]["path"], "-c", "256", "-t", "1"]
    command += ["--host", LOOPBACK, "--port", str(free_port())]
    completed = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert completed.returncode != 0
    assert f"failed to load GGUF split from {split['files'][2]['path']}" in completed.stdout + completed.stderr


def test_llama_gguf_split_merges_the_shards(bin_dir: Path, tmp_path: Path) -> None:
    split = tiny_gguf.generate(tmp_path, shards=3)
    merged = tmp_path / "merged.gguf"
    command = [str(bin_dir / "llama-gguf-split"), "--merge", split["files"][0]["path"], str(merged)]
    completed = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    single = tiny_gguf.generate(tmp_path / "single")
    expected = {t.name: t for t in gguf.GGUFReader(single["files"][0]["path"]).tensors}
    reader = gguf.GGUFReader(merged)
    assert [t.name for t in reader.tensors] == list(expected)
    for tensor in reader.tensors:
        assert np.array_equal(tensor.data, expected[tensor.name].data), tensor.name


def test_shards_are_byte_identical_to_llama_gguf_split(bin_dir: Path, tmp_path: Path) -> None:
    """With one tensor per shard both plans agree, so llama-gguf-split's files must equal ours byte for byte."""
    shards = tiny_gguf.PRESETS["tiny"].tensor_count
    ours = tiny_gguf.generate(tmp_path / "ours", shards=shards, prefix="m")
    single = tiny_gguf.generate(tmp_path / "single", prefix="m")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    command = [str(bin_dir / "llama-gguf-split"), "--split", "--split-max-tensors", "1"]
    command += [single["files"][0]["path"], str(theirs / "m")]
    completed = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    for entry in ours["files"]:
        assert (theirs / entry["name"]).read_bytes() == Path(entry["path"]).read_bytes(), entry["name"]
