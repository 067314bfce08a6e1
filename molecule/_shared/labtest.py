"""What every scenario's testinfra tests need of the lab: its inventory, its hosts, Ansible's environment, polling.

Importable from any scenario's tests because pyproject.toml puts molecule/_shared on pytest's pythonpath.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import testinfra

#: The inventory the lab role wrote for this scenario (set by .config/molecule/config.yml).
INVENTORY = os.environ["LLAMARPC_LAB_INVENTORY"]
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def lab(name):
    """A testinfra host of the lab, by inventory name (commands run as root, like the inventory says)."""
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


_HTTP = (
    "import sys, urllib.request\n"
    "data = sys.argv[2].encode() if len(sys.argv) > 2 else None\n"
    "req = urllib.request.Request(sys.argv[1], data=data, headers={'Content-Type': 'application/json'})\n"
    "sys.stdout.write(urllib.request.urlopen(req, timeout=30).read().decode())\n"
)


def http_command(url, body=None):
    """A shell command that GETs ``url`` (or POSTs the JSON text ``body``) with the lab host's own python3 - bare hosts
    have no curl, and the tests install nothing the roles do not - printing the response; non-zero on an HTTP error."""
    args = [url] if body is None else [url, body]
    return " ".join(["python3", "-c", shlex.quote(_HTTP), *map(shlex.quote, args)])


#: Written on every host by molecule/_shared/bare_record.yml at prepare, before anything installs a package.
BEFORE_CONVERGE = "/var/lib/llamarpc-test/before-converge.json"


def before_converge(host):
    """{command: path or None} of the commands the roles need, as they were on the bare host before prepare's story
    and converge (a missing record fails the test: prepare did not run)."""
    record = host.file(BEFORE_CONVERGE)
    assert record.exists, f"{BEFORE_CONVERGE} is missing on {host.backend.get_hostname()}: prepare did not run"
    return json.loads(record.content_string)


#: Written by molecule/_shared/bare_record.yml with bare_record_label (host_state.py): packages, units and files.
STATE_RECORD = "/var/lib/llamarpc-test/state-{label}.json"


def host_state(host, label):
    """The record of a host's packages, unit files, running units and files taken under ``label`` (a missing record
    fails the test: the step that takes it did not run)."""
    path = STATE_RECORD.format(label=label)
    record = host.file(path)
    assert record.exists, f"{path} is missing on {host.backend.get_hostname()}: the record was not taken"
    return json.loads(record.content_string)


def ansible_env(**extra):
    """Environment for ansible/ansible-playbook run by a test against the lab."""
    return {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ControlPersist=no",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        **extra,
    }


def wait_for(predicate, timeout, interval=1.0):
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; returns the last value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


def inventory_hosts():
    """Inventory name -> that host's variables (ansible_host, ...), as the lab role wrote them."""
    import yaml  # noqa: PLC0415 - only the tests that read the inventory need it

    with open(INVENTORY, encoding="utf-8") as handle:
        return yaml.safe_load(handle)["all"]["hosts"]


def address(name):
    """The lab address of a host, by inventory name."""
    return inventory_hosts()[name]["ansible_host"]


def run_ansible(tool, *args, inventory=INVENTORY, timeout=600, **env):
    """``ansible`` or ``ansible-playbook`` (``tool``) of the project's venv against a lab inventory, from the
    repository root with ansible_env(**env): the completed process (never raises on a failed run)."""
    return subprocess.run(
        [str(BIN / tool), "-i", str(inventory), *(str(arg) for arg in args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=ansible_env(**env),
    )


def adhoc(host, module, args, inventory=INVENTORY, timeout=300):
    """One module run ad hoc on a lab host (``ansible -o``): (completed process, its result dict or None)."""
    done = run_ansible(
        "ansible", host, "-o", "-m", module, "-a", json.dumps(args), inventory=inventory, timeout=timeout
    )
    for line in done.stdout.splitlines():
        if line.startswith(f"{host} | ") and " => " in line:
            return done, json.loads(line.split(" => ", 1)[1])
    return done, None
