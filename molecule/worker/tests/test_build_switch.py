"""A llama.cpp build switch on the RPC workers and back (issue 34): the converge's build, repacked with one more file,
is deployed as a prebuilt archive - a new key, current, the old one kept, the workers answering HELLO on it - then
llama_cpp_rollback puts every worker back on the first build with nothing looked up, fetched or built (the
controller's cache as it was, no new build directory), answering HELLO again. Files the collection did not place in
the install directory survive all of it, and keep_previous 0 removes only the collection's own build.

The teardown runs the worker role as converge does, so the scenario's later tests find the converge's build current
whatever happened here."""

import json
import shlex

import pytest
import testinfra.utils.ansible_runner
from labtest import INVENTORY, lab, run_ansible, wait_for
from llama_builds import INSTALL_DIR, cached_archive, controller_cache, repack
from test_day2 import hello

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
WORKERS = RUNNER.get_hosts("rpc_workers")
RECORD = f"{INSTALL_DIR}/builds.json"
SERVICE = "llamarpc-rpc-worker"
FOREIGN_FILE = f"{INSTALL_DIR}/operator-notes.txt"
FOREIGN_DIR = f"{INSTALL_DIR}/hand-built"  # looks like a build (bin, marker), but the record never named it

# The worker role as converge.yml runs it (the smoke model only matters to a build, and nothing is built here).
PLAY = """
- name: The RPC workers on the build the extra variables say
  hosts: rpc_workers
  gather_facts: true
  vars:
    llama_rpc_worker_cache_max_size: 1G
  roles:
    - role: llamarpc.cluster.llama_rpc_worker
"""


def deploy(tmp_path, name, **extra):
    """The worker role on every worker with ``extra`` as extra variables; the run's output."""
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(PLAY, encoding="utf-8")
    result = run_ansible("ansible-playbook", playbook, "-e", json.dumps(extra), timeout=3600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result.stdout


def builds(name):
    """The worker's record of builds: keys, current first."""
    return [entry["key"] for entry in json.loads(lab(name).check_output(f"cat {RECORD}"))["builds"]]


def key_dirs(name):
    """The build directories on the worker (every name in the install directory but the record and ours)."""
    names = set(lab(name).check_output(f"ls -1A {INSTALL_DIR}").split())
    return names - {"builds.json", FOREIGN_FILE.rsplit("/", 1)[1], FOREIGN_DIR.rsplit("/", 1)[1]}


def running_from(name):
    """The directory of the RPC server's executable as the kernel runs it (empty while it is not running)."""
    pid = lab(name).check_output(f"systemctl show -p MainPID --value {SERVICE}")
    if pid in ("", "0"):
        return ""
    return lab(name).check_output(f"readlink /proc/{pid}/exe").rsplit("/", 1)[0]


def on_build(name, key):
    """The worker runs ``key``'s RPC server and answers HELLO (waited for: the restart is the handler's)."""
    return wait_for(lambda: running_from(name) == f"{INSTALL_DIR}/{key}/bin" and hello(name) == "ready")


@pytest.fixture
def foreign_files():
    """Files the collection did not place in the install directory of every worker, removed after the test."""
    for name in WORKERS:
        lab(name).run_expect([0], f"echo mine > {FOREIGN_FILE}")
        lab(name).run_expect([0], f"install -d {FOREIGN_DIR}/bin && echo hand-built > {FOREIGN_DIR}/complete")
    yield
    for name in WORKERS:
        lab(name).run_expect([0], f"rm -rf {shlex.quote(FOREIGN_FILE)} {shlex.quote(FOREIGN_DIR)}")


def foreign_intact(name):
    return (
        lab(name).run(f"test -f {FOREIGN_FILE} && test -d {FOREIGN_DIR}/bin && test -f {FOREIGN_DIR}/complete").rc == 0
    )


@pytest.fixture
def converge_build(tmp_path):
    """The converge's build key (current on every worker); afterwards the worker role as converge runs it makes it
    current again, whatever the test left."""
    first = {name: builds(name)[0] for name in WORKERS}
    keys = sorted(set(first.values()))
    assert len(keys) == 1, first
    yield keys[0]
    deploy(tmp_path, "teardown")


def test_a_new_build_then_a_rollback_without_a_build(tmp_path, converge_build, foreign_files):
    first = converge_build
    repacked, checksum = repack(cached_archive(first), tmp_path)

    # Forward: the repacked archive is a new key, current; the converge's build stays as the previous one.
    deploy(
        tmp_path,
        "forward",
        llama_cpp_install_method="prebuilt",
        llama_cpp_prebuilt_archive=str(repacked),
        llama_cpp_prebuilt_checksum=checksum,
    )
    second = f"prebuilt-{checksum[:16]}"
    for name in WORKERS:
        assert builds(name)[:2] == [second, first], name
        assert {first, second} <= key_dirs(name), name
        assert on_build(name, second), f"{name} does not run {second} and answer HELLO"
        assert foreign_intact(name), name

    # Back: nothing looked up, fetched or built; the record's previous build is current again.
    cache_before = controller_cache()
    dirs_before = {name: key_dirs(name) for name in WORKERS}
    output = deploy(tmp_path, "rollback", llama_cpp_rollback=True)
    assert "Look up the controller's cache of builds" not in output
    assert "Build llama.cpp" not in output and "Download the binary archive" not in output
    assert controller_cache() == cache_before, "the controller's cache changed during a rollback"
    for name in WORKERS:
        assert builds(name)[:2] == [first, second], name
        assert key_dirs(name) == dirs_before[name], f"{name}: a build directory came or went in a rollback"
        assert on_build(name, first), f"{name} does not run {first} again and answer HELLO"
        assert foreign_intact(name), name

    # The converge's build again with keep_previous 0: the repacked build goes, the files that are not ours stay.
    deploy(tmp_path, "prune", llama_cpp_keep_previous=0)
    for name in WORKERS:
        assert builds(name) == [first], name
        assert second not in key_dirs(name), name
        assert foreign_intact(name), f"{name}: a file the collection did not place was removed"
        assert on_build(name, first), name
