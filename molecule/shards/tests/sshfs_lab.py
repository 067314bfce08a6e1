"""Helpers of the sshfs_masked_mount tests (test_5_sshfs_*): the coordinator's mount of node2's model directory, as
the llama_model role made it in converge, and the module run through Ansible with the role's arguments.

Traffic goes only to this scenario's own lab hosts (the inventory molecule's create step wrote).
"""

from __future__ import annotations

import json
import subprocess

import testinfra
import testinfra.utils.ansible_runner
from conftest import COORDINATOR, EXPECTED_HOSTS, MODEL_DIR, MOUNT_ROOT, unit_of
from labtest import BIN, INVENTORY, REPO, ansible_env

CLIENT = COORDINATOR
SERVER = "node2"
EXPORT_DIR = MODEL_DIR
#: The export user's chroot (root-owned) and the read-only bind mount of the model directory in it, as clients see it.
EXPORT_ROOT = "/srv/llamarpc/export"
VIEW = "/shards"
EXPORT_USER = "llamarpc-shards"
MOUNT = f"{MOUNT_ROOT}/{SERVER}"
UNIT = unit_of(SERVER)
KEY = "/etc/llamarpc/sshfs/id_ed25519"
KNOWN_HOSTS = "/etc/llamarpc/sshfs/known_hosts"
#: The shard the plan put on node2 (the only one there), the file every test reads.
BIG = next(name for name, host in EXPECTED_HOSTS.items() if host == SERVER)
FILES = [BIG]


def address(name):
    return testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_variables(name)["ansible_host"]


def mount_args(**extra):
    """The arguments the llama_model role gave sshfs_masked_mount in converge, with ``extra`` on top."""
    args = {
        "src": f"{EXPORT_USER}@{address(SERVER)}:{VIEW}",
        "path": MOUNT,
        "identity_file": KEY,
        "known_hosts_file": KNOWN_HOSTS,
        "allow_other": True,
        "direct_io": True,
        "read_probe": BIG,
        "read_probe_mb": 1,
    }
    args.update(extra)
    return args


def run_mount(args, *, check=False, diff=False, host=CLIENT, timeout=300):
    """Run llamarpc.cluster.sshfs_masked_mount on ``host`` through ansible; its result (with ``failed``)."""
    cmd = [
        str(BIN / "ansible"),
        host,
        "-i",
        INVENTORY,
        "-o",
        "-m",
        "llamarpc.cluster.sshfs_masked_mount",
        "-a",
        json.dumps(args),
    ]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    done = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False, env=ansible_env()
    )
    for line in done.stdout.splitlines():
        if line.startswith(f"{host} | ") and " => " in line:
            result = json.loads(line.split(" => ", 1)[1])
            result.setdefault("failed", done.returncode != 0)
            return result
    raise AssertionError(f"no result from ansible (rc {done.returncode}): {done.stdout}\n{done.stderr}")


def unit_state(host, unit=UNIT):
    out = host.check_output(f"systemctl show -p ActiveState,SubState,MainPID,NRestarts,UnitFileState {unit}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def sshfs_entry(host, path=MOUNT):
    """The fuse.sshfs line of /proc/self/mountinfo at ``path`` (fields after ' - '), or None."""
    for line in host.check_output("cat /proc/self/mountinfo").splitlines():
        fields = line.split()
        if fields[4] == path and "fuse.sshfs" in fields:
            return fields[fields.index("-") + 1 :]
    return None


def sig_ignored(host, pid):
    """Signal numbers in SigIgn of /proc/PID/status."""
    line = host.check_output(f"grep ^SigIgn: /proc/{int(pid)}/status")
    mask = int(line.split(":", 1)[1].strip(), 16)
    return {n + 1 for n in range(64) if mask >> n & 1}


def timed(host, command):
    """Seconds ``command`` (a shell command) takes on ``host``, timed there."""
    code = (
        "import subprocess,sys,time; t=time.monotonic(); "
        "subprocess.run(sys.argv[1], shell=True, check=True); print(time.monotonic()-t)"
    )
    out = host.check_output(f"python3 -c {shell_quote(code)} {shell_quote(command)}")
    return float(out.strip().splitlines()[-1])


def shell_quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def ssh_as_export_user(host, remote_args, stdin="/dev/null", timeout=20):
    """ssh from the client with the SFTP-only key (host key pinned): (exit status, stdout, stderr).

    The status travels in stdout: testinfra takes an exit status of 255 for a failure of its own connection."""
    result = host.run(
        f"timeout {timeout} ssh -i {KEY} -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile={KNOWN_HOSTS} "
        f"-o StrictHostKeyChecking=yes {remote_args} < {stdin}; echo ssh-exit=$?"
    )
    out, marker, status = result.stdout.rpartition("ssh-exit=")
    assert marker, result.stdout
    return int(status.strip()), out, result.stderr


def sftp_batch(host, commands, key=KEY, known_hosts=KNOWN_HOSTS):
    """sftp -b with the SFTP-only key (by default the client's own, where the role put it); commands one per line."""
    script = "\n".join(commands) + "\n"
    return host.run(
        f"printf %s {shell_quote(script)} | timeout 30 sftp -b - -i {key} -o IdentitiesOnly=yes -o BatchMode=yes "
        f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes {EXPORT_USER}@{address(SERVER)}"
    )
