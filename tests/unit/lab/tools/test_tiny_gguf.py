"""Unit tests of lab/tools/tiny_gguf.py: preset table, shard plans, GGUF layout, determinism, idempotency, CLI."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import tiny_gguf

SPLIT_KEYS = {"split.no", "split.count", "split.tensors.count"}
TINY = tiny_gguf.PRESETS["tiny"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kv(reader: gguf.GGUFReader) -> dict[str, object]:
    """The key/value metadata of a GGUF file, without the reader's GGUF.* header pseudo-fields."""
    return {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}


@pytest.fixture(scope="module")
def split_model(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return tiny_gguf.generate(tmp_path_factory.mktemp("split"), shards=3)


@pytest.fixture(scope="module")
def single_model(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return tiny_gguf.generate(tmp_path_factory.mktemp("single"))


# --- preset table -------------------------------------------------------------------------------------


def test_presets_sizes_from_the_table() -> None:
    tiny, demo, cache = (tiny_gguf.PRESETS[name] for name in ("tiny", "demo", "cache"))
    assert tiny.tensor_bytes < 32 * 2**20
    assert (demo.block_count, demo.embedding_length) == (16, 1024)
    assert 400e6 < demo.tensor_bytes < 480e6
    # llama.cpp's RPC tensor cache only stores tensors over 10 MiB: cache must have some, demo none.
    assert cache.largest_tensor_bytes > 10 * 2**20
    assert demo.largest_tensor_bytes < 10 * 2**20
    assert cache.tensor_bytes < 256 * 2**20
    # Like a real Q4_K_M model, almost every byte that goes to the workers is in a cached tensor (a warm reload
    # sends the rest): under 5% in tensors of 10 MiB or less.
    offloaded = [spec for spec in cache.tensors if spec.name != "token_embd.weight"]
    small = sum(spec.nbytes for spec in offloaded if spec.nbytes <= 10 * 2**20)
    assert small / sum(spec.nbytes for spec in offloaded) < 0.05
    for preset in tiny_gguf.PRESETS.values():
        assert preset.tensor_count == 3 + 9 * preset.block_count
        assert preset.embedding_length % preset.head_count == 0
        assert preset.head_count % preset.head_count_kv == 0


def test_preset_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        tiny_gguf.PRESETS["huge"] = TINY  # type: ignore[index]


def test_tensor_shapes_follow_llama_layout() -> None:
    shapes = {spec.name: (spec.shape, spec.dtype) for spec in TINY.tensors}
    width, ffn, kv_width = 256, 768, TINY.head_dim * TINY.head_count_kv
    assert shapes["token_embd.weight"] == ((TINY.vocab_size, width), "float16")
    assert shapes["blk.7.attn_k.weight"] == ((kv_width, width), "float16")
    assert shapes["blk.0.ffn_down.weight"] == ((width, ffn), "float16")
    assert shapes["blk.3.ffn_norm.weight"] == ((width,), "float32")
    assert shapes["output.weight"] == ((TINY.vocab_size, width), "float16")
    assert [spec.name for spec in TINY.tensors][:2] == ["token_embd.weight", "blk.0.attn_norm.weight"]
    assert [spec.name for spec in TINY.tensors][-2:] == ["output_norm.weight", "output.weight"]


def test_vocabulary_fills_every_preset_exactly() -> None:
    for preset in tiny_gguf.PRESETS.values():
        tokens, scores, types = tiny_gguf._vocabulary(preset.vocab_size)
        assert len(tokens) == len(set(tokens)) == len(scores) == len(types) == preset.vocab_size
    with pytest.raises(ValueError, match="vocab_size 100000 is larger"):
        tiny_gguf._vocabulary(100_000)


# --- naming and shard plans ---------------------------------------------------------------------------


def test_shard_file_names() -> None:
    assert tiny_gguf.shard_file_names("m", 1) == ["m.gguf"]
    assert tiny_gguf.shard_file_names("m", 3) == [
        "m-00001-of-00003.gguf",
        "m-00002-of-00003.gguf",
        "m-00003-of-00003.gguf",
    ]
    assert tiny_gguf.shard_file_names("m", 12)[-1] == "m-00012-of-00012.gguf"


@pytest.mark.parametrize("name", list(tiny_gguf.PRESETS))
def test_split_plan_for_every_shard_count(name: str) -> None:
    preset = tiny_gguf.PRESETS[name]
    for shards in range(1, preset.tensor_count + 1):
        plan = tiny_gguf.split_plan(name, shards)
        assert len(plan) == shards
        assert all(plan), f"{shards} shards: an empty shard"
        assert [t for shard in plan for t in shard] == list(preset.tensors), "tensors out of order"
        if shards <= preset.block_count + 2:
            blocks_per_shard = [{t.block for t in shard if t.block is not None} for shard in plan]
            for first, second in zip(blocks_per_shard, blocks_per_shard[1:], strict=False):
                assert not first & second, f"{shards} shards: a block is cut in two"


def test_split_plan_balances_bytes() -> None:
    sizes = [sum(t.nbytes for t in shard) for shard in tiny_gguf.split_plan("demo", 4)]
    assert max(sizes) < 1.5 * min(sizes)


@pytest.mark.parametrize("shards", [0, -1, TINY.tensor_count + 1, True, 1.5, "2"])
def test_split_plan_rejects_bad_shard_counts(shards: object) -> None:
    with pytest.raises(ValueError, match="shards must be an integer from 1 to 75"):
        tiny_gguf.split_plan("tiny", shards)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"shards": 0}, "shards must be"),
        ({"shards": TINY.tensor_count + 1}, "shards must be"),
        ({"preset": "huge"}, "unknown preset 'huge'; choose one of tiny, demo, cache"),
        ({"seed": -1}, "seed must be a non-negative integer"),
        ({"seed": "0"}, "seed must be a non-negative integer"),
        ({"prefix": ""}, "prefix must be a plain file name"),
        ({"prefix": "a/b"}, "prefix must be a plain file name"),
        ({"prefix": ".hidden"}, "prefix must be a plain file name"),
        ({"prefix": Path("m")}, "prefix must be a plain file name"),
    ],
)
def test_generate_rejects_bad_input_and_writes_nothing(tmp_path: Path, arguments: dict, message: str) -> None:
    out = tmp_path / "model"
    with pytest.raises(ValueError, match=message):
        tiny_gguf.generate(out, **arguments)
    assert not out.exists()


# --- the files as llama.cpp reads them ----------------------------------------------------------------


def test_split_model_files_and_result(split_model: dict) -> None:
    names = [entry["name"] for entry in split_model["files"]]
    assert names == tiny_gguf.shard_file_names("llamarpc-tiny-seed0", 3)
    for entry in split_model["files"]:
        path = Path(entry["path"])
        assert path.stat().st_size == entry["size"]
        assert sha256(path) == entry["sha256"]
        assert path.stat().st_mode & 0o777 == tiny_gguf.FILE_MODE
    assert split_model["total_bytes"] == sum(entry["size"] for entry in split_model["files"])
    assert split_model["tensor_count"] == TINY.tensor_count
    assert split_model["largest_tensor_bytes"] == TINY.largest_tensor_bytes
    assert (split_model["block_count"], split_model["embedding_length"]) == (8, 256)
    assert (split_model["head_count"], split_model["head_count_kv"], split_model["context_length"]) == (4, 2, 2048)
    assert sorted(p.name for p in Path(split_model["files"][0]["path"]).parent.iterdir()) == sorted(
        [*names, "llamarpc-tiny-seed0.manifest.json"]
    ), "temporary files left behind"


def test_first_shard_has_llama_metadata_and_tokenizer(split_model: dict) -> None:
    meta = kv(gguf.GGUFReader(split_model["files"][0]["path"]))
    assert meta["general.architecture"] == "llama"
    assert meta["general.name"] == "llamarpc-tiny-seed0"
    expected = {
        "llama.context_length": 2048,
        "llama.embedding_length": 256,
        "llama.block_count": 8,
        "llama.feed_forward_length": 768,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.rope.dimension_count": 64,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    assert {key: meta[key] for key in expected} == expected
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    tokens, scores, types = (meta[f"tokenizer.ggml.{k}"] for k in ("tokens", "scores", "token_type"))
    assert len(tokens) == len(scores) == len(types) == TINY.vocab_size
    assert len(set(tokens)) == len(tokens), "duplicate tokens"
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3:259] == [f"<0x{byte:02X}>" for byte in range(256)]
    assert (
        types[:259]
        == [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    )
    assert set(types[259:]) == {gguf.TokenType.NORMAL}
    assert "\u2581the" in tokens


def test_split_keys_in_every_shard_like_llama_gguf_split(split_model: dict) -> None:
    readers = [gguf.GGUFReader(entry["path"]) for entry in split_model["files"]]
    for index, reader in enumerate(readers):
        meta = kv(reader)
        assert {key: meta[key] for key in SPLIT_KEYS} == {
            "split.no": index,
            "split.count": 3,
            "split.tensors.count": TINY.tensor_count,
        }
        assert reader.fields["split.no"].types == [gguf.GGUFValueType.UINT16]
        assert reader.fields["split.count"].types == [gguf.GGUFValueType.UINT16]
        assert reader.fields["split.tensors.count"].types == [gguf.GGUFValueType.INT32]
        if index == 0:
            assert list(meta)[-3:] == ["split.no", "split.tensors.count", "split.count"]
        else:
            assert set(meta) == SPLIT_KEYS, "shards after the first carry only the split keys"
    names = [tensor.name for reader in readers for tensor in reader.tensors]
    assert len(names) == TINY.tensor_count
    assert names == [spec.name for spec in TINY.tensors], "every tensor exactly once, in order"
    assert [len(reader.tensors) for reader in readers] == [entry["tensor_count"] for entry in split_model["files"]]


def test_single_file_is_unsplit(single_model: dict) -> None:
    assert [entry["name"] for entry in single_model["files"]] == ["llamarpc-tiny-seed0.gguf"]
    reader = gguf.GGUFReader(single_model["files"][0]["path"])
    assert not SPLIT_KEYS & set(kv(reader))
    assert [tensor.name for tensor in reader.tensors] == [spec.name for spec in TINY.tensors]


def test_weights_small_finite_and_independent_of_sharding(single_model: dict, split_model: dict) -> None:
    single = {t.name: t for t in gguf.GGUFReader(single_model["files"][0]["path"]).tensors}
    split = {t.name: t for entry in split_model["files"] for t in gguf.GGUFReader(entry["path"]).tensors}
    for spec in TINY.tensors:
        tensor = single[spec.name]
        assert tensor.tensor_type == (
            gguf.GGMLQuantizationType.F32 if spec.dtype == "float32" else gguf.GGMLQuantizationType.F16
        )
        assert list(reversed(tensor.shape.tolist())) == list(spec.shape)
        assert np.array_equal(tensor.data, split[spec.name].data), spec.name
        values = tensor.data.astype(np.float32)
        assert np.isfinite(values).all()
        if spec.dtype == "float32":
            assert (values == 1).all(), "norm weights are ones"
        else:
            assert 0.015 < values.std() < 0.025
            assert np.abs(values).max() < 0.2


# --- determinism and idempotency ----------------------------------------------------------------------


def test_same_arguments_same_bytes_other_seed_other_bytes(tmp_path: Path, split_model: dict) -> None:
    again = tiny_gguf.generate(tmp_path / "again", shards=3)
    assert [e["sha256"] for e in again["files"]] == [e["sha256"] for e in split_model["files"]]
    other = tiny_gguf.generate(tmp_path / "other", shards=3, seed=1, prefix="llamarpc-tiny-seed0")
    assert other["model_name"] == "llamarpc-tiny-seed1"
    for mine, theirs in zip(other["files"], split_model["files"], strict=True):
        assert mine["name"] == theirs["name"]
        assert mine["sha256"] != theirs["sha256"]


def test_second_run_skips_and_damage_is_repaired(tmp_path: Path) -> None:
    first = tiny_gguf.generate(tmp_path, shards=2, prefix="m")
    assert first["changed"] is True
    stamps = [Path(e["path"]).stat().st_mtime_ns for e in first["files"]]
    second = tiny_gguf.generate(tmp_path, shards=2, prefix="m")
    assert second == {**first, "changed": False}
    assert [Path(e["path"]).stat().st_mtime_ns for e in first["files"]] == stamps, "files rewritten"

    damaged = Path(first["files"][1]["path"])
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0xFF
    damaged.write_bytes(bytes(data))
    repaired = tiny_gguf.generate(tmp_path, shards=2, prefix="m")
    assert repaired["changed"] is True
    assert sha256(damaged) == first["files"][1]["sha256"]


@pytest.mark.parametrize("garbage", ["", "[]", '{"files": 3}', '{"files": [1]}', "{not json"])
def test_unreadable_manifest_is_ignored(tmp_path: Path, garbage: str) -> None:
    (tmp_path / "m.manifest.json").write_text(garbage)
    assert tiny_gguf._read_manifest(tmp_path / "m.manifest.json") is None


def test_damaged_manifest_means_regenerate(tmp_path: Path) -> None:
    first = tiny_gguf.generate(tmp_path, prefix="m")
    (tmp_path / "m.manifest.json").write_text('{"files": [1]}')
    again = tiny_gguf.generate(tmp_path, prefix="m")
    assert again == {**first, "changed": True}
    assert json.loads((tmp_path / "m.manifest.json").read_text())["files"] == [
        {key: value for key, value in entry.items() if key != "path"} for entry in first["files"]
    ]


def test_other_shard_count_replaces_the_old_files(tmp_path: Path) -> None:
    tiny_gguf.generate(tmp_path, shards=3, prefix="m")
    result = tiny_gguf.generate(tmp_path, shards=2, prefix="m")
    assert result["changed"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "m-00001-of-00002.gguf",
        "m-00002-of-00002.gguf",
        "m.manifest.json",
    ]
    manifest = json.loads((tmp_path / "m.manifest.json").read_text())
    assert manifest["arguments"] == {"preset": "tiny", "shards": 2, "seed": 0, "prefix": "m"}
    assert [e["sha256"] for e in manifest["files"]] == [e["sha256"] for e in result["files"]]


# --- command line -------------------------------------------------------------------------------------


def test_cli_prints_the_result_as_json(tmp_path: Path) -> None:
    command = [sys.executable, tiny_gguf.__file__, "--out", str(tmp_path), "--shards", "2", "--seed", "3"]
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    result = json.loads(completed.stdout)
    assert result["changed"] is True
    assert result["model_name"] == "llamarpc-tiny-seed3"
    assert [e["name"] for e in result["files"]] == tiny_gguf.shard_file_names("llamarpc-tiny-seed3", 2)
    assert result == {**tiny_gguf.generate(tmp_path, shards=2, seed=3), "changed": True}


def test_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tiny_gguf.main(["--out", str(tmp_path), "--shards", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "shards must be an integer from 1 to 75" in captured.err


def test_cli_lists_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert tiny_gguf.main(["--list-presets"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table == {name: preset.describe() for name, preset in tiny_gguf.PRESETS.items()}


def test_failure_midway_leaves_the_previous_model_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = tiny_gguf.generate(tmp_path, shards=2, prefix="m")
    listing = sorted(p.name for p in tmp_path.iterdir())
    calls = []

    def failing_values(rng: np.random.Generator, tensor: tiny_gguf.TensorSpec) -> np.ndarray:
        calls.append(tensor.name)
        if tensor.name == "output.weight":
            raise OSError("disk full")
        return np.zeros(tensor.shape, dtype=tensor.dtype)

    monkeypatch.setattr(tiny_gguf, "_tensor_values", failing_values)
    with pytest.raises(OSError, match="disk full"):
        tiny_gguf.generate(tmp_path, shards=2, seed=1, prefix="m")
    assert calls[-1] == "output.weight", "the failure came after the first shard was complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == listing, "partial or temporary files left behind"
    assert [sha256(Path(e["path"])) for e in before["files"]] == [e["sha256"] for e in before["files"]]
