"""The README's "only what changed restarts", for llama-server: a new API key, a new flag and a new binary each restart
it, one at a time (each run changes one thing only), and the key file stays readable by llama-server's user alone. A
re-run that changes nothing leaves it alone: that is the scenario's idempotence step (the whole converge again,
changed=0 on every host, so no restart handler ran), not repeated here. Runs limited to the coordinator's role (its
own tag); the fixture puts the scenario's settings back."""

from __future__ import annotations

import pytest
from clusterlib import (
    API_KEY,
    api,
    deployed_plan,
    greedy,
    inventory_copy,
    main_pid,
    playbook,
    wait_serving,
)
from labtest import EVENTUALLY, INVENTORY, lab

SERVER = "llamarpc-server"
KEY_FILE = "/etc/llamarpc/coordinator/api-keys"
NEW_KEY = "molecule-cluster-key-rotated"
#: A copy of the build in use, as a new llama.cpp build would land: beside the others, at a path of its own.
COPY = "/usr/local/lib/llamarpc-test-new-build"


def coordinator_run(inventory, *args):
    """The coordinator's role alone (its tag); the model step is skipped under it, so the deployed model is named."""
    model = f"llama_coordinator_model_path={deployed_plan()['model_path']}"
    result = playbook(inventory, "--tags", "llama_coordinator", "-e", model, *args)
    assert result.returncode == 0, result.stdout[-3000:]
    return result


def running(node1):
    """(MainPID, its argv, the binary it runs) of llama-server."""
    pid = main_pid(node1, SERVER)
    argv = node1.run_expect([0], f"tr '\\0' '\\n' < /proc/{pid}/cmdline").stdout.split("\n")
    exe = node1.run_expect([0], f"readlink /proc/{pid}/exe").stdout.strip()
    return pid, argv, exe


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def edited(tmp_path, name, **settings):
    def edit(data):
        data["vars"].update(settings)

    directory = tmp_path / name
    directory.mkdir()
    return inventory_copy(directory, edit)


def answers(key):
    status, _body = api("/completion", greedy("ping", 2), key=key)
    return status


@pytest.fixture()
def restored():
    """Whatever a test leaves, the scenario's own settings are deployed again after it (and the copy removed): a
    change back, so llama-server restarts once more, on the scenario's key."""
    yield
    coordinator_run(INVENTORY)
    lab("node1").run(f"rm -rf {COPY}")
    assert wait_serving(EVENTUALLY) is not None


def test_llama_server_restarts_on_a_changed_key_flag_or_binary_and_not_on_a_no_op(tmp_path, restored):
    node1 = lab("node1")
    pid, argv, exe = running(node1)

    # A new API key: restarted, the new key opens the API, the old one no longer does.
    key = edited(tmp_path, "key", llama_coordinator_api_key=NEW_KEY)
    coordinator_run(key)  # the role waits for /health and runs its smoke completion with the key in force
    key_pid, key_argv = running(node1)[:2]
    assert key_pid != pid
    assert answers(NEW_KEY) == 200
    assert answers(API_KEY) == 401
    assert node1.file(KEY_FILE).user == "root"
    assert node1.file(KEY_FILE).group == "llamarpc-server"
    assert node1.file(KEY_FILE).mode == 0o640
    assert node1.run(f"setpriv --reuid=nobody --regid=nogroup --clear-groups cat {KEY_FILE}").rc != 0
    assert key_argv == argv  # the key travels in the file, never on the command line

    # A new flag (the key as before this step): restarted with it.
    level = "3" if flag(argv, "--log-verbosity") == "4" else "4"
    verbose = edited(tmp_path, "flag", llama_coordinator_api_key=NEW_KEY, llama_coordinator_log_verbosity=int(level))
    coordinator_run(verbose)
    flag_pid, flag_argv = running(node1)[:2]
    assert flag_pid != key_pid
    assert flag(flag_argv, "--log-verbosity") == level
    assert answers(NEW_KEY) == 200

    # A new binary (key and flag as before this step): restarted on it.
    node1.run_expect([0], f"rm -rf {COPY} && cp -a {exe.rsplit('/', 1)[0]} {COPY}")
    new_build = f"{COPY}/{exe.rsplit('/', 1)[1]}"
    coordinator_run(verbose, "-e", f"llama_cpp_server_bin={new_build}")
    binary_pid, binary_argv, binary_exe = running(node1)
    assert binary_pid != flag_pid
    assert binary_exe == new_build, binary_exe
    assert binary_argv[1:] == flag_argv[1:]
    assert answers(NEW_KEY) == 200
