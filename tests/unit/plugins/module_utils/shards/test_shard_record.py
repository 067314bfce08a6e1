"""The model record and what it allows to remove (_shard_record), on real files in a temporary model directory."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as sf
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_record as rec


def placed_file(model_dir, name, data=b"x" * 10):
    """A file as the collection places it, and its manifest entry (placed)."""
    path = model_dir / name
    path.write_bytes(data)
    info = path.stat()
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": "0" * 64, "placed": True}


@pytest.fixture
def three_models(tmp_path):
    """Models a (served first), b (served next) and c (staged), each with one placed file, b also with a link."""
    manifest = {name: placed_file(tmp_path, name) for name in ("a-1.gguf", "b-1.gguf", "c-1.gguf")}
    os.symlink("/mnt/llamarpc/node2/b-2.gguf", tmp_path / "b-2.gguf")
    record = {"models": {}, "served": []}
    record = rec.note_placed(record, "a", ["a-1.gguf"], {})
    record = rec.note_placed(record, "b", ["b-1.gguf"], {"b-2.gguf": "/mnt/llamarpc/node2/b-2.gguf"})
    record = rec.note_placed(record, "c", ["c-1.gguf"], {})
    record = rec.note_served(record, "a", {"files": ["/src/a-1.gguf"]}, 1)
    record = rec.note_served(record, "b", {"files": ["/src/b-1.gguf"]}, 1)
    return tmp_path, record, manifest


def test_model_id_is_stable_and_tells_splits_apart():
    five = [{"name": f"g-0000{n}-of-00005.gguf", "sha256": str(n)} for n in range(1, 6)]
    three = [{"name": f"g-0000{n}-of-00003.gguf", "sha256": str(n)} for n in range(1, 4)]
    assert rec.model_id(five) == rec.model_id([dict(s) for s in five])
    assert rec.model_id(five) != rec.model_id(three)
    assert len(rec.model_id(five)) == 16


def test_served_is_newest_first_and_trimmed_to_keep_previous():
    record = {"models": {}, "served": []}
    for model in ("a", "b", "c"):
        record = rec.note_served(record, model, {"files": [model]}, 1)
    assert rec.served_ids(record) == ["c", "b"]
    record = rec.note_served(record, "b", {"files": ["b"]}, 1)  # a rollback to b
    assert rec.served_ids(record) == ["b", "c"]
    assert rec.served_ids(rec.note_served(record, "d", {}, 0)) == ["d"]


def test_which_models_are_kept():
    served = ["b", "a"]  # b serves now, a before it
    assert rec.keep_models(served, "c", 1) == ["c", "b"]  # staging: the serving one stays until the switch
    assert rec.keep_models(served, "c", 0) == ["c", "b"]
    assert rec.keep_models(served, "c", 2) == ["c", "b", "a"]
    assert rec.keep_models(["c", "b", "a"], "c", 1, switched=True) == ["c", "b"]
    assert rec.keep_models(["c", "b", "a"], "c", 0, switched=True) == ["c"]
    assert rec.keep_models(served, "c", 1, replace="in_place") == ["c"]
    assert rec.keep_models(served, "a", 1) == ["a", "b"]  # a rollback target is the new model
    with pytest.raises(ValueError, match="replace"):
        rec.keep_models(served, "c", 1, replace="sometimes")


def test_prune_removes_only_placed_files_of_models_not_kept(three_models):
    model_dir, record, manifest = three_models
    record, manifest, removed, foreign, freed = rec.prune(str(model_dir), record, manifest, ["c", "b"])
    assert removed == ["a-1.gguf"] and freed == 10 and foreign == []
    assert not (model_dir / "a-1.gguf").exists()
    assert (model_dir / "b-1.gguf").exists() and os.path.islink(model_dir / "b-2.gguf")
    assert set(record["models"]) == {"b", "c"} and "a-1.gguf" not in manifest


def test_links_of_a_model_not_kept_go_when_they_still_point_where_they_were_made(three_models):
    model_dir, record, manifest = three_models
    _record, _manifest, removed, _foreign, _freed = rec.prune(str(model_dir), record, manifest, ["c"])
    assert removed == ["a-1.gguf", "b-1.gguf", "b-2.gguf"]
    assert not os.path.lexists(model_dir / "b-2.gguf")


def test_a_file_the_collection_did_not_place_is_never_removed(three_models):
    """A user's file under an old model's name (not placed), a placed file changed since, a link pointing elsewhere,
    and a file nobody recorded: all stay."""
    model_dir, record, manifest = three_models
    (model_dir / "notes.txt").write_text("mine")
    manifest["a-1.gguf"]["placed"] = False  # verified and used, but the user's copy
    (model_dir / "b-1.gguf").write_bytes(b"y" * 11)  # replaced since the collection placed it
    os.unlink(model_dir / "b-2.gguf")
    os.symlink("/somewhere/else", model_dir / "b-2.gguf")
    _record, manifest, removed, foreign, freed = rec.prune(str(model_dir), record, manifest, ["c"])
    assert removed == [] and freed == 0
    assert foreign == ["a-1.gguf", "b-1.gguf", "b-2.gguf"]
    for name in ("notes.txt", "a-1.gguf", "b-1.gguf", "b-2.gguf", "c-1.gguf"):
        assert os.path.lexists(model_dir / name), name


def test_check_mode_names_what_would_go_and_removes_nothing(three_models):
    model_dir, record, manifest = three_models
    _record, _manifest, removed, _foreign, freed = rec.prune(str(model_dir), record, manifest, ["c"], check=True)
    assert removed == ["a-1.gguf", "b-1.gguf", "b-2.gguf"] and freed == 20
    assert (model_dir / "a-1.gguf").exists() and os.path.lexists(model_dir / "b-2.gguf")


def test_a_file_shared_with_a_kept_model_stays(three_models):
    model_dir, record, manifest = three_models
    record = rec.note_placed(record, "c", ["c-1.gguf", "a-1.gguf"], {})  # c uses a's file too
    _record, _manifest, removed, _foreign, _freed = rec.prune(str(model_dir), record, manifest, ["c"])
    assert "a-1.gguf" not in removed and (model_dir / "a-1.gguf").exists()


def test_report_footprint_and_reclaimable_bytes(three_models):
    model_dir, record, manifest = three_models
    rec.write(str(model_dir), record)
    sf.write_json(str(model_dir / sf.MANIFEST), manifest)
    report = rec.report(str(model_dir))
    assert report["placed"] == {"a-1.gguf": 10, "b-1.gguf": 10, "c-1.gguf": 10}
    assert [entry["model"] for entry in report["served"]] == ["b", "a"]
    assert rec.footprint(report, "b") == 10
    assert rec.reclaimable(report, ["c", "b"], ["c-1.gguf"]) == 10  # a's file
    assert rec.reclaimable(report, ["c"], ["c-1.gguf"]) == 20
    assert rec.reclaimable(report, ["c"], ["c-1.gguf", "a-1.gguf"]) == 10  # the new model uses a's file
