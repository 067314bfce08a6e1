"""The seed's layout on a real /home: the cluster (llama_rpc_worker on node2 and node3, llama_coordinator on node1)
serves a completion from shards in pool's own directory, /home/pool/work/models/tiny, where pool was made by Debian's
adduser (home mode 0700). llama-server runs as its own user behind ProtectHome: only the model directory is bound
into its view, read-only. Nothing of pool's is chowned or chmodded on the way."""

import json

import pytest
from conftest import COORDINATOR, EXPECTED_HOSTS, FILES, HOME, MODEL_DIR, SCENARIO, USER
from labtest import address, http_command, lab, run_ansible

SERVICE = "llamarpc-server"
PORT = 8080


@pytest.fixture(scope="module")
def served():
    """serve.yml (workers, the model as converge placed it, the coordinator): the completed process."""
    done = run_ansible("ansible-playbook", SCENARIO / "serve.yml", timeout=1800)
    yield done
    # The later runs of place.yml and a rerun of this module find no llama-server holding the mounts.
    lab(COORDINATOR).run(f"systemctl stop {SERVICE}.service {SERVICE}-supervisor.timer")


def test_the_cluster_serves_from_a_model_directory_in_a_0700_home(served):
    assert served.returncode == 0, f"serve.yml failed:\n{served.stdout[-8000:]}\n{served.stderr[-2000:]}"
    coordinator = lab(COORDINATOR)
    assert coordinator.check_output(f"systemctl show -p User --value {SERVICE}.service") == SERVICE
    body = json.dumps({"prompt": "hello world, the cluster", "max_tokens": 8, "temperature": 0, "cache_prompt": False})
    url = f"http://{address(COORDINATOR)}:{PORT}/v1/completions"  # no mesh here: llama-server binds ansible_host
    answer = json.loads(coordinator.check_output(http_command(url, body)))
    print(f"\ncompletion from {MODEL_DIR}: {answer['choices'][0]['text']!r} ({answer['usage']})")
    assert answer["usage"]["completion_tokens"] > 0
    # llama-server read shard 1 there (the others through the mounts linked there).
    assert MODEL_DIR in coordinator.check_output(f"systemctl show -p ExecStart --value {SERVICE}.service")


def test_the_home_and_the_shards_are_still_the_users(served):
    assert served  # after the cluster's run, whatever its outcome
    for host in sorted(set(EXPECTED_HOSTS.values())):
        home = lab(host).file(HOME)
        assert home.user == USER and home.mode == 0o700, f"{HOME} on {host}: {home.user} {oct(home.mode)}"
    for entry in FILES:
        host = EXPECTED_HOSTS[entry["name"]]
        shard = lab(host).file(f"{MODEL_DIR}/{entry['name']}")
        assert shard.user == USER, f"{entry['name']} on {host}: owned by {shard.user}"
        assert lab(host).file(MODEL_DIR).user == USER


def test_a_model_directory_others_cannot_read_stops_the_role_with_the_reason(served):
    """The role reads every shard as llama-server's user in the unit's view before (re)starting it; it says why it
    cannot, and leaves the directory's mode to its owner."""
    coordinator = lab(COORDINATOR)
    coordinator.check_output(f"chmod 0750 {MODEL_DIR}")  # what its owner might do
    try:
        done = run_ansible("ansible-playbook", SCENARIO / "serve.yml", "--limit", COORDINATOR, timeout=1200)
        mode = coordinator.file(MODEL_DIR).mode
    finally:
        coordinator.check_output(f"chmod 0755 {MODEL_DIR}")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-4000:]
    assert f"llamarpc-server (llama-server) cannot read the model on {COORDINATOR}" in output, output[-4000:]
    assert f"{MODEL_DIR}/{FILES[0]['name']}' for reading: Permission denied" in output, output[-4000:]
    assert mode == 0o750
