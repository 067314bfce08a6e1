"""Time testinfra's backends side by side on one lab host: the same checks, the same host, interleaved repetitions.

    LLAMARPC_LAB_INVENTORY=<ephemeral>/lab-hosts.yml .venv/bin/python molecule/_shared/backend_bench.py node1 10

Backends: ``ansible`` (testinfra's, as molecule's verifier runs it: for an ssh inventory it runs the ``ssh`` binary
per command with the inventory's and ansible.cfg's options, multiplexing off), ``lab-ssh`` (labtest.lab(): paramiko,
one connection per host, the inventory's known_hosts), ``ssh`` (testinfra's ssh backend, one connection per command,
no multiplexing: mux processes outlive a lab). Each repetition runs every backend's checks back to back, in a
rotating order, so that the machine's load falls on all of them alike; the result is each backend's median seconds
per check and its ratio to the ansible backend's. Every backend must give the same answers, root's included, or the
run fails.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import testinfra
from labtest import INVENTORY, _ssh_options, _variables, lab

CHECKS = (
    ("id -u", lambda host: host.run("id -u").stdout.strip()),
    ("file content", lambda host: host.file("/etc/hostname").content_string.strip()),
    ("service running", lambda host: host.service("ssh").is_running),
    ("command exists", lambda host: host.exists("sshfs")),
    ("file mode", lambda host: oct(host.file("/etc/shadow").mode)),
)


def backends(name):
    variables = _variables().get_variables(name)
    options = _ssh_options(variables["ansible_ssh_common_args"])
    extra = f"-o UserKnownHostsFile={options['userknownhostsfile']} -o StrictHostKeyChecking=yes -o ControlMaster=no"
    ssh = testinfra.get_host(
        f"ssh://{variables['ansible_user']}@{variables['ansible_host']}",
        ssh_identity_file=variables["ansible_ssh_private_key_file"],
        ssh_extra_args=extra,
        controlpersist=0,
        sudo=True,
    )
    ansible = testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")
    return {"ansible": ansible, "lab-ssh": lab(name), "ssh": ssh}


def main(name, repetitions):
    hosts = backends(name)
    order = list(hosts)
    seconds = {kind: [] for kind in hosts}
    answers = {}
    for repetition in range(repetitions):
        rotated = order[repetition % len(order) :] + order[: repetition % len(order)]
        for kind in rotated:
            for label, check in CHECKS:
                start = time.monotonic()
                answer = check(hosts[kind])
                seconds[kind].append(time.monotonic() - start)
                answers.setdefault(label, {})[kind] = answer
    for label, by_kind in answers.items():
        if len(set(map(repr, by_kind.values()))) != 1:
            raise SystemExit(f"the backends disagree on {label}: {by_kind}")
    if answers["id -u"]["ansible"] != "0":
        raise SystemExit(f"commands do not run as root: {answers['id -u']}")
    base = statistics.median(seconds["ansible"])
    report = {
        "host": name,
        "checks": len(CHECKS),
        "repetitions": repetitions,
        "answers": {label: by_kind["ansible"] for label, by_kind in answers.items()},
        "backends": {
            kind: {
                "median_s": round(statistics.median(values), 4),
                "min_s": round(min(values), 4),
                "max_s": round(max(values), 4),
                "total_s": round(sum(values), 2),
                "ansible_over_this": round(base / statistics.median(values), 1),
            }
            for kind, values in seconds.items()
        },
    }
    print(json.dumps(report, indent=1))
    print("load:", Path("/proc/loadavg").read_text(encoding="ascii").strip())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10)
