"""The one durable atomic write: the data fsynced before the rename, the directory after it (a container's power loss
cannot show this: the lab's hosts share the controller's page cache); a failure leaves the old file and no
temporary."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic


def test_write_atomic_syncs_the_file_before_the_rename_and_the_directory_after(sync_trace, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("old\n")
    _atomic.write_atomic(str(path), b"new\n")
    sync_trace.assert_durable(path)
    assert path.read_bytes() == b"new\n"
    assert os.listdir(tmp_path) == ["plan.json"]


def test_write_atomic_writes_a_str_as_utf8_with_the_mode_asked(tmp_path):
    path = tmp_path / "cluster.env"
    _atomic.write_atomic(str(path), "LLAMARPC_RPC=é\n", mode=0o640)
    assert path.read_bytes() == "LLAMARPC_RPC=é\n".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_without_a_mode_the_file_is_private(tmp_path):
    path = tmp_path / "key"
    _atomic.write_atomic(str(path), b"secret\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_prepare_sees_the_new_bytes_before_they_replace_the_file(tmp_path):
    path = tmp_path / "unit.service"
    seen = []
    _atomic.write_atomic(str(path), b"[Unit]\n", prepare=lambda temporary: seen.append(open(temporary).read()))  # noqa: SIM115
    assert seen == ["[Unit]\n"]


@pytest.mark.parametrize("error", [ValueError("refused"), SystemExit(1)])
def test_a_failing_prepare_leaves_the_old_file_and_no_temporary(tmp_path, error):
    path = tmp_path / "sshd_config"
    path.write_text("old\n")

    def refuse(_temporary):
        raise error

    with pytest.raises(type(error)):
        _atomic.write_atomic(str(path), b"new\n", prepare=refuse)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["sshd_config"]


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text("old\n")

    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        _atomic.write_atomic(str(path), b"new\n")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["plan.json"]


def test_the_move_given_is_used_and_the_directory_synced_after_it(sync_trace, tmp_path):
    path = tmp_path / "cluster.env"
    moved = []

    def move(src, dst):
        moved.append((src, dst))
        os.rename(src, dst)

    _atomic.write_atomic(str(path), b"x\n", move=move)
    assert moved and moved[0][1] == str(path)
    sync_trace.assert_durable(path)


def test_finalise_syncs_a_streamed_file_before_the_rename_and_the_directory_after(sync_trace, tmp_path):
    partial, final = tmp_path / "shard.gguf.partial", tmp_path / "shard.gguf"
    with open(partial, "wb") as handle:  # written by a stream, a tool or a library: not synced by its writer
        handle.write(b"GGUF" * 1024)
    _atomic.finalise(str(partial), str(final))
    sync_trace.assert_durable(final)
    assert final.read_bytes() == b"GGUF" * 1024 and not partial.exists()


def test_the_trace_catches_a_rename_without_fsync(sync_trace, tmp_path):
    """The checker itself: a plain rename (what every writer did before) is reported, file and directory."""
    partial, final = tmp_path / "a.partial", tmp_path / "a"
    partial.write_bytes(b"x")
    os.replace(partial, final)
    with pytest.raises(AssertionError, match="was not fsynced before its rename"):
        sync_trace.assert_durable(final)
    partial.write_bytes(b"y")
    _atomic.fsync_file(str(partial))
    os.replace(partial, final)
    with pytest.raises(AssertionError, match="directory of .* was not fsynced after the rename"):
        sync_trace.assert_durable(final)
