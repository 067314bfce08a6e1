"""What every scenario's testinfra tests need of the lab: its inventory, its hosts, Ansible's environment, polling.

Importable from any scenario's tests because pyproject.toml puts molecule/_shared on pytest's pythonpath.
"""

from __future__ import annotations

import atexit
import configparser
import functools
import itertools
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import paramiko
import testinfra
import testinfra.host
from testinfra.backend.paramiko import ParamikoBackend
from testinfra.utils.ansible_runner import AnsibleRunner

#: The inventory the lab role wrote for this scenario (set by .config/molecule/config.yml).
INVENTORY = os.environ["LLAMARPC_LAB_INVENTORY"]
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


#: How lab() reaches a host: LabSSH, one SSH connection per host (measured 7-11x faster per check than an ansible
#: process per command); ``ansible`` (LLAMARPC_LAB_BACKEND, set by the worker scenario alone) for tests that run
#: modules through testinfra's ``host.ansible``, which only its ansible backend has.
BACKEND = os.environ.get("LLAMARPC_LAB_BACKEND", "ssh")
#: A live lab host acknowledges TCP data within milliseconds whatever the load (its kernel does, not a process): data
#: unacknowledged this long means the host is gone (stopped or restarted by a test), and the connection is dropped.
_DEAD_PEER_MS = 30_000


def _ssh_options(common_args):
    """``-o Key=Value`` options of ``ansible_ssh_common_args`` as {lowercase key: value}."""
    words = shlex.split(common_args or "")
    options = {}
    for flag, value in zip(words, words[1:], strict=False):
        if flag == "-o" and "=" in value:
            key, _sep, setting = value.partition("=")
            options[key.strip().lower()] = setting.strip()
    return options


class LabSSH(ParamikoBackend):
    """testinfra's paramiko backend on the lab inventory's terms: its address, user, key and known_hosts (an unknown or
    changed host key is refused, as ``StrictHostKeyChecking=yes`` does for Ansible), and its become: commands run
    through ``sudo -H -n`` as the become user, like Ansible's sudo. One SSH connection per host for every command:
    testinfra's ansible backend runs each command through a new ``ssh`` process (its handshake, key exchange and
    authentication every time, unless a master of molecule's still holds one; and an ansible process each), measured
    6.7 times slower per check without masters (molecule/_shared/backend_bench.py). A connection whose host went away
    (stopped or restarted by a test) is made again once."""

    NAME = "lab-ssh"

    def __init__(self, name, variables):
        options = _ssh_options(variables.get("ansible_ssh_common_args"))
        self.address = variables.get("ansible_host", name)
        self.ssh_port = int(variables.get("ansible_port", 22))
        self.known_hosts = options.get("userknownhostsfile")
        if not self.known_hosts or options.get("stricthostkeychecking", "yes").lower() != "yes":
            raise ValueError(f"{name}: the lab inventory names no known_hosts file with StrictHostKeyChecking=yes")
        become = str(variables.get("ansible_become", False)).lower() in ("true", "yes", "1")
        super().__init__(
            f"{variables.get('ansible_user', 'root')}@{name}",
            ssh_identity_file=variables.get("ansible_ssh_private_key_file"),
            timeout=120,  # ansible.cfg's connect timeout for the same hosts
            sudo=become,
            sudo_user=variables.get("ansible_become_user", "root") if become else None,
        )

    @functools.cached_property
    def client(self):
        sock = socket.create_connection((self.address, self.ssh_port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, _DEAD_PEER_MS)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        client = paramiko.SSHClient()
        client.load_host_keys(self.known_hosts)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                self.address,
                port=self.ssh_port,
                username=self.host.user,
                key_filename=self.ssh_identity_file,
                sock=sock,
                timeout=self.timeout,
                banner_timeout=self.timeout,
                auth_timeout=self.timeout,
                allow_agent=False,
                look_for_keys=False,
            )
        except BaseException:
            client.close()
            sock.close()
            raise
        return client

    def _exec_command(self, command):
        # stderr is read beside stdout: testinfra's paramiko backend reads stdout to its end first, and a command that
        # writes more than the SSH window (2 MiB) to stderr before it ends its stdout then waits forever (measured).
        chan = self.client.get_transport().open_session(timeout=self.timeout)
        chan.exec_command(command)
        stderr = []
        reader = threading.Thread(target=lambda: stderr.append(chan.makefile_stderr("rb").read()), daemon=True)
        reader.start()
        stdout = chan.makefile("rb").read()
        reader.join()
        return chan.recv_exit_status(), stdout, b"".join(stderr)

    def get_sudo_command(self, command, sudo_user):
        return self.quote("sudo -H -n -u %s /bin/sh -c %s", sudo_user or "root", command)

    def run(self, command, *args, **kwargs):
        try:
            return super().run(command, *args, **kwargs)
        except (paramiko.SSHException, EOFError, OSError):
            client = self.__dict__.pop("client", None)
            transport = client.get_transport() if client is not None else None
            if transport is not None and transport.is_active():
                self.__dict__["client"] = client
                raise
            if client is not None:
                client.close()
            return super().run(command, *args, **kwargs)


@functools.cache
def _variables():
    return AnsibleRunner(INVENTORY)


def lab(name):
    """A testinfra host of the lab, by inventory name (commands run as root, like the inventory says): testinfra's
    ansible backend, or with LLAMARPC_LAB_BACKEND=ssh one SSH connection with the inventory's key and known_hosts."""
    if BACKEND == "ansible":
        return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")
    return _lab_ssh(name)


@functools.cache
def _lab_ssh(name):
    backend = LabSSH(name, _variables().get_variables(name))
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host


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


#: Each Ansible run of a test multiplexes its SSH connections (one per host for the run, not one per task), with
#: molecule's own options (.config/molecule/config.yml, as molecule wrote them into the scenario's ansible.cfg) but
#: over masters of its own: a new run never reuses a connection held by an earlier one, so a test that stops a host's
#: sshd or powers the host off sees what a user would. The rest end when the tests' process exits.
def _molecule_ssh_args():
    config = configparser.ConfigParser(interpolation=None)
    config.read(Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "ansible.cfg")
    return config.get("ssh_connection", "ssh_args")


_MUX_ROOT = Path(tempfile.mkdtemp(prefix="llamarpc-mux-"))  # short: a socket's path has at most 108 bytes
_mux_runs = itertools.count()


def _end_masters():
    for socket_path in _MUX_ROOT.glob("*/*"):
        command = ["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "lab"]
        subprocess.run(command, capture_output=True, check=False, timeout=30)
    shutil.rmtree(_MUX_ROOT, ignore_errors=True)


atexit.register(_end_masters)


def ansible_env(**extra):
    """Environment for one ansible/ansible-playbook run by a test against the lab (its own SSH masters)."""
    return {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_SSH_ARGS": _molecule_ssh_args(),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(_MUX_ROOT / str(next(_mux_runs))),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        # The same patience as converge (.config/molecule/config.yml): ansible.cfg's 30 s ended a fault test's heal
        # with "Timeout (32s) waiting for privilege escalation prompt" at load 20-25.
        "ANSIBLE_TIMEOUT": "120",
        **extra,
    }


_RECAP_LINE = re.compile(r"^(\S+)\s+:((?:\s+[a-z]+=\d+)+)\s*$")


def recap(output):
    """Host -> {ok, changed, unreachable, failed, skipped, rescued, ignored} from the PLAY RECAP of an ansible-playbook
    run's output (colour codes stripped); {} when the output has no recap (the run never got that far)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    if "PLAY RECAP" not in plain:
        return {}
    counts = {}
    for line in plain.rsplit("PLAY RECAP", 1)[1].splitlines()[1:]:
        match = _RECAP_LINE.match(line.strip())
        if match:
            counts[match[1]] = {key: int(value) for key, value in re.findall(r"([a-z]+)=(\d+)", match[2])}
    return counts


#: The bound on waiting for what happens on its own (a unit restarts, a file syncs, a mount comes back, a worker
#: answers). wait_for returns as soon as the predicate holds, so a generous bound costs nothing when things work; a
#: tight one can turn a loaded machine into a red test.
EVENTUALLY = 600


def wait_for(predicate, timeout=EVENTUALLY, interval=1.0):
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; returns the last value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


#: The exit status a command of ``systemctl_tried`` says "219/CGROUP" with.
CGROUP_FAILURE = 219


def systemctl_tried(host, action, unit, tries=3, delay=2.0):
    """``systemctl ACTION UNIT`` on a lab host (testinfra), tried again, ``delay`` seconds apart, while it failed
    because systemd could not put a new process in the unit's cgroup (219/CGROUP in the unit's journal since the
    attempt: a loaded lab host, docs/development.md), as the roles' own starts are. The last attempt's result."""
    command = (
        f"since=$(date '+%Y-%m-%d %H:%M:%S'); systemctl {action} {unit} && exit 0; rc=$?; "
        f"journalctl -u {unit} --since \"$since\" -o cat --no-pager | grep -q '219/CGROUP' && exit {CGROUP_FAILURE}; "
        "exit $rc"
    )
    for attempt in range(tries):
        result = host.run(command)
        if result.rc != CGROUP_FAILURE or attempt == tries - 1:
            return result
        time.sleep(delay)
    return result


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
