"""Verify the RPC workers: unprivileged and hardened, bound to the lab address, reachable only from the
coordinator, probed over their own protocol, restarted by systemd, and caching large tensors after a load."""

import shlex
import subprocess
import sys

import pytest
import testinfra
import testinfra.utils.ansible_runner
from labtest import INVENTORY, REPO, http_command, lab, systemctl_tried, wait_for

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
WORKERS = RUNNER.get_hosts("rpc_workers")
COORDINATOR = RUNNER.get_hosts("coordinator")[0]
NON_COORDINATORS = [h for h in WORKERS if h != COORDINATOR]
PORT = 50052
SERVICE = "llamarpc-rpc-worker"
testinfra_hosts = WORKERS


def address(name):
    return RUNNER.get_variables(name)["ansible_host"]


def probe_from(name, targets):
    """rpc_endpoint_facts run on host ``name`` against ``targets`` (names)."""
    result = lab(name).ansible(
        "llamarpc.cluster.rpc_endpoint_facts",
        f"endpoints={','.join(f'{address(t)}:{PORT}' for t in targets)} timeout=3",
        check=False,
    )
    return result["ansible_facts"]["rpc_endpoints"]


def connect_from(name, target):
    """Outcome of a TCP connect from ``name`` to ``target``'s RPC port (abortive close, never holds the worker)."""
    code = (
        "import socket,struct,errno; s=socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET,socket.SO_LINGER,struct.pack('ii',1,0)); s.settimeout(3); "
        f"r=s.connect_ex(('{address(target)}',{PORT})); "
        "print({0:'accepted',errno.ECONNREFUSED:'refused'}.get(r,'error %d' % r)); s.close()"
    )
    return lab(name).check_output(f"python3 -c {shlex.quote(code)}")


def test_service_runs_as_the_unprivileged_user(host):
    assert host.service(SERVICE).is_running
    assert host.service(SERVICE).is_enabled
    user = host.check_output(f"systemctl show -p User --value {SERVICE}")
    assert user == "llamarpc"
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    assert host.check_output(f"ps -o user= -p {pid}") == "llamarpc"
    assert host.user("llamarpc").shell == "/usr/sbin/nologin"


def test_unit_is_hardened(host):
    unit = host.file(f"/etc/systemd/system/{SERVICE}.service").content_string
    for line in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/cache/llamarpc/rpc-worker",
        "Restart=always",
    ):
        assert line in unit


def test_listens_only_on_the_lab_address(host):
    name = host.backend.get_hostname()
    listening = [s for s in host.socket.get_listening_sockets() if s.endswith(f":{PORT}")]
    assert listening == [f"tcp://{address(name)}:{PORT}"]


def test_cache_directory_exists_before_the_worker(host):
    cache = host.file("/var/cache/llamarpc/rpc-worker/rpc")
    assert cache.is_directory and cache.user == "llamarpc"
    env = host.check_output(f"systemctl show -p Environment --value {SERVICE}")
    assert "LLAMA_CACHE=/var/cache/llamarpc/rpc-worker" in env


@pytest.mark.parametrize(("source", "target"), [(s, t) for s in NON_COORDINATORS for t in WORKERS if t != s])
def test_only_the_coordinator_gets_through(source, target):
    # (A host reaching its own worker goes through loopback, which is allowed.)
    assert connect_from(source, target) == "refused"
    assert connect_from(COORDINATOR, target) == "accepted"


def test_probe_reports_protocol_and_memory_of_every_worker():
    endpoints = probe_from(COORDINATOR, WORKERS)
    assert [e["state"] for e in endpoints] == ["ready"] * len(WORKERS), endpoints
    for endpoint in endpoints:
        assert endpoint["protocol"].startswith("7."), endpoint
        assert endpoint["device_count"] >= 1
        assert all(d["total"] > 0 for d in endpoint["devices"])


def test_systemd_brings_a_killed_worker_back():
    host = lab(NON_COORDINATORS[-1])
    before = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    host.run(f"kill -9 {before}")
    after = wait_for(
        lambda: (
            (pid := host.check_output(f"systemctl show -p MainPID --value {SERVICE}")) not in (before, "0")
            and host.service(SERVICE).is_running
            and pid
        )
    )
    assert after, f"{SERVICE} was not started again after PID {before} was killed"
    # Type=simple: active before it listens; wait for the HELLO answer rather than probe once.
    state = wait_for(lambda: (s := probe_from(COORDINATOR, [NON_COORDINATORS[-1]])[0]["state"]) == "ready" and s)
    assert state == "ready"


def test_a_coordinator_load_fills_the_tensor_caches(tmp_path):
    # A model whose largest tensors exceed the 10 MiB cache threshold, loaded once through every worker.
    subprocess.run(
        [sys.executable, str(REPO / "lab/tools/tiny_gguf.py"), "--out", str(tmp_path), "--preset", "cache"],
        check=True,
        capture_output=True,
    )
    model = next(tmp_path.glob("*.gguf"))
    for worker in NON_COORDINATORS:  # start from empty caches, so what is found was cached by this load
        lab(worker).run("find /var/cache/llamarpc/rpc-worker/rpc -type f -delete")
    coordinator = lab(COORDINATOR)
    coordinator.ansible("ansible.builtin.copy", f"src={model} dest=/tmp/cache-model.gguf mode=0644", check=False)
    pid = coordinator.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    bin_dir = coordinator.check_output(f"dirname $(readlink /proc/{pid}/exe)")
    rpc = ",".join(f"{address(w)}:{PORT}" for w in NON_COORDINATORS)
    devices = ",".join(f"RPC{i}" for i in range(len(NON_COORDINATORS)))
    coordinator.run(
        f"systemd-run --unit=cache-load --collect {bin_dir}/llama-server -m /tmp/cache-model.gguf --rpc {rpc} "
        f"-dev {devices} -ngl all -c 256 -t 1 --host 127.0.0.1 --port 18080"
    )
    try:
        if not wait_for(lambda: coordinator.run(http_command("http://127.0.0.1:18080/health")).rc == 0, interval=2):
            pytest.fail(coordinator.run("journalctl -u cache-load --no-pager | tail -30").stdout)
    finally:
        coordinator.run("systemctl stop cache-load")
    # Layers go to workers by llama.cpp's split; together the workers must hold every offloaded tensor over 10 MiB
    # (token_embd stays with llama-server), each cached file being one of those.
    cached = []
    for worker in NON_COORDINATORS:
        listing = lab(worker).check_output("find /var/cache/llamarpc/rpc-worker/rpc -type f -printf '%s\\n'")
        cached += [int(size) for size in listing.split()]
    assert sorted(cached) == sorted(large_offloaded_tensor_bytes()), cached


def large_offloaded_tensor_bytes():
    """Sizes of the cache preset's tensors that go to workers and are over the 10 MiB cache threshold."""
    sys.path.insert(0, str(REPO / "lab" / "tools"))
    import tiny_gguf  # noqa: PLC0415 - the generator script, not an installed package

    return [
        t.nbytes
        for t in tiny_gguf.PRESETS["cache"].tensors
        if t.nbytes > 10 * 1024 * 1024 and t.name != "token_embd.weight"
    ]


def test_the_units_verifier_removes_a_truncated_cache_file_before_the_start():
    """After the load above: the hardened unit's start (as the worker's user, in its sandbox, with the helper
    the role built) removes a cache file cut short by 4 KiB, and keeps the others."""
    worker = lab(NON_COORDINATORS[0])
    cache = "/var/cache/llamarpc/rpc-worker/rpc"
    names = sorted(worker.check_output(f"find {cache} -type f -printf '%f\\n'").split())
    assert names, "the load above cached nothing on this worker"
    victim = f"{cache}/{names[0]}"
    worker.check_output(f"truncate -s -4096 {victim}")  # still over 10 MiB: only the hash can tell
    worker.check_output(f"systemctl restart {SERVICE}")
    assert worker.run(f"test -e {victim}").rc == 1
    assert sorted(worker.check_output(f"find {cache} -type f -printf '%f\\n'").split()) == names[1:]
    journal = worker.check_output(f"journalctl -u {SERVICE} -n 200 --no-pager -o cat")
    assert f"{victim}: removed, its bytes hash to" in journal
    assert f"{len(names) - 1} file(s) verified, 1 removed, 0 not removable" in journal


def test_a_restart_hashes_only_what_changed_since_the_last_check_and_the_cutovers_check_is_the_same():
    """After the start above (which hashed every file the load had written and recorded them): a restart hashes none,
    a file changed in place is hashed again and goes, and the cutover's oneshot check reads the same record."""
    worker = lab(NON_COORDINATORS[0])
    cache = "/var/cache/llamarpc/rpc-worker/rpc"
    names = sorted(worker.check_output(f"find {cache} -type f -printf '%f\\n'").split())
    assert len(names) >= 2, names
    since = worker.check_output("date '+%Y-%m-%d %H:%M:%S'")
    restarted = systemctl_tried(worker, "restart", SERVICE)
    assert restarted.rc == 0, restarted.stderr
    journal = worker.check_output(f"journalctl -u {SERVICE} --since '{since}' --no-pager -o cat")
    assert f"{len(names)} file(s) verified, 0 removed, 0 not removable ({len(names)} of them unchanged" in journal
    # One process: the verifier told systemd it was ready, then became the RPC server (the service's main PID).
    pid = worker.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    assert worker.check_output(f"readlink /proc/{pid}/exe").endswith("/ggml-rpc-server")
    # A byte flipped in place, the size and modification time put back: only the change time tells.
    victim = f"{cache}/{names[0]}"
    flip = (
        "import os, sys; p = sys.argv[1]; s = os.stat(p); f = open(p, 'r+b'); f.seek(4096); b = f.read(1); "
        "f.seek(4096); f.write(bytes([b[0] ^ 1])); f.close(); os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))"
    )
    worker.check_output(f'python3 -c "{flip}" {victim}')
    since = worker.check_output("date '+%Y-%m-%d %H:%M:%S'")
    checked = systemctl_tried(worker, "start", f"{SERVICE}-cache-verify.service")
    assert checked.rc == 0, checked.stderr
    journal = worker.check_output(f"journalctl -u {SERVICE}-cache-verify.service --since '{since}' --no-pager -o cat")
    assert f"{victim}: removed, its bytes hash to" in journal
    kept = len(names) - 1
    assert f"{kept} file(s) verified, 1 removed, 0 not removable ({kept} of them unchanged" in journal
