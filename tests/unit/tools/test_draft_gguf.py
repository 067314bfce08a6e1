"""tools/draft_gguf.py: a draft cut from a model keeps its first N blocks, its own embeddings, output head and tokenizer
byte for byte (so its vocabulary is the model's by llama.cpp's rule), and says N in its metadata."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import draft_gguf
import gguf
import numpy as np
import pytest
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf_header
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as planner


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("model"), preset="tiny", shards=1, seed=4)


def test_the_draft_keeps_the_first_blocks_and_everything_that_is_no_block(model, tmp_path):
    source = model["files"][0]["path"]
    out = draft_gguf.cut(source, 3, str(tmp_path / "draft.gguf"))
    original, draft = gguf.GGUFReader(source), gguf.GGUFReader(out["path"])
    wanted = [t.name for t in original.tensors if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < 3]
    assert [t.name for t in draft.tensors] == wanted and out["tensors"] == len(wanted)
    assert {"token_embd.weight", "output.weight", "output_norm.weight"} <= set(wanted)
    by_name = {t.name: t for t in original.tensors}
    for tensor in draft.tensors:  # every kept tensor byte for byte, in its own type and shape
        same = by_name[tensor.name]
        assert tensor.tensor_type == same.tensor_type and list(tensor.shape) == list(same.shape)
        assert np.array_equal(np.asarray(tensor.data), np.asarray(same.data)), tensor.name
    assert out["bytes"] == sum(int(t.n_bytes) for t in draft.tensors)
    assert (out["blocks"], out["of"]) == (3, model["block_count"])
    assert draft.fields["llama.block_count"].contents() == 3
    assert draft.fields["general.name"].contents().endswith(f", first 3 of {model['block_count']} blocks")
    # The planner reads it as a model of 3 layers.
    assert planner.summarize(gguf_header.read_model(out["path"]))["n_layer"] == 3


def test_the_drafts_vocabulary_is_the_models(model, tmp_path):
    source = model["files"][0]["path"]
    out = draft_gguf.cut(source, 1, str(tmp_path / "draft.gguf"))
    ours, theirs = (gguf_header.vocabulary(gguf_header.read_model(path)) for path in (source, out["path"]))
    assert out["vocabulary"] == {"count": ours["count"], "sha256": ours["sha256"]}
    assert theirs == ours and gguf_header.vocabulary_problem(ours, theirs) == ""
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        assert gguf.GGUFReader(out["path"]).fields[key].contents() == gguf.GGUFReader(source).fields[key].contents()


def test_an_array_with_one_entry_per_block_is_cut_too(tmp_path):
    path = tmp_path / "per-layer.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(3)
    writer.add_key_value("llama.attention.head_count_kv", [1, 2, 4], gguf.GGUFValueType.ARRAY,
                         sub_type=gguf.GGUFValueType.UINT32)  # fmt: skip
    writer.add_token_list(["a", "b", "c"])  # 3 tokens: an array of one entry per block that is not the model's
    writer.add_tensor("token_embd.weight", np.ones((3, 4), dtype=np.float32))
    for block in range(3):
        writer.add_tensor(f"blk.{block}.attn_norm.weight", np.full(4, block, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = draft_gguf.cut(str(path), 2, str(tmp_path / "draft.gguf"))
    draft = gguf.GGUFReader(out["path"])
    assert draft.fields["llama.attention.head_count_kv"].contents() == [1, 2]
    assert draft.fields["tokenizer.ggml.tokens"].contents() == ["a", "b", "c"]
    assert [t.name for t in draft.tensors] == ["token_embd.weight", "blk.0.attn_norm.weight", "blk.1.attn_norm.weight"]


def test_a_bad_block_count_or_a_split_model_is_refused(model, tmp_path):
    source = model["files"][0]["path"]
    for blocks in (0, model["block_count"]):
        with pytest.raises(ValueError, match=f"--blocks must be from 1 to {model['block_count'] - 1}"):
            draft_gguf.cut(source, blocks, str(tmp_path / "x.gguf"))
    split = generate(tmp_path / "split", preset="tiny", shards=2, seed=4)
    with pytest.raises(ValueError, match="one shard of a split model: merge it first"):
        draft_gguf.cut(split["files"][0]["path"], 1, str(tmp_path / "y.gguf"))


def test_the_command_line_prints_the_draft(model, tmp_path):
    tool = Path(draft_gguf.__file__)
    argv = [sys.executable, str(tool), model["files"][0]["path"], "--blocks", "2", "--out", str(tmp_path / "d.gguf")]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
    printed = json.loads(done.stdout)
    assert printed["blocks"] == 2 and Path(printed["path"]).is_file()
    refused = subprocess.run(
        [*argv[:3], "--blocks", "0", *argv[5:]], check=False, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and refused.stderr.startswith("draft_gguf: --blocks must be from 1 to")
