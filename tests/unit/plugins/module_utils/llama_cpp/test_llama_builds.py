"""The record of the builds llama_cpp_install made current on a node (builds.json), the builds it removes beyond
keep_previous - only recorded directories with its marker, never anything else - and the rollback to the build before
the current one. Driven through _llama_install.run with the stand-in module of test_llama_install; the node is a
temporary directory. No clocks: the order of the builds is the order of the runs."""

from __future__ import annotations

import json
import os

import pytest
from test_llama_install import PACKAGES, Exit, FakeModule, make_archive

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_builds as lb
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_install as li

A, B, C, D = ("a" * 32, "b" * 32, "c" * 32, "prebuilt-" + "d" * 16)
SOURCE = {"method": "source", "checksum": "0" * 64}


def opt(tmp_path):
    return str(tmp_path / "opt")


def call(tmp_path, check_mode=False, diff=False, **params):
    params = {"install_dir": opt(tmp_path), "packages": PACKAGES, **params}
    module = FakeModule(params, check_mode=check_mode, diff=diff)
    with pytest.raises(Exit) as caught:
        li.run(module)
    return caught.value


def install(tmp_path, key, keep_previous=1, check_mode=False, diff=False, **params):
    """One real install of build ``key`` as the action runs it: the module, then the module with the archive when it
    asks for it. Returns the last run's result."""
    src = make_archive(
        tmp_path / f"{key}.tar.gz", files={"ggml-rpc-server": key.encode(), "llama-server": b"s"}, links={}
    )
    request = {"key": key, "archive": "/ctl/bin.tar.gz", "keep_previous": keep_previous, "source": SOURCE, **params}
    first = call(tmp_path, check_mode=check_mode, diff=diff, **request)
    assert not first.failed, first.result
    if check_mode or not first.result["need_archive"]:
        return first.result
    second = call(tmp_path, diff=diff, src=src, **request)
    assert not second.failed, second.result
    return second.result


def rollback(tmp_path, check_mode=False, diff=False):
    return call(tmp_path, check_mode=check_mode, diff=diff, state="previous")


def recorded(tmp_path):
    return lb.keys(lb.read(opt(tmp_path)))


def on_disk(tmp_path):
    return sorted(os.listdir(opt(tmp_path)))


# The record.


def test_an_install_records_the_build_with_what_a_rollback_needs(tmp_path, sync_trace):
    install(tmp_path, A, rpc_protocol="7.0.0", helpers=["llamarpc-fnv1a"])
    record = json.loads((tmp_path / "opt" / lb.RECORD).read_text())
    assert record == {
        "builds": [
            {
                "key": A,
                "rpc_server": "ggml-rpc-server",
                "rpc_protocol": "7.0.0",
                "helpers": ["llamarpc-fnv1a"],
                "source": SOURCE,
            }
        ]
    }
    sync_trace.assert_durable(tmp_path / "opt" / lb.RECORD)
    assert [name for name in on_disk(tmp_path) if name.startswith(".")] == [], "no temporary file left"


def test_builds_are_recorded_current_first_in_the_order_they_became_current(tmp_path):
    install(tmp_path, A, keep_previous=5)
    install(tmp_path, B, keep_previous=5)
    install(tmp_path, C, keep_previous=5)
    assert recorded(tmp_path) == [C, B, A]
    install(tmp_path, A, keep_previous=5)  # A again (installed and whole): current again, nothing unpacked
    assert recorded(tmp_path) == [A, C, B]


def test_installing_the_current_build_again_changes_and_writes_nothing(tmp_path, sync_trace):
    install(tmp_path, A)
    install(tmp_path, B)
    sync_trace.calls.clear()
    result = install(tmp_path, B)
    assert not result["changed"] and result["removed"] == [] and result["builds"] == [B, A]
    assert [c for c in sync_trace.calls if c[0] == "rename"] == [], "nothing written"


def test_a_build_installed_before_the_record_existed_is_recorded_and_the_others_are_left_alone(tmp_path):
    for key in (A, B):  # installs of a collection that kept no record: the marker, no builds.json
        (tmp_path / "opt" / key / "bin").mkdir(parents=True)
        (tmp_path / "opt" / key / "complete").write_text(f"{key}\n")
    result = install(tmp_path, B, keep_previous=0)
    assert result["changed"] and recorded(tmp_path) == [B] and result["removed"] == []
    assert (tmp_path / "opt" / A / "complete").exists(), "a build the record does not name is never removed"


# Pruning: the current build and keep_previous before it stay; only the collection's own directories go.


def test_pruning_keeps_the_current_build_and_keep_previous_before_it(tmp_path):
    for key in (A, B, C):
        install(tmp_path, key, keep_previous=2)
    result = install(tmp_path, D, keep_previous=2)
    assert result["removed"] == [A] and result["builds"] == [D, C, B]
    assert on_disk(tmp_path) == sorted([B, C, D, lb.RECORD])
    result = install(tmp_path, D, keep_previous=1)  # a smaller keep_previous on a rerun
    assert result["changed"] and result["removed"] == [B] and on_disk(tmp_path) == sorted([C, D, lb.RECORD])


def test_keep_previous_0_keeps_only_the_current_build(tmp_path):
    install(tmp_path, A, keep_previous=0)
    result = install(tmp_path, B, keep_previous=0)
    assert result["removed"] == [A] and recorded(tmp_path) == [B] and on_disk(tmp_path) == [B, lb.RECORD]
    assert "remove the builds " + A in result["msg"]


def test_a_directory_the_record_does_not_name_is_never_removed(tmp_path):
    install(tmp_path, A, keep_previous=0)
    foreign = tmp_path / "opt" / C  # a build dir the collection did not record (hand-made, marker and all)
    (foreign / "bin").mkdir(parents=True)
    (foreign / "complete").write_text(f"{C}\n")
    (tmp_path / "opt" / "notes.txt").write_text("mine")
    install(tmp_path, B, keep_previous=0)
    assert (foreign / "complete").exists() and (foreign / "bin").is_dir()
    assert (tmp_path / "opt" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("damage", ["no marker", "marker of another key", "marker is a directory", "a link"])
def test_a_recorded_directory_without_its_marker_is_never_removed(tmp_path, damage):
    install(tmp_path, A, keep_previous=0)
    key_dir = tmp_path / "opt" / A
    if damage == "no marker":
        (key_dir / "complete").unlink()
    elif damage == "marker of another key":
        (key_dir / "complete").write_text(f"{B}\n")
    elif damage == "marker is a directory":
        (key_dir / "complete").unlink()
        (key_dir / "complete").mkdir()
    else:  # the key's directory replaced by a link to a directory that holds a build
        (tmp_path / "elsewhere").mkdir()
        os.rename(key_dir, tmp_path / "elsewhere" / A)
        key_dir.symlink_to(tmp_path / "elsewhere" / A)
    result = install(tmp_path, B, keep_previous=0)
    assert result["removed"] == [] and result["kept"] == [A]
    assert os.path.lexists(key_dir) and (key_dir / "bin").is_dir()
    assert recorded(tmp_path) == [B], "the build leaves the record, its directory stays"


def test_files_an_install_did_not_put_in_a_build_directory_stay_with_it(tmp_path):
    install(tmp_path, A, keep_previous=0)
    (tmp_path / "opt" / A / "mine.conf").write_text("kept")
    result = install(tmp_path, B, keep_previous=0)
    assert result["removed"] == [A] and result["kept"] == [A]
    assert sorted(os.listdir(tmp_path / "opt" / A)) == ["mine.conf"], "bin and the marker go, the user's file stays"


def test_check_mode_removes_nothing_and_says_what_a_real_run_removes(tmp_path, sync_trace):
    install(tmp_path, A, keep_previous=0)
    install(tmp_path, B, keep_previous=5)
    before = {path: path.lstat().st_mtime_ns for path in (tmp_path / "opt").rglob("*")}
    sync_trace.calls.clear()
    result = install(tmp_path, C, keep_previous=0, check_mode=True, diff=True)
    assert result["changed"] and result["removed"] == [B, A] and result["builds"] == [C]
    assert "would remove the builds" in result["msg"]
    assert {path: path.lstat().st_mtime_ns for path in (tmp_path / "opt").rglob("*")} == before
    assert sync_trace.calls == [], "nothing written, renamed or removed"
    record_diff = next(d for d in result["diff"] if d["before_header"].endswith(lb.RECORD + ": builds, current first"))
    assert record_diff["before"] == f"{B}\n{A}\n" and record_diff["after"] == f"{C}\n"
    assert {"before_header": str(tmp_path / "opt" / A), "after_header": str(tmp_path / "opt" / A)}.items() <= next(
        d for d in result["diff"] if d["before_header"] == str(tmp_path / "opt" / A)
    ).items()


def test_a_removal_cut_short_is_finished_by_the_next_run(tmp_path, monkeypatch):
    install(tmp_path, A, keep_previous=0)
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if str(path).endswith(f"{A}/complete"):
            raise OSError(5, "Input/output error")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    outcome = call(tmp_path, key=B, archive="/ctl/bin.tar.gz", keep_previous=0, src=make_archive(tmp_path / "b.tgz"))
    assert outcome.failed and "cannot remove the build" in outcome.result["msg"]
    assert (tmp_path / "opt" / A / "complete").exists() and recorded(tmp_path) == [A], "the marker goes last"
    monkeypatch.setattr(os, "unlink", real_unlink)
    result = install(tmp_path, B, keep_previous=0)
    assert result["removed"] == [A] and on_disk(tmp_path) == [B, lb.RECORD]


# Rollback: the build before the current one, current again; nothing to roll back to is an error that changes nothing.


def test_a_rollback_makes_the_previous_build_current_and_a_second_one_goes_forward(tmp_path):
    install(tmp_path, A, rpc_protocol="6.0.0", helpers=[], rpc_server="rpc-server")
    install(tmp_path, B, rpc_protocol="7.0.0", helpers=["llamarpc-fnv1a"])
    outcome = rollback(tmp_path)
    assert not outcome.failed, outcome.result
    result = outcome.result
    assert result["changed"] and result["rollback_to"] == A and recorded(tmp_path) == [A, B]
    assert result["build_key"] == A and result["bin_dir"] == str(tmp_path / "opt" / A / "bin")
    assert result["rpc_server_bin"] == str(tmp_path / "opt" / A / "bin" / "rpc-server")
    assert result["rpc_protocol"] == "6.0.0" and result["helper_names"] == [] and result["installed"] is True
    assert result["source"] == SOURCE and result["removed"] == []
    assert on_disk(tmp_path) == sorted([A, B, lb.RECORD]), "a rollback removes nothing"
    again = rollback(tmp_path).result
    assert again["rollback_to"] == B and again["rpc_protocol"] == "7.0.0" and recorded(tmp_path) == [B, A]


def test_after_a_rollback_a_rerun_of_the_rolled_back_build_is_idempotent(tmp_path):
    install(tmp_path, A)
    install(tmp_path, B)
    rollback(tmp_path)
    assert not install(tmp_path, A)["changed"], "the build rolled back to is current: nothing to do"
    assert install(tmp_path, B)["builds"] == [B, A], "the inventory's build again: forward"


def test_a_rollback_in_check_mode_says_so_and_writes_nothing(tmp_path, sync_trace):
    install(tmp_path, A)
    install(tmp_path, B)
    sync_trace.calls.clear()
    result = rollback(tmp_path, check_mode=True, diff=True).result
    assert result["changed"] and result["rollback_to"] == A and result["build_key"] == A
    assert "would make the previous build" in result["msg"]
    assert result["diff"][0]["before"] == f"{B}\n{A}\n" and result["diff"][0]["after"] == f"{A}\n{B}\n"
    assert sync_trace.calls == [] and recorded(tmp_path) == [B, A]


@pytest.mark.parametrize("situation", ["no record", "one build", "keep_previous 0", "previous removed"])
def test_nothing_to_roll_back_to_fails_with_the_reason_and_changes_nothing(tmp_path, situation):
    if situation == "one build":
        install(tmp_path, A)
    elif situation == "keep_previous 0":
        install(tmp_path, A, keep_previous=0)
        install(tmp_path, B, keep_previous=0)
    elif situation == "previous removed":
        install(tmp_path, A)
        install(tmp_path, B)
        (tmp_path / "opt" / A / "complete").unlink()
    before = (tmp_path / "opt" / lb.RECORD).read_bytes() if (tmp_path / "opt").exists() else None
    for check_mode in (True, False):
        outcome = rollback(tmp_path, check_mode=check_mode)
        assert outcome.failed and outcome.result["rollback_to"] is None and not outcome.result["changed"]
        if situation == "previous removed":
            assert f"the previous build {tmp_path}/opt/{A} is recorded but no longer whole" in outcome.result["msg"]
        else:
            assert "records no build before the current one" in outcome.result["msg"]
            assert "nothing to roll back to" in outcome.result["msg"]
    after = (tmp_path / "opt" / lb.RECORD).read_bytes() if (tmp_path / "opt").exists() else None
    assert after == before


def test_a_key_that_is_not_a_directory_name_is_refused(tmp_path):
    for key in ("", "..", "a/b", lb.RECORD):
        outcome = call(tmp_path, key=key)
        assert outcome.failed and "key must be a directory name" in outcome.result["msg"]


def test_a_negative_keep_previous_is_refused(tmp_path):
    outcome = call(tmp_path, key=A, keep_previous=-1)
    assert outcome.failed and "keep_previous must be 0 or more" in outcome.result["msg"]
