"""sshfs_client_key: generate once (in a root-only directory), keep an existing key, write a missing public key,
check mode; ``ssh-keygen`` is a stand-in script (it writes a fixed key pair, and prints the public key with -y)."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
from ansible.module_utils import basic

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _client_key
from ansible_collections.llamarpc.cluster.plugins.modules import sshfs_client_key

PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm3dE2Lrg4ZzTr1Y9y0V5J1nQHkFf0m3N5V6oRzWlqK"
KEYGEN = textwrap.dedent(
    f"""\
    import sys
    args = sys.argv[1:]
    path = args[args.index("-f") + 1]
    if "-y" in args:
        print("{PUBLIC}")
    else:
        comment = args[args.index("-C") + 1]
        with open(path, "w") as handle:
            handle.write("-----BEGIN OPENSSH PRIVATE KEY-----\\nsecret\\n-----END OPENSSH PRIVATE KEY-----\\n")
        with open(path + ".pub", "w") as handle:
            handle.write("{PUBLIC} " + comment + "\\n")
        with open(path + ".calls", "a") as handle:
            handle.write("genkey\\n")
    """
)


@pytest.fixture
def keygen(tmp_path, monkeypatch):
    script = tmp_path / "ssh-keygen"
    script.write_text(f"#!{sys.executable}\n{KEYGEN}", encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: str(script))
    monkeypatch.setattr(_client_key, "OWNER", os.getuid())
    return script


def args(path):
    return {"path": str(path), "comment": "llamarpc sshfs node1"}


def test_check_mode_generate_then_keep(run_module, keygen, tmp_path):
    path = tmp_path / "sshfs" / "id_ed25519"
    predicted = run_module(sshfs_client_key, args(path), check_mode=True)
    assert predicted.result["changed"] and predicted.result["public_key"] is None
    assert predicted.result["actions"] == ["make the key directory", "generate the key"]
    assert not path.parent.exists()

    first = run_module(sshfs_client_key, args(path))
    assert first.result["changed"] and first.result["public_key"] == PUBLIC
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert path.with_suffix(".pub").read_text().strip() == f"{PUBLIC} llamarpc sshfs node1"

    for check_mode in (False, True):
        again = run_module(sshfs_client_key, args(path), check_mode=check_mode)
        assert not again.result["changed"] and again.result["public_key"] == PUBLIC and again.result["actions"] == []
    assert (tmp_path / "sshfs" / "id_ed25519.calls").read_text() == "genkey\n"


def test_an_open_key_directory_is_closed(run_module, keygen, tmp_path):
    path = tmp_path / "sshfs" / "id_ed25519"
    run_module(sshfs_client_key, args(path))
    path.parent.chmod(0o755)
    result = run_module(sshfs_client_key, args(path))
    assert result.result["changed"] and result.result["actions"] == ["make the key directory root's alone (mode)"]
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"


def test_a_missing_public_key_is_written_from_the_private_key(run_module, keygen, tmp_path):
    path = tmp_path / "sshfs" / "id_ed25519"
    run_module(sshfs_client_key, args(path))
    path.with_suffix(".pub").unlink()
    result = run_module(sshfs_client_key, args(path))
    assert result.result["changed"] and result.result["actions"] == ["write the public key"]
    assert result.result["public_key"] == PUBLIC
    assert (tmp_path / "sshfs" / "id_ed25519.calls").read_text() == "genkey\n"  # the key was kept


def test_a_public_key_file_without_a_key_fails(run_module, keygen, tmp_path):
    path = tmp_path / "sshfs" / "id_ed25519"
    run_module(sshfs_client_key, args(path))
    path.with_suffix(".pub").write_text("garbage\n")
    result = run_module(sshfs_client_key, args(path))
    assert result.failed and f"{path}.pub holds no SSH public key" in result.result["msg"]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (f"{PUBLIC} a comment with blanks\n", PUBLIC),
        ("ecdsa-sha2-nistp256 AAAAE2 x", "ecdsa-sha2-nistp256 AAAAE2"),
        ("", None),
        ("not-a-key AAAA", None),
    ],
)
def test_public_key_line(text, line):
    assert _client_key.public_key_line(text) == line
