"""The seed's layout on a real /home: the cluster (llama_rpc_worker on node2 and node3, llama_coordinator on node1)
serves a completion from shards in pool's own directory, /home/pool/work/models/tiny, where pool was made by Debian's
adduser (home mode 0700). llama-server runs as its own user behind ProtectHome: only the model directory is bound
into its view, read-only. Nothing of pool's is chowned or chmodded on the way."""

import json

import pytest
from conftest import COORDINATOR, EXPECTED_HOSTS, FILES, HOME, HOSTS, MODEL_DIR, SCENARIO, USER
from labtest import address, http_command, lab, run_ansible
from unit_users import distinct_user_findings, root_unit_findings

SERVICE = "llamarpc-server"
EXPORT_USER = "llamarpc-shards"
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


def test_every_service_runs_as_its_own_user_and_each_root_unit_only_with_its_reasons_capabilities(served):
    """On every host of the served cluster: one service per unprivileged user (distinct uids and primary groups, the
    SFTP export's account included), and each unit that must be root bounded to the capabilities its reason names,
    in systemd's view and in the kernel's for a running main process (unit_users.ROOT_UNITS)."""
    assert served.returncode == 0, served.stdout[-4000:]
    wrong, kinds, users = [], set(), {}
    for name in HOSTS:
        host = lab(name)
        found, seen = root_unit_findings(host, name)
        accounts = [EXPORT_USER] if host.run(f"id -u {EXPORT_USER}").rc == 0 else []
        by_user, ids, more = distinct_user_findings(host, name, accounts)
        wrong += found + more
        kinds |= seen
        users[name] = {user: (owners, ids.get(user)) for user, owners in by_user.items()} | {
            account: ([], ids.get(account)) for account in accounts
        }
    print(f"\nroot units: {sorted(kinds)}\nusers: {users}")
    assert not wrong, wrong
    # What this scenario runs, so that the checks above had something to check.
    assert "llamarpc-sshfs-<mount>.service" in kinds and "llamarpc-server-supervisor.service" in kinds, kinds
    assert users[COORDINATOR][SERVICE][0] == [f"{SERVICE}.service"], users[COORDINATOR]
    for name in ("node2", "node3"):
        assert "llamarpc-rpc-worker.service" in users[name]["llamarpc"][0], users[name]
        assert EXPORT_USER in users[name], users[name]


#: Another user's home, its file readable by anyone on the host: only llama-server's sandbox can hide it.
OTHER_USER = "llamarpc-probe-other"
OTHER_FILE = f"/home/{OTHER_USER}/notes.txt"


@pytest.fixture
def other_home():
    coordinator = lab(COORDINATOR)
    coordinator.run_expect([0], f"useradd --create-home --shell /usr/sbin/nologin {OTHER_USER}")
    try:
        coordinator.run_expect([0], f"chmod 0755 /home/{OTHER_USER} && echo private > {OTHER_FILE}")
        coordinator.run_expect([0], f"chmod 0644 {OTHER_FILE}")
        yield OTHER_FILE
    finally:
        coordinator.run(f"userdel --remove {OTHER_USER}")


def test_llama_server_sees_only_its_model_directory_of_home_and_read_only(served, other_home):
    """Inside the running llama-server's own mount namespace (nsenter into its main process), as its user: the model
    is readable, another user's home file is not there though that user may read it on the host, and the model
    directory is not writable - not even by root there: the bind is read-only, not just the owner's mode."""
    coordinator = lab(COORDINATOR)
    pid = coordinator.check_output(f"systemctl show -p MainPID --value {SERVICE}.service")
    assert pid not in ("", "0"), f"{SERVICE} is not running"
    as_user = f"setpriv --reuid={SERVICE} --regid={SERVICE} --init-groups --"
    inside = f"nsenter --target {pid} --mount --"
    shard = f"{MODEL_DIR}/{FILES[0]['name']}"
    # Positive controls: the model is readable in the sandbox; the other file is readable by the same user outside.
    assert coordinator.check_output(f"{inside} {as_user} head --bytes=4 {shard}") == "GGUF"
    assert coordinator.run(f"{as_user} cat {other_home}").stdout.strip() == "private"
    hidden = coordinator.run(f"{inside} {as_user} cat {other_home}")
    assert hidden.rc != 0 and "private" not in hidden.stdout, hidden.stdout
    assert "No such file or directory" in hidden.stderr, hidden.stderr
    probe = f"{MODEL_DIR}/.llamarpc-write-probe"
    try:
        by_user = coordinator.run(f"{inside} {as_user} touch {probe}")
        by_root = coordinator.run(f"{inside} touch {probe}")
    finally:
        coordinator.run(f"rm -f {probe}")
    assert by_user.rc != 0, "llama-server's user could write in the model directory"
    assert by_root.rc != 0 and "Read-only file system" in by_root.stderr, by_root.stderr


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
