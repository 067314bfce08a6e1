"""site.yml --check --diff on the fresh hosts, as llamactl, before the first real run (converge.yml): it exits 0, shows
what would change (the diff of a unit, the shard placement and the memory plan), and changes nothing on any host."""

import json
import re
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
from host_state import state_changes
from labtest import INVENTORY, host_state, lab

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
HOSTS = RUNNER.get_hosts("all")
RECORD = Path(INVENTORY).parent / "site-check.json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def check_run():
    assert RECORD.exists(), f"{RECORD} is missing: converge did not run site.yml --check"
    run = json.loads(RECORD.read_text())
    return {**run, "stdout": ANSI.sub("", run["stdout"])}


def test_check_mode_exits_0_on_every_host(check_run):
    recap = dict(re.findall(r"^(\S+)\s+:\s+(ok=.*)$", check_run["stdout"], re.MULTILINE))
    assert check_run["rc"] == 0, check_run["stdout"][-3000:] + check_run["stderr"][-2000:]
    assert sorted(recap) == sorted(HOSTS), recap
    for host, counts in recap.items():
        numbers = dict(re.findall(r"(\w+)=(\d+)", counts))
        assert numbers["failed"] == "0" and numbers["unreachable"] == "0", f"{host}: {counts}"
        assert int(numbers["changed"]) > 0, f"{host}: check mode on a fresh host reported nothing to do: {counts}"


def test_check_mode_shows_the_units_and_both_plans(check_run):
    out = check_run["stdout"]
    # The diff of the worker's unit file (a new file, written by managed_files: the header names the destination).
    assert re.search(r"^\+\+\+ after: /etc/systemd/system/llamarpc-rpc-worker\.service$", out, re.MULTILINE)
    # One flag per line: the RPC server the cache check becomes (--exec), then "-H ADDRESS" on the next diff line.
    server = r"^\+\s+--exec /opt/llamarpc/llama\.cpp/\w+/bin/ggml-rpc-server \\\n\+\s+-H "
    assert re.search(server, out, re.MULTILINE)
    # The shard placement (llama_model) and the memory plan (llama_coordinator), computed without the model on a host.
    assert re.search(r"llamarpc-tiny-seed0-00001-of-00002\.gguf -> node\d", out)
    assert re.search(r"- node\s+endpoint\s+layers\s+weights\s+kv cache", out)
    assert "+LLAMARPC_RPC=" in out


@pytest.mark.parametrize("name", HOSTS)
def test_check_mode_changed_nothing(name):
    host = lab(name)
    before, after = host_state(host, "before-check"), host_state(host, "after-check")
    assert before["packages"] and before["files"] and before["unit_files"], "an empty record proves nothing"
    changes = state_changes(before, after)
    assert not changes, f"{name}: site.yml --check changed {len(changes)} thing(s):\n" + "\n".join(changes[:40])
