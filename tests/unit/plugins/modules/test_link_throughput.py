"""The link_throughput module: its argument rules, check mode, a real file read and a refused read."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.modules import link_throughput


def test_each_mode_names_what_it_needs(run_module):
    result = run_module(link_throughput, {"mode": "read", "port": 1})
    assert result.failed and result.result["msg"] == "mode=read needs host"


def test_check_mode_measures_nothing(run_module, tmp_path):
    result = run_module(link_throughput, {"mode": "read_file", "path": str(tmp_path / "none")}, check_mode=True)
    assert not result.failed and result.result["skipped"] and not result.result["changed"]


def test_read_file_times_a_real_file(run_module, tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 3_000_000)
    result = run_module(link_throughput, {"mode": "read_file", "path": str(path)})
    assert not result.failed and result.result["bytes"] == 3_000_000 and result.result["mb_per_s"] > 0


def test_a_refused_read_fails_with_the_address(run_module):
    result = run_module(link_throughput, {"mode": "read", "host": "127.0.0.1", "port": 9, "timeout": 0.5})
    assert result.failed and "127.0.0.1:9" in result.result["msg"]
