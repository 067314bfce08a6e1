"""gguf_vocabulary_check on the controller: shard 1's header of the model and of the draft, read from controller files
(tiny GGUFs written by the gguf package), compared by llama.cpp's rule; a draft of another vocabulary fails it."""

from __future__ import annotations

import gguf
from action_harness import run_action
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.action.gguf_vocabulary_check import ActionModule

WORDS = ["<unk>", "<s>", "</s>", *(f"<0x{byte:02X}>" for byte in range(256)), "▁the", "▁cat"]


def write(path, tokens=WORDS, model="llama"):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def check(model, draft):
    result, calls = run_action(ActionModule, {"model": {"files": model}, "draft": {"files": draft}}, answers=[])
    assert calls == []  # nothing asked of any host
    return result


def test_a_split_model_and_a_draft_of_its_vocabulary_pass(tmp_path):
    split = generate(tmp_path / "model", preset="tiny", shards=3, seed=2)
    draft = generate(tmp_path / "draft", preset="tiny", shards=1, seed=3)
    result = check([shard["path"] for shard in split["files"]], [draft["files"][0]["path"]])
    assert not result.get("failed") and result["compatible"] is True
    assert result["model"]["count"] == result["draft"]["count"] == split["vocab_size"]
    assert result["model"]["sha256"] == result["draft"]["sha256"]
    # Shard 1 of each, read locally: no request, nothing but the header.
    assert [(read["role"], read["requests"]) for read in result["header_reads"]] == [("model", 0), ("draft", 0)]
    assert result["header_reads"][0]["name"] == split["files"][0]["name"]
    assert result["msg"] == f"the draft's vocabulary is the model's ({split['vocab_size']} tokens; llama.cpp's rule)"


def test_a_draft_of_another_vocabulary_fails_with_why(tmp_path):
    changed = [*WORDS[:-1], "▁dog"]
    result = check([write(tmp_path / "m.gguf")], [write(tmp_path / "d.gguf", changed)])
    assert result["failed"] is True and result["compatible"] is False
    assert result["msg"] == (
        f"the draft model cannot draft for the model: the token lists differ: tokens 5 to {len(WORDS) - 1}, which "
        "llama.cpp compares, are not the same (by their sha256)"
    )
    other = check([write(tmp_path / "m.gguf")], [write(tmp_path / "g.gguf", model="gpt2")])
    assert other["msg"].endswith("the tokenizers differ: the model's is 'llama', the draft's 'gpt2'")


def test_a_source_must_be_one_and_readable(tmp_path):
    model = write(tmp_path / "m.gguf")
    both, _calls = run_action(
        ActionModule,
        {"model": {"files": [model]}, "draft": {"files": [model], "hf_repo": "o/r", "hf_pattern": "*.gguf"}},
        answers=[],
    )
    assert both["failed"] and both["msg"] == (
        "cannot read the draft's GGUF header: give exactly one source of hf_repo, urls and files (got hf_repo, files)"
    )
    (tmp_path / "not.gguf").write_bytes(b"NOPE" + b"\0" * 32)
    bad = check([model], [str(tmp_path / "not.gguf")])
    assert bad["failed"] and bad["msg"] == "cannot read the draft's GGUF header: not.gguf: not a GGUF file (bad magic)"
