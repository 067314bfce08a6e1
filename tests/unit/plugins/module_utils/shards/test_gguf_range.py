"""Reading GGUF headers over HTTP Range (the plan before deploy) against a Range-capable server on loopback.

The server (conftest's ``range_server``) records every request's Range header and the bytes it sent, so the tests
can show that only header bytes cross the network: never a shard's tensor data.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as header
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as sf


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("model"), preset="tiny", shards=3, seed=2)


@pytest.fixture
def serve(model, range_server):
    return lambda **how: range_server(Path(model["files"][0]["path"]).parent, **how)


def shards_of(model, server):
    base = f"http://127.0.0.1:{server.server_address[1]}"
    return [
        {"name": entry["name"], "size": entry["size"], "url": f"{base}/{entry['name']}"} for entry in model["files"]
    ]


def test_headers_over_range_equal_the_local_files(model, serve):
    server = serve()
    remote, reads = sf.read_headers(shards_of(model, server))
    local = header.read_model(model["files"][0]["path"])
    assert remote["metadata"] == local["metadata"]
    assert remote["tensors"] == local["tensors"]
    assert [read["name"] for read in reads] == [entry["name"] for entry in model["files"]]


def test_only_header_bytes_are_asked_for_and_windows_grow(model, serve):
    server = serve()
    window = 1024
    _model, reads = sf.read_headers(shards_of(model, server), window=window)
    first = next(read for read in reads if read["name"] == model["files"][0]["name"])
    # Shard 1 holds the tokenizer: a header of tens of kB, read in a few requests of doubling size.
    assert first["header_bytes"] > 8 * window
    assert 2 <= first["requests"] <= 8
    for path, wanted, sent in server.settled():
        name = path.lstrip("/")
        read = next(read for read in reads if read["name"] == name)
        start, _dash, end = wanted.removeprefix("bytes=").partition("-")
        assert end, f"an open-ended Range ({wanted}) would ask for the whole shard"
        # No request starts past the header, and none asks for more than twice what the header still needed.
        assert int(start) < read["header_bytes"]
        assert int(end) - int(start) + 1 <= max(window, 2 * read["header_bytes"])
        assert sent == int(end) - int(start) + 1
    size = {entry["name"]: entry["size"] for entry in model["files"]}
    for read in reads:
        assert read["received"] < size[read["name"]] / 10, read
    sizes = [
        int(w.removeprefix("bytes=").partition("-")[2]) - int(w.removeprefix("bytes=").partition("-")[0]) + 1
        for p, w, s in server.settled()
        if p.endswith(model["files"][0]["name"])
    ]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0], sizes


def test_a_server_ignoring_range_is_read_only_as_far_as_needed(model, serve):
    server = serve(honour_range=False)
    remote, reads = sf.read_headers(shards_of(model, server), window=4096)
    assert remote["tensors"] == header.read_model(model["files"][0]["path"])["tensors"]
    for read in reads:
        assert read["received"] <= read["header_bytes"] + 4096 * 2 ** read["requests"]


def test_a_part_from_elsewhere_than_asked_is_refused(model, serve):
    server = serve(wrong_start=True)
    with pytest.raises(sf.FetchError, match=r"server answered 'bytes 0-\d+/\d+' to a range from 1024"):
        sf.read_headers(shards_of(model, server)[:1], window=1024)


def test_a_file_shorter_than_its_header_is_a_clear_error(model, serve, tmp_path):
    server = serve()
    cut = Path(model["files"][0]["path"]).read_bytes()[:2000]
    (server.root / "cut.gguf").write_bytes(cut)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    with pytest.raises(header.GGUFError, match="cut.gguf: truncated GGUF header"):
        sf.read_headers([{"name": "cut.gguf", "size": 2000, "url": f"{base}/cut.gguf"}], window=512)
    (server.root / "cut.gguf").unlink()


def test_missing_file_and_missing_source_are_named(model, serve):
    server = serve()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    with pytest.raises(sf.FetchError, match="HTTP 404"):
        sf.read_headers([{"name": "nope.gguf", "size": 1, "url": f"{base}/nope.gguf"}])
    with pytest.raises(sf.FetchError, match="no URL and no local file"):
        sf.read_headers([{"name": "nope.gguf", "size": 1}])


def test_controller_files_are_read_locally(model):
    shards = [
        {"name": entry["name"], "size": entry["size"], "src_controller": entry["path"]} for entry in model["files"]
    ]
    remote, reads = sf.read_headers(shards)
    assert remote["tensors"] == header.read_model(model["files"][0]["path"])["tensors"]
    assert all(read["requests"] == 0 for read in reads)


def test_data_offset_is_where_the_gguf_package_puts_the_data(model):
    import gguf  # noqa: PLC0415 - the reference implementation, tests only

    for entry in model["files"]:
        ours = header.read_header(entry["path"])
        assert ours["data_offset"] == gguf.GGUFReader(entry["path"]).data_offset
        assert ours["header_bytes"] <= ours["data_offset"] < ours["header_bytes"] + 32
