"""Every file the collection writes whole is durable before anyone relies on it: its data fsynced before the rename
that publishes it, its directory fsynced after (``sync_trace``). The lab cannot show this: its hosts share the
controller's page cache, so a lab "power loss" keeps writes that were never synced (docs/testing.md)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tarfile

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build_run as build_run
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_platform as lp
from ansible_collections.llamarpc.cluster.plugins.module_utils.packages import _wheel_set as ws
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_fetch as sf
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _sshfs_mount
from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _neutralize
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _fnv1a
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed as ts
from ansible_collections.llamarpc.cluster.plugins.modules import llama_server_smoke, managed_files, wireguard_key


def a_module():
    with patch_module_args({}):
        return AnsibleModule(argument_spec={})


# -- shards ------------------------------------------------------------------------------------------------------


def test_a_shard_record_is_durable(sync_trace, tmp_path):
    """The model directory's manifest, a partial's sidecar, the plan report (all ``_shard_fetch.write_json``)."""
    manifest = tmp_path / sf.MANIFEST
    sf.write_json(str(manifest), {"m.gguf": {"size": 1}})
    sync_trace.assert_durable(manifest)
    assert json.loads(manifest.read_text()) == {"m.gguf": {"size": 1}}


def test_a_finished_shard_is_durable(sync_trace, tmp_path):
    data = b"GGUF" + bytes(4092)
    shard = {"name": "m-00001-of-00002.gguf", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    partial = tmp_path / (shard["name"] + sf.PARTIAL)
    partial.write_bytes(data)  # as the download's sink leaves it (the sink's own fsync is for resuming, not this)
    record = sf.finish(str(tmp_path), shard, str(partial))
    sync_trace.assert_durable(tmp_path / shard["name"])
    assert record["sha256"] == shard["sha256"] and not partial.exists()


def test_a_shard_link_is_durable(sync_trace, tmp_path):
    assert sf.link(str(tmp_path), "m.gguf", "/srv/models/m.gguf")
    sync_trace.assert_directory_synced_after(tmp_path / "m.gguf")


# -- tensor cache ------------------------------------------------------------------------------------------------


def source(tmp_path, size=4096):
    path = tmp_path / "shard.gguf"
    path.write_bytes(bytes(range(256)) * (size // 256))
    return path


def test_a_seeded_tensor_cache_file_is_durable(sync_trace, tmp_path):
    shard, cache = source(tmp_path), tmp_path / "cache"
    cache.mkdir()
    digest = _fnv1a.hash_ranges([(str(shard), 256, 2048)])[0]
    ts.write_one(
        {"name": "blk.0.ffn_up.weight", "file": str(shard), "offset": 256, "size": 2048, "hash": digest}, str(cache)
    )
    sync_trace.assert_durable(cache / digest)


def test_a_fetched_tensor_cache_file_is_durable(sync_trace, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    row = {"name": "blk.0.ffn_up.weight", "size": 1024}
    ts.fetch_one(row, lambda descriptor, _path: os.write(descriptor, b"\x01" * 1024), str(cache))
    assert row["state"] == "written"
    sync_trace.assert_durable(cache / row["hash"])


def test_the_tensor_keep_file_is_durable(sync_trace, tmp_path):
    keep = tmp_path / "keep"
    ts.write_text(str(keep), "0123456789abcdef blk.0 m.gguf 0 1024\n")
    sync_trace.assert_durable(keep)


# -- files on hosts through AnsibleModule.atomic_move ------------------------------------------------------------


def test_a_managed_file_is_durable_new_or_replaced(sync_trace, run_module, tmp_path):
    unit = tmp_path / "worker.service"
    args = {"files": [{"dest": str(unit), "content": "[Unit]\n", "mode": "0644"}]}
    run_module(managed_files, args)
    sync_trace.assert_durable(unit)
    sync_trace.calls.clear()
    run_module(managed_files, {"files": [{"dest": str(unit), "content": "[Unit]\nDescription=w\n", "mode": "0644"}]})
    sync_trace.assert_durable(unit)


def test_a_generated_wireguard_key_is_durable(sync_trace, run_module, tmp_path, monkeypatch):
    wg = tmp_path / "wg"
    wg.write_text(f"#!{sys.executable}\nprint('A' * 43 + '=')\n")
    wg.chmod(0o755)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, required=False: str(wg))
    key = tmp_path / "private.key"
    run_module(wireguard_key, {"path": str(key)})
    sync_trace.assert_durable(key)


def test_the_smoke_record_is_durable(sync_trace, run_module, tmp_path, monkeypatch):
    server, model, record = tmp_path / "llama-server", tmp_path / "m.gguf", tmp_path / "smoke.json"
    server.write_bytes(b"\x7fELF")
    model.write_bytes(b"GGUF")
    monkeypatch.setattr(llama_server_smoke._llama_smoke, "smoke", lambda *args, **kwargs: {"ok": True})
    monkeypatch.setattr(llama_server_smoke._llama_smoke, "hashes_options", lambda *args: {})  # asks the binary
    run_module(llama_server_smoke, {"server": str(server), "model": str(model), "record": str(record)})
    sync_trace.assert_durable(record)


def test_an_sshfs_mount_unit_is_durable(sync_trace, tmp_path):
    mount = object.__new__(_sshfs_mount.Mount)
    mount.module, mount.unit_path, mount.wanted_unit = a_module(), str(tmp_path / "srv-models.mount"), "[Mount]\n"
    mount.write_unit()
    sync_trace.assert_durable(tmp_path / "srv-models.mount")


def test_a_rewritten_syncer_config_is_durable(sync_trace, tmp_path):
    config = tmp_path / "lsyncd.conf.lua"
    config.write_text("settings {}\n")
    assert _neutralize.write_file(a_module(), str(config), "settings { nodaemon = true }\n") is None
    sync_trace.assert_durable(config)


def test_a_syncer_config_that_fails_validation_is_left_and_no_temporary_stays(tmp_path):
    config = tmp_path / "lsyncd.conf.lua"
    config.write_text("settings {}\n")
    reason = _neutralize.write_file(a_module(), str(config), "broken", validate="/bin/false %s")
    assert reason.startswith(f"the new {config} failed validation")
    assert config.read_text() == "settings {}\n" and os.listdir(tmp_path) == ["lsyncd.conf.lua"]


# -- controller caches: the wheel set, llama.cpp builds ----------------------------------------------------------


class WheelModule:
    """resolve()'s view of AnsibleModule: uv answers the lock, pip downloads one wheel per pin."""

    check_mode = False

    def __init__(self, dest, uv):
        self.params = {"dest": str(dest), "machine": "x86_64", "glibc": "glibc 2.36", "python_version": "3.11.2",
                       "python": sys.executable, "uv": str(uv), "requirements": ["six==1.17.0"], "index_url": "",
                       "no_index": False, "extra_index_urls": [], "find_links": []}  # fmt: skip

    def get_bin_path(self, name, required=False):
        return sys.executable

    def run_command(self, argv, **_kwargs):
        if "compile" in argv:
            return 0, "six==1.17.0 \\\n    --hash=sha256:aaaa\n", ""
        wheels = argv[argv.index("--dest") + 1]
        os.makedirs(wheels, exist_ok=True)
        with open(os.path.join(wheels, "six-1.17.0-py2.py3-none-any.whl"), "wb") as handle:
            handle.write(b"PK")
        return 0, "", ""

    def fail_json(self, **kwargs):
        pytest.fail(kwargs["msg"])


def test_the_wheel_sets_lock_and_archive_are_durable(sync_trace, tmp_path):
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    result = ws.resolve(WheelModule(tmp_path / "set", uv))
    assert result["changed"] and result["packages"][0]["name"] == "six"
    sync_trace.assert_durable(tmp_path / "set" / ws.LOCK)
    sync_trace.assert_durable(tmp_path / "set" / ws.ARCHIVE)


def test_the_wheel_sets_venv_link_is_durable(sync_trace, tmp_path):
    (tmp_path / "releases" / "a").mkdir(parents=True)
    ws.switch_link(str(tmp_path / "venv"), str(tmp_path / "releases" / "a"))
    sync_trace.assert_directory_synced_after(tmp_path / "venv")


def test_a_builds_archive_and_record_are_durable(sync_trace, tmp_path):
    entry = tmp_path / "entry"
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "rpc-server").write_bytes(b"\x7fELF")
    assert build_run.ensure_archive(str(entry))
    sync_trace.assert_durable(entry / build_run.ARCHIVE)
    with tarfile.open(entry / build_run.ARCHIVE) as tar:
        assert tar.getnames() == ["rpc-server"]
    lp.write_record(str(entry), {"key": "k"})
    sync_trace.assert_durable(entry / lp.RECORD)
