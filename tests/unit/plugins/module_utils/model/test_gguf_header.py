"""The standard-library GGUF header reader agrees with the gguf package on real files."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as header


@pytest.fixture(scope="module")
def split_model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("split"), preset="tiny", shards=3, seed=3)


def test_block_table_matches_gguf_package():
    for ggml_type, (block, size) in header.GGML_BLOCKS.items():
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)] == (block, size)


def test_every_shard_matches_gguf_reader(split_model):
    for shard in split_model["files"]:
        ours = header.read_header(shard["path"], keep_arrays=True)
        theirs = gguf.GGUFReader(shard["path"])
        assert [t["name"] for t in ours["tensors"]] == [t.name for t in theirs.tensors]
        for mine, other in zip(ours["tensors"], theirs.tensors, strict=True):
            assert mine["bytes"] == int(other.n_bytes)
            assert mine["type"] == int(other.tensor_type)
            assert mine["dims"] == [int(d) for d in other.shape]
        assert ours["metadata"]["split.no"] == theirs.fields["split.no"].contents()
        assert len(ours["tensors"]) == shard["tensor_count"]


def test_read_model_finds_all_shards_from_the_first(split_model):
    first = split_model["files"][0]["path"]
    model = header.read_model(first)
    assert model["paths"] == [f["path"] for f in split_model["files"]]
    assert len(model["tensors"]) == split_model["tensor_count"]
    assert model["metadata"]["llama.block_count"] == split_model["block_count"]
    # Vocabulary arrays are summarised by their length.
    assert model["metadata"]["tokenizer.ggml.tokens"] == split_model["vocab_size"]


def test_missing_shard_is_named(split_model, tmp_path):
    first = split_model["files"][0]
    (tmp_path / first["name"]).write_bytes(Path(first["path"]).read_bytes())
    with pytest.raises(header.GGUFError, match="missing shard"):
        header.read_model(str(tmp_path / first["name"]))


def test_not_shard_one_is_refused(split_model):
    with pytest.raises(header.GGUFError, match="must be shard 1"):
        header.read_model(split_model["files"][1]["path"])


@pytest.mark.parametrize(
    "data, message",
    [
        (b"NOPE" + b"\0" * 20, "bad magic"),
        (b"GGUF\x07\0\0\0" + b"\0" * 16, "version 7"),
        (b"GGUF\x03\0\0\0\x01", "truncated"),
    ],
)
def test_bad_files_give_clear_errors(tmp_path, data, message):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(header.GGUFError, match=message):
        header.read_header(str(path))


def test_unknown_tensor_type_is_an_error():
    with pytest.raises(header.GGUFError, match="unknown ggml tensor type"):
        header.tensor_bytes(999, [32])
    with pytest.raises(header.GGUFError, match="whole number"):
        header.tensor_bytes(2, [33])
