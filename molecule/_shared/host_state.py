"""A lab host's state as JSON: its packages, systemd units and files (molecule/_shared/bare_record.yml runs it there).

Two records of the same host compare with state_changes below: a run that should change nothing (site.yml --check)
must leave the same packages (dpkg), unit files, running units, and files (type, mode, owner, size, mtime, link
target) in SCOPE. What moves on its own is left out, and said below: login sessions (each Ansible connection opens
one), sudo's timestamps, and this record's own directory. Directory times are not recorded (a file created and
removed again is a change only while it exists), file times are.

Usage: python3 host_state.py OUT.json  (run as root; standard library only, like a bare host's python3).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

# Besides the usual places, those the roles write outside dpkg's view or at run time: the shards' mount points
# (llama_model_mount_root), apt keyrings (the tailscale role), the coordinator's and WireGuard's runtime state.
SCOPE = (
    "/etc",
    "/opt",
    "/usr/local",
    "/usr/share/keyrings",
    "/var/lib",
    "/var/cache",
    "/srv",
    "/data",
    "/home",
    "/root",
    "/mnt",
    "/run/llamarpc",
    "/run/wireguard",
)
# Paths that change without anyone changing the host: the record itself, sudo's per-login timestamps, Ansible's
# temporary files of the connecting user, systemd's random seed and timer stamps.
SKIP = re.compile(
    r"^(/var/lib/llamarpc-test|/var/lib/sudo/ts|/var/lib/systemd/(random-seed|timers))(/|$)"
    r"|/\.ansible(/|$)"
)
# Units of login sessions: every ssh login (each Ansible task) starts and ends them.
SESSION_UNIT = re.compile(r"^(session-\S+\.scope|user@\d+\.service|user-runtime-dir@\d+\.service|user-\d+\.slice)$")


def entry(path):
    """[type, mode, uid, gid, size, mtime_ns, link target] of a path, not following a link (None if it is gone)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    is_dir = stat.S_ISDIR(st.st_mode)
    return [
        stat.S_IFMT(st.st_mode),
        stat.S_IMODE(st.st_mode),
        st.st_uid,
        st.st_gid,
        None if is_dir else st.st_size,
        None if is_dir else st.st_mtime_ns,
        os.readlink(path) if stat.S_ISLNK(st.st_mode) else None,
    ]


def files(scope=SCOPE):
    """{path: entry} of everything under scope (links are recorded, not followed)."""
    paths = []
    for top in scope:
        paths.append(top)
        for root, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if not SKIP.search(os.path.join(root, d))]
            paths.extend(os.path.join(root, name) for name in [*dirs, *names])
    entries = {path: entry(path) for path in paths if not SKIP.search(path)}
    return {path: value for path, value in entries.items() if value is not None}


def lines(*argv):
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.splitlines()


def state_changes(before, after):
    """What differs between two host_state records, one line each: an empty list means nothing changed."""
    changes = []
    for key in ("packages", "unit_files", "files"):
        old, new = before[key], after[key]
        changes.extend(
            f"{key}: {name}: {old.get(name)} -> {new.get(name)}"
            for name in sorted(old.keys() | new.keys())
            if old.get(name) != new.get(name)
        )
    old, new = set(before["running_units"]), set(after["running_units"])
    changes.extend(f"running_units: {name} stopped" for name in sorted(old - new))
    changes.extend(f"running_units: {name} started" for name in sorted(new - old))
    return changes


def main(dest):
    packages = dict(
        line.split("\t", 1)
        for line in lines("dpkg-query", "--show", "--showformat=${Package}\t${db:Status-Abbrev} ${Version}\n")
    )
    unit_files = dict(
        line.split(None, 1)
        for line in lines("systemctl", "list-unit-files", "--no-legend", "--plain")
        if line.strip() and not SESSION_UNIT.match(line.split()[0])
    )
    running = sorted(
        name
        for name in (
            line.split()[0]
            for line in lines("systemctl", "list-units", "--state=running", "--no-legend", "--plain")
            if line.strip()
        )
        if not SESSION_UNIT.match(name)
    )
    record = {"packages": packages, "unit_files": unit_files, "running_units": running, "files": files()}
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(dest + ".tmp", dest)


if __name__ == "__main__":
    main(sys.argv[1])
