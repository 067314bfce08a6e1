"""Deterministic tiny llama-architecture GGUF models, optionally split like ``llama-gguf-split``.

Tests and the demo use these models instead of downloading real ones. A generated model is a real,
loadable llama: llama.cpp's ``llama-server`` and ``rpc-server`` load it and greedy decoding gives finite
logits and a stable completion. The weights are random noise, so the text it writes means nothing.

Python API::

    from tiny_gguf import PRESETS, generate, split_plan

    result = generate("/tmp/model", preset="tiny", shards=3, seed=0)
    result["files"][0]["path"]          # the path to pass to ``llama-server -m``
    PRESETS["cache"].largest_tensor_bytes  # sizes without generating anything

Command line (prints the same dictionary as JSON)::

    python lab/tools/tiny_gguf.py --out DIR [--preset tiny] [--shards 3] [--seed 0] [--prefix NAME]
    python lab/tools/tiny_gguf.py --list-presets

File layout, identical to what ``llama-gguf-split --split`` writes (tools/gguf-split/gguf-split.cpp):

* ``shards == 1`` writes one plain, unsplit ``PREFIX.gguf`` with no ``split.*`` keys: the form most
  single-file models take. (llama.cpp would also accept ``PREFIX-00001-of-00001.gguf``; this module never
  writes that form, so "one file" and "split" are never confused.)
* ``shards == N > 1`` writes ``PREFIX-00001-of-0000N.gguf`` ... ``PREFIX-0000N-of-0000N.gguf`` (5 digits,
  1-based, the ``llama_split_path`` format). The first shard carries all model metadata (architecture,
  hyper-parameters, tokenizer); every shard, the first included, carries ``split.no`` (u16, 0-based),
  ``split.tensors.count`` (i32, tensors in the whole model) and ``split.count`` (u16), appended after
  the model metadata in that order (llama-gguf-split's; gguf-py's writer puts ``split.count`` second,
  which llama.cpp accepts as well). Shards after the first carry nothing else, not even
  ``general.architecture``: llama.cpp's loader (src/llama-model-loader.cpp) reads hyper-parameters from
  the first shard only, checks ``split.no`` of each later shard and that the tensor count across shards
  equals ``split.tensors.count``. Load a split model with ``-m`` pointing at shard 1; llama.cpp derives
  the other names from its prefix, so all shards must sit in one directory.

With one tensor per shard the files are byte-identical to what ``llama-gguf-split --split
--split-max-tensors 1`` makes of the unsplit model (checked by tests/unit/tools/test_tiny_gguf_llama.py).

Tensors are distributed over the shards in file order, in contiguous runs balanced by bytes. A shard
boundary never cuts through a transformer block unless more shards are asked for than there are blocks
(plus the token embedding and the output head); then tensors are distributed one by one, up to one tensor
per shard.

Determinism: the same arguments give byte-identical files (same numpy and ``gguf`` versions; the random
stream is ``numpy.random.default_rng(seed)`` consumed tensor by tensor in file order, so a tensor's values
do not depend on the shard count either). Each file is written under a temporary name and renamed into
place; a manifest ``PREFIX.manifest.json`` written last records the arguments and each file's sha256. A
second call with the same arguments finds the manifest, checks the files' sha256 and returns
``changed: False`` without writing. Files listed by an older manifest of the same prefix that the new
arguments do not produce (another shard count) are removed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import gguf
import numpy as np

#: Bumped whenever a change here changes the bytes written for the same arguments.
GENERATOR_VERSION = 1
ARCHITECTURE = "llama"
#: Standard deviation of the random weight matrices: small, so activations and logits stay finite.
WEIGHT_STD = 0.02
RMS_NORM_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0
#: Mode of the files written: readable by the service accounts that load the model.
FILE_MODE = 0o644

_SPLIT_PATH_FORMAT = "{prefix}-{number:05d}-of-{count:05d}.gguf"
_MANIFEST_SUFFIX = ".manifest.json"
#: Tensors of one transformer block, in the order convert_hf_to_gguf.py writes a llama's.
_BLOCK_TENSORS = (
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
)
#: Whole words at the start of the vocabulary, so that prompts like "hello world" tokenize as words.
# fmt: off
_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "it", "for", "on", "with", "as", "was", "at", "by", "from",
    "this", "be", "are", "or", "not", "we", "you", "they", "model", "cluster", "node", "host", "worker",
    "server", "token", "layer", "cache", "shard", "split", "tiny", "llama", "hello", "world", "one", "two",
    "three",
)
# fmt: on


class TensorSpec(NamedTuple):
    """One tensor of a preset.

    ``shape`` is in numpy (row-major) order, the reverse of ggml's ``ne``: ``attn_k`` of a model with
    width 256 and 128 key/value channels is ``(128, 256)`` here and ``ne = [256, 128]`` in llama.cpp.
    ``block`` is the transformer block the tensor belongs to, or ``None`` for the embedding and head.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    block: int | None

    @property
    def nbytes(self) -> int:
        """Size of the tensor's data in bytes (without GGUF alignment padding)."""
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Preset:
    """Hyper-parameters of one generated model. Sizes are derived, so nothing needs to be generated."""

    name: str
    description: str
    block_count: int
    embedding_length: int
    feed_forward_length: int
    head_count: int
    head_count_kv: int
    context_length: int = 2048
    vocab_size: int = 1024

    @property
    def head_dim(self) -> int:
        """Channels per attention head; also the rope dimension count."""
        return self.embedding_length // self.head_count

    @property
    def tensors(self) -> tuple[TensorSpec, ...]:
        """All tensors in file order: token_embd, the blocks, output_norm, output."""
        width, ffn, kv_width = self.embedding_length, self.feed_forward_length, self.head_dim * self.head_count_kv
        block_shapes = {
            "attn_norm": (width,),
            "attn_q": (width, width),
            "attn_k": (kv_width, width),
            "attn_v": (kv_width, width),
            "attn_output": (width, width),
            "ffn_norm": (width,),
            "ffn_gate": (ffn, width),
            "ffn_up": (ffn, width),
            "ffn_down": (width, ffn),
        }
        specs = [TensorSpec("token_embd.weight", (self.vocab_size, width), "float16", None)]
        for block in range(self.block_count):
            for suffix in _BLOCK_TENSORS:
                shape = block_shapes[suffix]
                dtype = "float32" if len(shape) == 1 else "float16"
                specs.append(TensorSpec(f"blk.{block}.{suffix}.weight", shape, dtype, block))
        specs.append(TensorSpec("output_norm.weight", (width,), "float32", None))
        specs.append(TensorSpec("output.weight", (self.vocab_size, width), "float16", None))
        return tuple(specs)

    @property
    def tensor_count(self) -> int:
        return len(self.tensors)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of tensor data in the whole model (the files add metadata and alignment padding)."""
        return sum(spec.nbytes for spec in self.tensors)

    @property
    def largest_tensor_bytes(self) -> int:
        return max(spec.nbytes for spec in self.tensors)

    def describe(self) -> dict[str, Any]:
        """The preset as a JSON-friendly dictionary, derived sizes included."""
        return {
            **asdict(self),
            "tensor_count": self.tensor_count,
            "tensor_bytes": self.tensor_bytes,
            "largest_tensor_bytes": self.largest_tensor_bytes,
        }


#: The preset table, read-only. ``tiny`` for unit and molecule tests, ``demo`` for the demo (the size the
#: platform notes measured with), ``cache`` to exercise the RPC tensor cache (tensors over 10 MiB).
PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        "tiny": Preset(
            name="tiny",
            description="8 blocks x 256 wide, about 13 MB: unit and molecule tests",
            block_count=8,
            embedding_length=256,
            feed_forward_length=768,
            head_count=4,
            head_count_kv=2,
        ),
        "demo": Preset(
            name="demo",
            description="16 blocks x 1024 wide, FFN 3584, about 440 MB: the demo",
            block_count=16,
            embedding_length=1024,
            feed_forward_length=3584,
            head_count=16,
            head_count_kv=4,
        ),
        # Every block matrix is over llama.cpp's 10 MiB RPC cache threshold (2304 x 2304 x 2 bytes = 10.125 MiB;
        # no grouped K/V, whose matrices would fall under it), so only output.weight and the norms (2% of the
        # bytes) cross the network again on a warm load - about the share of Qwen2.5-32B Q4_K_M's small tensors.
        "cache": Preset(
            name="cache",
            description="2 blocks x 2304 wide, FFN 4608 (10-20 MiB tensors), about 222 MB: RPC tensor cache",
            block_count=2,
            embedding_length=2304,
            feed_forward_length=4608,
            head_count=18,
            head_count_kv=18,
        ),
    }
)
DEFAULT_PRESET = "tiny"


def model_name(preset: str, seed: int) -> str:
    """The model's ``general.name``, also the default file prefix: ``llamarpc-tiny-seed0``."""
    return f"llamarpc-{preset}-seed{seed}"


def shard_file_names(prefix: str, shards: int) -> list[str]:
    """File names for ``shards`` files: ``[PREFIX.gguf]`` or ``PREFIX-00001-of-0000N.gguf`` ..."""
    if shards == 1:
        return [f"{prefix}.gguf"]
    return [_SPLIT_PATH_FORMAT.format(prefix=prefix, number=i + 1, count=shards) for i in range(shards)]


def split_plan(preset: str, shards: int) -> list[list[TensorSpec]]:
    """Which tensors go into which shard, in order, without writing anything.

    Shards are contiguous runs of the file order, balanced by bytes. The units distributed are whole
    blocks (with the token embedding and the output head as units of their own) when ``shards`` does not
    exceed their number, otherwise single tensors.

    Raises:
        ValueError: unknown preset, or ``shards`` not an integer between 1 and the preset's tensor count.
    """
    spec = _preset(preset)
    _check_shards(shards, spec)
    units = _layer_units(spec.tensors)
    if shards > len(units):
        units = [[tensor] for tensor in spec.tensors]
    cuts = _balanced_cuts([sum(t.nbytes for t in unit) for unit in units], shards)
    bounds = [0, *cuts, len(units)]
    return [[t for unit in units[start:end] for t in unit] for start, end in zip(bounds, bounds[1:], strict=False)]


def generate(
    out_dir: str | os.PathLike[str],
    preset: str = DEFAULT_PRESET,
    shards: int = 1,
    seed: int = 0,
    prefix: str | None = None,
) -> dict[str, Any]:
    """Write the model into ``out_dir`` (created if missing) unless it is already there, and describe it.

    Args:
        out_dir: directory for the files and the manifest.
        preset: a key of ``PRESETS``.
        shards: number of files, 1 (one unsplit file) to the preset's tensor count.
        seed: non-negative seed of the random weights.
        prefix: file name prefix; defaults to ``model_name(preset, seed)``.

    Returns:
        ``changed`` (bool), ``model_name``, ``preset``, ``seed``, ``shards``, ``prefix``, ``files`` (in
        shard order, each ``name``, ``path``, ``size``, ``sha256``, ``tensor_count``), ``total_bytes``,
        ``block_count``, ``embedding_length``, ``feed_forward_length``, ``head_count``, ``head_count_kv``,
        ``context_length``, ``vocab_size``, ``tensor_count``, ``largest_tensor_bytes``, ``manifest``.

    Raises:
        ValueError: an argument is out of range (nothing is written then).
    """
    spec = _preset(preset)
    _check_shards(shards, spec)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    name = model_name(spec.name, seed)
    prefix = name if prefix is None else prefix
    if (
        not isinstance(prefix, str)
        or not prefix
        or prefix.startswith(".")
        or os.sep in prefix
        or (os.altsep and os.altsep in prefix)
    ):
        raise ValueError(f"prefix must be a plain file name not starting with '.', got {prefix!r}")

    out = Path(out_dir)
    arguments = {"preset": spec.name, "shards": shards, "seed": seed, "prefix": prefix}
    manifest_path = out / f"{prefix}{_MANIFEST_SUFFIX}"
    previous = _read_manifest(manifest_path)
    if previous is not None and _manifest_matches(previous, arguments, out):
        return _result(previous, out, manifest_path, changed=False)

    out.mkdir(parents=True, exist_ok=True)
    names = shard_file_names(prefix, shards)
    files = _write_shards(out, names, split_plan(spec.name, shards), spec=spec, name=name, seed=seed)
    if previous is not None:
        for stale in {entry.get("name") for entry in previous["files"]} - set(names):
            if isinstance(stale, str) and Path(stale).name == stale:
                (out / stale).unlink(missing_ok=True)
    manifest = {
        "generator": "llamarpc.cluster tools/tiny_gguf.py",
        "generator_version": GENERATOR_VERSION,
        "arguments": arguments,
        "model_name": name,
        "files": files,
        "total_bytes": sum(entry["size"] for entry in files),
        **{key: value for key, value in spec.describe().items() if key not in {"name", "description"}},
    }
    _atomic_write_text(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return _result(manifest, out, manifest_path, changed=True)


def _preset(preset: str) -> Preset:
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[preset]


def _check_shards(shards: int, spec: Preset) -> None:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= spec.tensor_count:
        raise ValueError(
            f"shards must be an integer from 1 to {spec.tensor_count} (the tensor count of preset "
            f"{spec.name!r}), got {shards!r}"
        )


def _layer_units(tensors: Sequence[TensorSpec]) -> list[list[TensorSpec]]:
    """Group consecutive tensors of one block; tensors outside blocks are units of their own."""
    units: list[list[TensorSpec]] = []
    for tensor in tensors:
        if tensor.block is not None and units and units[-1][0].block == tensor.block:
            units[-1].append(tensor)
        else:
            units.append([tensor])
    return units


def _balanced_cuts(sizes: Sequence[int], parts: int) -> list[int]:
    """``parts - 1`` increasing cut indices into ``sizes`` leaving no part empty, each cut placed where the
    running total comes closest to an equal share (ties go to the earlier cut)."""
    running = [0]
    for size in sizes:
        running.append(running[-1] + size)
    total, cuts, start = running[-1], [], 0
    for k in range(1, parts):
        target = total * k / parts
        candidates = range(start + 1, len(sizes) - (parts - k) + 1)
        start = min(candidates, key=lambda i: abs(running[i] - target))
        cuts.append(start)
    return cuts


def _vocabulary(size: int) -> tuple[list[str], list[float], list[int]]:
    """A llama (SentencePiece) vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then word pieces.

    The word pieces are a few English words and generated syllables, so that prompts tokenize into more
    than bytes and a completion usually decodes to readable pieces.
    """
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{byte:02X}>" for byte in range(256))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    consonants, vowels, letters = "bcdfghjklmnprstvwz", "aeiou", "abcdefghijklmnopqrstuvwxyz"
    syllables = [c + v for c in consonants for v in vowels]
    candidates = [
        "\u2581",
        *(f"\u2581{word}" for word in _WORDS),
        *letters,
        *(f"\u2581{letter}" for letter in letters),
        *syllables,
        *(f"\u2581{syllable}" for syllable in syllables),
        *(syllable + c for syllable in syllables for c in consonants),
    ]
    pieces = list(dict.fromkeys(candidates))[: size - len(tokens)]
    if len(tokens) + len(pieces) < size:
        raise ValueError(f"vocab_size {size} is larger than this generator's vocabulary")
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(pieces))]
    return tokens + pieces, scores, [int(t) for t in types] + [int(gguf.TokenType.NORMAL)] * len(pieces)


def _add_model_metadata(writer: gguf.GGUFWriter, spec: Preset, name: str) -> None:
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.embedding_length)
    writer.add_block_count(spec.block_count)
    writer.add_feed_forward_length(spec.feed_forward_length)
    writer.add_head_count(spec.head_count)
    writer.add_head_count_kv(spec.head_count_kv)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    tokens, scores, types = _vocabulary(spec.vocab_size)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


class _LaterShardWriter(gguf.GGUFWriter):
    """GGUFWriter for shards after the first: llama-gguf-split gives them only the ``split.*`` keys, so the
    ``general.architecture`` key that GGUFWriter adds on construction is left out."""

    def add_architecture(self) -> None:
        """Add nothing: the architecture lives in the first shard only."""


def _tensor_values(rng: np.random.Generator, tensor: TensorSpec) -> np.ndarray:
    """Norm weights are ones (float32); matrices are small Gaussian noise (float16)."""
    if tensor.dtype == "float32":
        return np.ones(tensor.shape, dtype=np.float32)
    values = rng.standard_normal(tensor.shape, dtype=np.float32)
    values *= WEIGHT_STD
    return values.astype(np.float16)


def _write_shards(
    out: Path, names: list[str], plan: list[list[TensorSpec]], *, spec: Preset, name: str, seed: int
) -> list[dict[str, Any]]:
    """Write every shard under a temporary name, then rename all into place; return the file entries."""
    rng = np.random.default_rng(seed)
    temporaries: list[Path] = []
    try:
        for index, tensors in enumerate(plan):
            handle, temp_name = tempfile.mkstemp(dir=out, prefix=f".{names[index]}.", suffix=".tmp")
            os.close(handle)
            temporaries.append(Path(temp_name))
            _write_shard(temporaries[-1], index=index, count=len(plan), tensors=tensors, spec=spec, name=name, rng=rng)
        entries = []
        for temp, final_name, tensors in zip(temporaries, names, plan, strict=True):
            entries.append(
                {"name": final_name, "size": temp.stat().st_size, "sha256": _sha256(temp), "tensor_count": len(tensors)}
            )
            temp.chmod(FILE_MODE)
            temp.replace(out / final_name)
        return entries
    finally:
        for temp in temporaries:
            temp.unlink(missing_ok=True)


def _write_shard(
    path: Path,
    *,
    index: int,
    count: int,
    tensors: list[TensorSpec],
    spec: Preset,
    name: str,
    rng: np.random.Generator,
) -> None:
    """Write shard ``index`` of ``count`` (``count == 1``: the unsplit model), streaming tensor by tensor."""
    writer = (gguf.GGUFWriter if index == 0 else _LaterShardWriter)(path, ARCHITECTURE)
    try:
        if index == 0:
            _add_model_metadata(writer, spec, name)
        if count > 1:
            # llama-gguf-split's order: it sets split.count last (a placeholder first, re-set once the
            # shard count is known, and gguf_set_val moves a key it replaces to the end).
            writer.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_NO, index)
            writer.add_int32(gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, spec.tensor_count)
            writer.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_COUNT, count)
        for tensor in tensors:
            writer.add_tensor_info(tensor.name, tensor.shape, np.dtype(tensor.dtype), tensor.nbytes)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor in tensors:
            writer.write_tensor_data(_tensor_values(rng, tensor))
    finally:
        writer.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return None
    return manifest if all(isinstance(entry, dict) for entry in manifest["files"]) else None


def _manifest_matches(manifest: dict[str, Any], arguments: dict[str, Any], out: Path) -> bool:
    """True when the manifest records these arguments and every file it lists is there, unchanged."""
    if manifest.get("generator_version") != GENERATOR_VERSION or manifest.get("arguments") != arguments:
        return False
    names = [entry.get("name") for entry in manifest["files"]]
    if names != shard_file_names(arguments["prefix"], arguments["shards"]):
        return False
    for entry in manifest["files"]:
        path = out / entry["name"]
        if not path.is_file() or path.stat().st_size != entry.get("size") or _sha256(path) != entry.get("sha256"):
            return False
    return True


def _atomic_write_text(path: Path, text: str) -> None:
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        Path(temp_name).chmod(FILE_MODE)
        Path(temp_name).replace(path)
    finally:
        Path(temp_name).unlink(missing_ok=True)


def _result(manifest: dict[str, Any], out: Path, manifest_path: Path, changed: bool) -> dict[str, Any]:
    arguments = manifest["arguments"]
    files = [{**entry, "path": str((out / entry["name"]).absolute())} for entry in manifest["files"]]
    return {
        "changed": changed,
        "model_name": manifest["model_name"],
        **arguments,
        "files": files,
        "total_bytes": manifest["total_bytes"],
        **{
            key: manifest[key]
            for key in (
                "block_count",
                "embedding_length",
                "feed_forward_length",
                "head_count",
                "head_count_kv",
                "context_length",
                "vocab_size",
                "tensor_count",
                "largest_tensor_bytes",
            )
        },
        "manifest": str(manifest_path.absolute()),
    }


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--out", type=Path, help="directory to write the model files and manifest into")
    action.add_argument("--list-presets", action="store_true", help="print the preset table as JSON and exit")
    parser.add_argument("--preset", choices=list(PRESETS), default=DEFAULT_PRESET)
    parser.add_argument("--shards", type=int, default=1, help="number of files; 1 writes one unsplit file")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    parser.add_argument("--prefix", help="file name prefix (default: llamarpc-PRESET-seedSEED)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; prints JSON on stdout, errors on stderr (exit status 2)."""
    args = _parse_args(argv)
    if args.list_presets:
        print(json.dumps({name: spec.describe() for name, spec in PRESETS.items()}, indent=2))
        return 0
    try:
        result = generate(args.out, preset=args.preset, shards=args.shards, seed=args.seed, prefix=args.prefix)
    except ValueError as error:
        print(f"tiny_gguf: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
