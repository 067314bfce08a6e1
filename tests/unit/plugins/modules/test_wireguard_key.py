"""wireguard_key: generate once (0600, atomically), keep an existing key, public key from it, check mode.

``wg`` is not installed on the controller: a stand-in script does what ``wg genkey`` / ``wg pubkey`` do with
real X25519 (python cryptography), so the public key returned is checked against the private key written.
The module runs against the real wg in the mesh scenario.
"""

from __future__ import annotations

import base64
import os
import stat
import sys
import textwrap

import pytest
from ansible.module_utils import basic
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ansible_collections.llamarpc.cluster.plugins.modules import wireguard_key

WG = textwrap.dedent(
    """\
    import base64, sys
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PrivateFormat, PublicFormat, NoEncryption
    if sys.argv[1] == "genkey":
        raw = X25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        print(base64.b64encode(raw).decode())
    elif sys.argv[1] == "pubkey":
        raw = base64.b64decode(sys.stdin.read().strip())
        key = X25519PrivateKey.from_private_bytes(raw).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        print(base64.b64encode(key).decode())
    """
)


def public_of(private):
    key = X25519PrivateKey.from_private_bytes(base64.b64decode(private))
    return base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


@pytest.fixture
def wg(tmp_path, monkeypatch):
    script = tmp_path / "wg"
    script.write_text(f"#!{sys.executable}\n{WG}", encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: str(script))
    return script


def test_generate_then_keep(run_module, wg, tmp_path):
    path = tmp_path / "wg0.key"
    predicted = run_module(wireguard_key, {"path": str(path)}, check_mode=True)
    assert predicted.result["changed"] and predicted.result["public_key"] is None and not path.exists()

    first = run_module(wireguard_key, {"path": str(path)})
    assert first.result["changed"]
    private = path.read_text(encoding="ascii").strip()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert first.result["public_key"] == public_of(private)
    assert private not in repr(first.result)

    for check_mode in (False, True):
        again = run_module(wireguard_key, {"path": str(path)}, check_mode=check_mode)
        assert not again.result["changed"] and again.result["public_key"] == first.result["public_key"]
    assert path.read_text(encoding="ascii").strip() == private
    assert sorted(os.listdir(tmp_path)) == ["wg", "wg0.key"]  # no temporary file left


def test_a_file_that_is_not_a_key_is_not_overwritten(run_module, wg, tmp_path):
    path = tmp_path / "wg0.key"
    path.write_text("not a key\n", encoding="ascii")
    result = run_module(wireguard_key, {"path": str(path)})
    assert result.failed and "does not hold a WireGuard private key" in result.result["msg"]
    assert path.read_text(encoding="ascii") == "not a key\n"


def test_missing_directory(run_module, wg, tmp_path):
    result = run_module(wireguard_key, {"path": str(tmp_path / "absent" / "wg0.key")})
    assert result.failed and "does not exist" in result.result["msg"]


def test_check_mode_on_a_fresh_host_needs_neither_wg_nor_the_directory(run_module, tmp_path, monkeypatch):
    # A fresh host in check mode: wireguard-tools not installed yet, the key's directory not created yet.
    def no_wg(self, name, required=False):
        if required:
            self.fail_json(msg=f"Failed to find required executable {name!r}")

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", no_wg)
    path = tmp_path / "absent" / "wg0.key"
    result = run_module(wireguard_key, {"path": str(path)}, check_mode=True)
    assert not result.failed and result.result["changed"] and result.result["public_key"] is None
    assert not (tmp_path / "absent").exists()
