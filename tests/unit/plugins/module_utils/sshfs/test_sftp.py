"""_sftp against OpenSSH's own sftp-server over a pipe (the process ssh would start at the far end): exact ranges,
short answers, a range past the end, a missing file, and sessions that are not SFTP or never answer."""

from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sftp


@pytest.fixture
def export(tmp_path, sftp_server):
    """A file of 1 MiB + 123 random bytes in a directory served read-only (-R) by sftp-server."""
    data = os.urandom(1024 * 1024 + 123)
    (tmp_path / "shard.gguf").write_bytes(data)
    argv = [sftp_server, "-R", "-d", str(tmp_path)]
    return {"argv": argv, "data": data, "dir": tmp_path}


def read(argv, path, offset, size, target):
    with open(target, "wb") as handle, _sftp.Session(argv) as session:
        received = session.read_range(path, offset, size, handle.fileno())
    return received, target.read_bytes()


@pytest.mark.parametrize(
    ("offset", "size"),
    [(0, 1024 * 1024 + 123), (4093, 300_001), (1024 * 1024, 123), (7, 1), (0, _sftp.READ_BLOCK * 3)],
)
def test_exactly_the_range_lands_at_the_start_of_the_file(export, tmp_path, offset, size):
    received, got = read(export["argv"], "shard.gguf", offset, size, tmp_path / "out")
    assert received == size
    assert got == export["data"][offset : offset + size]


def test_a_server_that_answers_less_than_asked_is_asked_again(export, tmp_path, monkeypatch):
    # sftp-server answers at most 255 KiB to one READ: asking 1 MiB at a time makes it answer short every time.
    monkeypatch.setattr(_sftp, "READ_BLOCK", 1024 * 1024)
    monkeypatch.setattr(_sftp, "MAX_REPLY", 1024 * 1024 + 1024)
    sent = []
    real_send = _sftp.Session._send

    def counting(self, kind, payload, with_id=True):
        sent.append(kind)
        return real_send(self, kind, payload, with_id)

    monkeypatch.setattr(_sftp.Session, "_send", counting)
    received, got = read(export["argv"], "shard.gguf", 5, 1024 * 1024, tmp_path / "out")
    assert (received, got) == (1024 * 1024, export["data"][5 : 5 + 1024 * 1024])
    assert sent.count(_sftp.FXP_READ) >= 5  # one asked, four or more to finish it


def test_one_session_reads_several_ranges(export, tmp_path):
    with _sftp.Session(export["argv"]) as session:
        for offset, size in [(0, 10), (500_000, 70_000), (10, 10)]:
            target = tmp_path / f"out-{offset}"
            with open(target, "wb") as handle:
                assert session.read_range("shard.gguf", offset, size, handle.fileno()) == size
            assert target.read_bytes() == export["data"][offset : offset + size]


def test_a_range_past_the_end_of_the_file_fails(export, tmp_path):
    with pytest.raises(_sftp.SftpError, match="ends before byte"):
        read(export["argv"], "shard.gguf", 1024 * 1024, 1000, tmp_path / "out")


def test_a_missing_file_fails_with_the_servers_reason(export, tmp_path):
    with pytest.raises(_sftp.SftpError, match="no such file"):
        read(export["argv"], "other.gguf", 0, 10, tmp_path / "out")


def test_a_child_that_is_not_sftp_fails_at_once():
    with pytest.raises(_sftp.SftpError, match="does not speak SFTP version 3"):
        _sftp.Session([shutil.which("cat")])  # echoes INIT back: type 1, not VERSION
    with pytest.raises(_sftp.SftpError, match=r"session ended.*(exit 3|denied)"):
        _sftp.Session(["sh", "-c", "echo 'Permission denied (publickey).' >&2; exit 3"])


def test_a_server_that_never_answers_is_given_up_after_the_idle_timeout():
    with pytest.raises(_sftp.SftpError, match="no answer from the SFTP server for 1 s"):
        _sftp.Session(["sleep", "600"], idle_timeout=1)


def test_ssh_argv_pins_the_host_key_and_never_prompts():
    argv = _sftp.ssh_argv("10.0.0.2", "llamarpc-shards", identity_file="/k", known_hosts_file="/kh", port=2222)
    options = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
    assert {"BatchMode=yes", "IdentityFile=/k", "IdentitiesOnly=yes", "UserKnownHostsFile=/kh"} <= set(options)
    assert "StrictHostKeyChecking=yes" in options
    assert argv[0] == "ssh" and argv[-5:] == ["-p", "2222", "-s", "llamarpc-shards@10.0.0.2", "sftp"]
