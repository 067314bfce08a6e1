"""A draft's vocabulary against its target's, from tiny GGUF headers written by the gguf package: the token list is
fingerprinted while the header is read (count, sha256, the prefixes llama.cpp compares), and ``vocabulary_problem``
applies llama.cpp's rule (common/speculative.cpp, common_speculative_are_compatible) - one test per rule."""

from __future__ import annotations

import hashlib
import struct

import gguf
import pytest
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as header

WORDS = ["<unk>", "<s>", "</s>", *(f"<0x{byte:02X}>" for byte in range(256)), "▁the", "▁cat", "▁sat", "▁on", "▁mat"]


def write(path, tokens=WORDS, model="llama", bos=1, eos=2, add_bos=None):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def vocabulary(path):
    return header.vocabulary(header.read_model(path))


@pytest.fixture
def target(tmp_path):
    return vocabulary(write(tmp_path / "target.gguf"))


def problem(target, tmp_path, **draft):
    return header.vocabulary_problem(target, vocabulary(write(tmp_path / "draft.gguf", **draft)))


def test_the_fingerprint_is_the_token_lists_count_and_sha256(tmp_path):
    path = write(tmp_path / "m.gguf")
    found = vocabulary(path)
    raw = b"".join(struct.pack("<Q", len(word.encode())) + word.encode() for word in WORDS)
    assert found["count"] == len(WORDS) == len(gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"].data)
    assert found["sha256"] == hashlib.sha256(raw).hexdigest()
    assert (found["model"], found["bos"], found["eos"], found["add_bos"]) == ("llama", 1, 2, None)
    # One prefix digest per count a list up to 128 shorter may have; the last covers tokens 5 to the end.
    assert found["prefix_start"] == len(WORDS) - 128 and len(found["prefix_digests"]) == 129
    tail = b"".join(struct.pack("<Q", len(word.encode())) + word.encode() for word in WORDS[5:])
    assert found["prefix_digests"][-1] == hashlib.sha256(tail).hexdigest()[:16]
    # The list itself is summarised by its length unless asked for, as before.
    assert header.read_model(path)["metadata"]["tokenizer.ggml.tokens"] == len(WORDS)
    assert header.read_header(path, keep_arrays=True)["metadata"]["tokenizer.ggml.tokens"] == WORDS


def test_a_generated_model_carries_its_fingerprint(tmp_path):
    model = generate(tmp_path / "tiny", preset="tiny", shards=2, seed=1)
    found = vocabulary(model["files"][0]["path"])
    assert found["count"] == model["vocab_size"] and found["model"] == "llama"


def test_the_same_vocabulary_may_draft(target, tmp_path):
    assert problem(target, tmp_path) == ""


def test_another_tokenizer_type_may_not(target, tmp_path):
    assert (
        problem(target, tmp_path, model="gpt2") == "the tokenizers differ: the model's is 'llama', the draft's 'gpt2'"
    )


def test_another_bos_may_not(target, tmp_path):
    assert problem(target, tmp_path, bos=3) == "the tokenizers' bos differ: the model's is 1, the draft's 3"


def test_another_bos_is_not_compared_when_none_is_added(tmp_path):
    target = vocabulary(write(tmp_path / "t.gguf", add_bos=False))
    assert problem(target, tmp_path, bos=3, add_bos=False) == ""
    assert "add_bos differ" in problem(target, tmp_path, add_bos=True)


def test_another_eos_may_not(target, tmp_path):
    assert problem(target, tmp_path, eos=4) == "the tokenizers' eos differ: the model's is 2, the draft's 4"


def test_a_list_padded_by_up_to_128_tokens_may_draft(tmp_path):
    """A family's larger model often pads its list to a rounder size: llama.cpp accepts a difference up to 128."""
    padded = vocabulary(write(tmp_path / "t.gguf", tokens=WORDS + [f"[PAD{i}]" for i in range(128)]))
    assert problem(padded, tmp_path) == ""
    further = vocabulary(write(tmp_path / "t.gguf", tokens=WORDS + [f"[PAD{i}]" for i in range(129)]))
    assert (
        problem(further, tmp_path)
        == f"the model has {len(WORDS) + 129} tokens and the draft {len(WORDS)}: more than 128 apart"
    )


def test_a_token_that_differs_where_llama_cpp_compares_may_not(target, tmp_path):
    changed = [*WORDS]
    changed[-2] = "▁dog"
    assert problem(target, tmp_path, tokens=changed) == (
        f"the token lists differ: tokens 5 to {len(WORDS) - 1}, which llama.cpp compares, are not the same (by their "
        "sha256)"
    )


def test_the_first_five_tokens_and_a_longer_lists_tail_are_not_compared(tmp_path):
    target = vocabulary(write(tmp_path / "t.gguf", tokens=WORDS + ["▁extra"]))
    special = [*WORDS]
    special[3] = "<0xFF-special>"  # ids below 5: llama.cpp starts at SPEC_VOCAB_CHECK_START_TOKEN_ID
    assert problem(target, tmp_path, tokens=special) == ""


def test_a_model_without_a_token_list_cannot_be_judged(target, tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "bare.gguf"), "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert vocabulary(str(tmp_path / "bare.gguf")) is None
    assert "no token list" in header.vocabulary_problem(target, None)
