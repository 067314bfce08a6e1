"""Old models kept for a rollback, then removed (gguf_shard_place with model / keep_models, gguf_model_served), run
as modules on a real model directory: three models one after the other, a file the collection did not place in the
same directory, check mode."""

from __future__ import annotations

import hashlib
import json

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as sf
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_record as rec
from ansible_collections.llamarpc.cluster.plugins.modules import gguf_model_served, gguf_shard_facts, gguf_shard_place


def source(tmp_path, name, data):
    """A shard on the 'controller' (a local file given as src) and its entry."""
    path = tmp_path / "src" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "src": str(path)}


@pytest.fixture
def models(tmp_path):
    """Three one-shard models and the model directory."""
    found = {}
    for letter in "abc":
        shard = source(tmp_path, f"{letter}-00001-of-00001.gguf", letter.encode() * 1000)
        found[letter] = {"id": rec.model_id([shard]), "shards": [shard]}
    return tmp_path / "models", found


def switch(run_module, model_dir, model, served, keep_previous=1):
    """What site.yml does on one host: stage (prune what is not kept, place), then record served and prune again."""
    keep = rec.keep_models(served, model["id"], keep_previous)
    args = {"model_dir": str(model_dir), "shards": model["shards"], "model": model["id"], "keep_models": keep}
    staged = run_module(gguf_shard_place, args)
    assert not staged.failed, staged.result
    served_args = {"model_dir": str(model_dir), "model": model["id"], "keep_previous": keep_previous}
    done = run_module(gguf_model_served, served_args)
    after = run_module(gguf_shard_place, {**args, "keep_models": done.result["keep"]})
    return staged.result, done.result, after.result


def test_the_previous_model_stays_older_ones_go_and_a_foreign_file_survives(run_module, models):
    model_dir, found = models
    switch(run_module, model_dir, found["a"], [])
    (model_dir / "my-notes.gguf").write_bytes(b"not the collection's")
    staged, served, _after = switch(run_module, model_dir, found["b"], [found["a"]["id"]])
    assert staged["removed"] == [] and served["keep"] == [found["b"]["id"], found["a"]["id"]]
    assert (model_dir / "a-00001-of-00001.gguf").exists()  # the rollback target
    staged, served, _after = switch(run_module, model_dir, found["c"], [found["b"]["id"], found["a"]["id"]])
    assert staged["removed"] == ["a-00001-of-00001.gguf"] and staged["freed"] == 1000
    assert not (model_dir / "a-00001-of-00001.gguf").exists()
    assert (model_dir / "b-00001-of-00001.gguf").exists() and (model_dir / "c-00001-of-00001.gguf").exists()
    assert (model_dir / "my-notes.gguf").read_bytes() == b"not the collection's"
    record = json.loads((model_dir / rec.RECORD).read_text(encoding="utf-8"))
    assert set(record["models"]) == {found["b"]["id"], found["c"]["id"]}
    assert [entry["model"] for entry in record["served"]] == [found["c"]["id"], found["b"]["id"]]


def test_a_users_copy_of_an_old_shard_is_used_but_never_removed(run_module, models):
    """A shard the user put there (verified, used as model a's) is recorded without placed: it stays."""
    model_dir, found = models
    model_dir.mkdir()
    shard = found["a"]["shards"][0]
    (model_dir / shard["name"]).write_bytes(b"a" * 1000)  # the user's own copy, before any run
    switch(run_module, model_dir, found["a"], [])
    _staged, _served, after = switch(run_module, model_dir, found["b"], [found["a"]["id"]], keep_previous=0)
    assert after["kept_foreign"] == [shard["name"]] and after["removed"] == []  # a's file is the user's
    switch(run_module, model_dir, found["c"], [found["b"]["id"]], keep_previous=0)
    assert (model_dir / shard["name"]).read_bytes() == b"a" * 1000
    assert not (model_dir / "b-00001-of-00001.gguf").exists()  # keep_previous 0: b went after the switch to c


def test_check_mode_says_what_would_go_and_removes_nothing(run_module, models):
    model_dir, found = models
    switch(run_module, model_dir, found["a"], [])
    switch(run_module, model_dir, found["b"], [found["a"]["id"]])
    args = {"model_dir": str(model_dir), "shards": found["c"]["shards"], "model": found["c"]["id"],
            "keep_models": [found["c"]["id"], found["b"]["id"]]}  # fmt: skip
    checked = run_module(gguf_shard_place, args, check_mode=True)
    assert checked.result["changed"] and checked.result["removed"] == ["a-00001-of-00001.gguf"]
    assert (model_dir / "a-00001-of-00001.gguf").exists() and not (model_dir / "c-00001-of-00001.gguf").exists()


def test_the_facts_report_what_the_collection_placed(run_module, models):
    model_dir, found = models
    switch(run_module, model_dir, found["a"], [])
    (model_dir / "my-notes.gguf").write_bytes(b"x")
    report = run_module(gguf_shard_facts, {"model_dir": str(model_dir)}).result["ansible_facts"]["gguf_shard_dir"]
    assert report["placed"] == {"a-00001-of-00001.gguf": 1000}
    assert report["models"][found["a"]["id"]]["files"] == ["a-00001-of-00001.gguf"]
    assert report["served"][0]["model"] == found["a"]["id"]
    manifest = json.loads((model_dir / sf.MANIFEST).read_text(encoding="utf-8"))
    assert "my-notes.gguf" not in manifest


def test_served_in_check_mode_and_diff(run_module, models):
    model_dir, found = models
    switch(run_module, model_dir, found["a"], [])
    args = {"model_dir": str(model_dir), "model": found["b"]["id"], "source": {"files": ["/b"]}, "_ansible_diff": True}
    checked = run_module(gguf_model_served, args, check_mode=True)
    assert checked.result["changed"] and checked.result["previous"]["model"] == found["a"]["id"]
    assert found["b"]["id"] in checked.result["diff"]["after"]
    assert rec.served_ids(rec.read(str(model_dir))) == [found["a"]["id"]]
    missing = run_module(gguf_model_served, {**args, "model_dir": str(model_dir / "nope")})
    assert missing.failed and "existing absolute directory" in missing.result["msg"]


def test_served_in_check_mode_on_a_fresh_host(run_module, tmp_path):
    """site.yml --check on a fresh host: the placement created no model directory, so the record would be a new one
    (changed, the model alone served) and nothing is created."""
    model_dir = tmp_path / "models" / "model"
    args = {"model_dir": str(model_dir), "model": "m1", "source": {"files": ["/m1"]}, "keep_previous": 1}
    checked = run_module(gguf_model_served, args, check_mode=True)
    assert not checked.failed, checked.result
    assert checked.result["changed"] and checked.result["keep"] == ["m1"] and checked.result["previous"] is None
    assert not (tmp_path / "models").exists()
    relative = run_module(gguf_model_served, {**args, "model_dir": "models/model"}, check_mode=True)
    assert relative.failed and "existing absolute directory" in relative.result["msg"]
