"""The SSH connection masters of a scenario's Ansible runs: where they live, and ending them.

Every Ansible run against a scenario's lab (molecule's steps, and the playbooks its tests run through
labtest.ansible_env) multiplexes its SSH connections: one handshake per host and minute instead of one per task. At
load 14, ten connections to a lab host took 17.2 s one by one and 1.5 s over a master. A master outlives the host it
talks to, so whatever ends a host ends the masters too: the lab's create and destroy steps (a host that is booted again
gets fresh connections, never a master holding the dead one) and a test that stops a host's sshd.

Run as a script (`python ssh_masters.py`), it ends the masters of the scenario in MOLECULE_EPHEMERAL_DIRECTORY.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: ansible's ssh_args for the lab; .config/molecule/config.yml says the same for molecule's own steps. The keepalive
#: ends a master whose host vanished without a test ending it (a minute without an answer).
SSH_ARGS = "-o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=15 -o ServerAliveCountMax=4"
#: Without a scenario (a test run outside molecule): no masters at all.
NO_MUX_ARGS = "-o ControlMaster=no -o ControlPersist=no"


def mux_dir():
    """The scenario's directory of master sockets (ansible's control_path_dir), or None outside molecule."""
    ephemeral = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    return Path(ephemeral) / "ssh-mux" if ephemeral else None


def ansible_ssh_env():
    """ANSIBLE_* settings for an ansible or ansible-playbook run against the scenario's lab."""
    directory = mux_dir()
    if directory is None:
        return {"ANSIBLE_SSH_ARGS": NO_MUX_ARGS}
    return {"ANSIBLE_SSH_ARGS": SSH_ARGS, "ANSIBLE_SSH_CONTROL_PATH_DIR": str(directory)}


def end_all(directory=None):
    """Ask every master in ``directory`` (default: the scenario's) to exit, and remove sockets whose master is gone.
    Returns the names of the sockets found."""
    directory = directory or mux_dir()
    if directory is None or not directory.is_dir():
        return []
    found = []
    for socket in sorted(directory.iterdir()):
        if not socket.is_socket():
            continue
        found.append(socket.name)
        subprocess.run(
            ["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "lab-mux"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        socket.unlink(missing_ok=True)
    return found


if __name__ == "__main__":
    print(f"ended {len(end_all())} SSH master(s)")
    sys.exit(0)
