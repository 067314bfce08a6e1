"""Bad worker input fails with a clear message before anything changes on the hosts."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import testinfra
import testinfra.utils.ansible_runner
from labtest import INVENTORY, lab

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
WORKERS = RUNNER.get_hosts("rpc_workers")
SCENARIO = Path(__file__).resolve().parents[1]
STATE = (
    "md5sum /etc/systemd/system/llamarpc-rpc-worker*.service /etc/llamarpc/rpc-worker.nft; "
    "systemctl show -p MainPID --value llamarpc-rpc-worker; ls /opt/llamarpc/llama.cpp"
)


def snapshot():
    return {name: lab(name).check_output(STATE) for name in WORKERS}


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"llama_rpc_worker_port": 70000}, "a port in 1-65535 (got 70000)"),
        ({"llama_rpc_worker_port": "fifty"}, "llama_rpc_worker_port"),
        ({"llama_rpc_worker_bind_address": "10.99.99.99"}, "one of this host's addresses"),
        ({"llama_cpp_install_method": "magic"}, "llama_cpp_install_method"),
        ({"llama_cpp_source_checksum": "0" * 64}, "checksum mismatch for"),
    ],
)
def test_bad_input_changes_nothing(variables, message):
    before = snapshot()
    result = subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, str(SCENARIO / "converge.yml"), "-e", json.dumps(variables)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert result.returncode != 0, result.stdout[-2000:]
    assert message in result.stdout + result.stderr, result.stdout[-3000:]
    assert snapshot() == before
