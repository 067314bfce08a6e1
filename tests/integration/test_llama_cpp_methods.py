"""The llama_cpp role's prebuilt and path methods, for real on this machine (the source method is exercised by
the worker scenario): the binaries of the cached build are installed from their archive, or used in place."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="installs like the role does on a node: as root")

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: llamarpc.cluster.llama_cpp
  post_tasks:
    - name: Report
      ansible.builtin.copy:
        dest: "{{ report }}"
        mode: "0644"
        content: "{{ {'rpc': llama_cpp_rpc_server_bin, 'server': llama_cpp_server_bin, 'key': llama_cpp_build_key}
                     | to_json }}"
"""


def run_role(tmp_path, variables):
    (tmp_path / "play.yml").write_text(PLAY)
    variables = {"report": str(tmp_path / "report.json"), "llama_cpp_runtime_packages": [], **variables}
    result = subprocess.run(
        [str(PLAYBOOK), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(variables)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )
    report = json.loads((tmp_path / "report.json").read_text()) if result.returncode == 0 else None
    return result, report


def bin_dir():
    return Path(os.environ["LLAMARPC_LLAMA_BIN_DIR"])


def test_prebuilt_archive_is_verified_unpacked_and_runs(tmp_path):
    archive = bin_dir().parent / "bin.tar.gz"
    checksum = hashlib.sha256(archive.read_bytes()).hexdigest()
    install = tmp_path / "opt"
    variables = {
        "llama_cpp_install_method": "prebuilt",
        "llama_cpp_prebuilt_archive": str(archive),
        "llama_cpp_prebuilt_checksum": checksum,
        "llama_cpp_install_dir": str(install),
    }
    result, report = run_role(tmp_path, variables)
    assert result.returncode == 0, result.stdout[-3000:]
    assert report["rpc"] == f"{install}/prebuilt-{checksum[:16]}/bin/ggml-rpc-server"
    usage = subprocess.run([report["rpc"], "--help"], capture_output=True, text=True, check=False)
    assert "--port" in usage.stdout + usage.stderr
    again, _report = run_role(tmp_path, variables)
    assert "changed=0" in again.stdout


def test_prebuilt_archive_with_a_wrong_checksum_is_refused(tmp_path):
    archive = bin_dir().parent / "bin.tar.gz"
    install = tmp_path / "opt"
    result, _report = run_role(
        tmp_path,
        {
            "llama_cpp_install_method": "prebuilt",
            "llama_cpp_prebuilt_archive": str(archive),
            "llama_cpp_prebuilt_checksum": "1" * 64,
            "llama_cpp_install_dir": str(install),
        },
    )
    assert result.returncode != 0
    assert "its sha256 is not" in result.stdout
    assert not install.exists()


def test_path_method_finds_the_rpc_server(tmp_path):
    result, report = run_role(tmp_path, {"llama_cpp_install_method": "path", "llama_cpp_path": str(bin_dir())})
    assert result.returncode == 0, result.stdout[-3000:]
    assert report == {"rpc": f"{bin_dir()}/ggml-rpc-server", "server": f"{bin_dir()}/llama-server", "key": "path"}


def test_path_method_without_llama_cpp_is_refused(tmp_path):
    result, _report = run_role(tmp_path, {"llama_cpp_install_method": "path", "llama_cpp_path": str(tmp_path)})
    assert result.returncode != 0
    assert "holds neither ggml-rpc-server nor rpc-server" in result.stdout
