"""What the cluster scenario's tests share: the API client, the deployed plan, waiting for the cluster to serve."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from labtest import EVENTUALLY, INVENTORY, REPO, address, adhoc, inventory_hosts, lab, recap, run_ansible, wait_for

from ansible_collections.llamarpc.cluster.plugins.module_utils import _paths
from ansible_collections.llamarpc.lab.plugins.module_utils import _lab

API_KEY = "molecule-cluster-key"  # lab.yml: lab_inventory_vars
PORT = 8080
SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", REPO / "molecule" / "cluster"))
# demo.yml's tiny model, in the controller user's cache (the user_path lookup's default for it).
MANIFEST = Path(_paths.user_path("demo-model", "llamarpc-tiny-seed0.manifest.json"))


def api(path, body=None, key=API_KEY, timeout=600):
    """(status, parsed JSON or text) of a request to the coordinator's API (a lab host: allowed); status None and the
    error's text when no answer came. The default timeout only guards against a hang: six hosts sharing two cores with
    other labs generated 32 tokens in more than 60 s (ci15, load 20), and a slow answer is still an answer."""
    url = f"http://{address('node1')}:{PORT}{path}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http to a lab host
            payload = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as exc:
        payload, status = exc.read().decode(), exc.code
    except (urllib.error.URLError, OSError) as exc:
        return None, str(exc)
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload


#: The RPC workers' port, unit and nftables table (the llama_rpc_worker role's defaults).
RPC_PORT = 50052
WORKER_UNIT = "llamarpc-rpc-worker"
FIREWALL_TABLE = "inet llamarpc_rpc_worker"


def rpc_connect(source, target):
    """'connected', 'refused' or what bash said otherwise, for a TCP connect from lab host ``source`` to the RPC port of
    lab host ``target`` (bash's /dev/tcp: no client program needed on the host)."""
    done = lab(source).run(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address(target)}/{RPC_PORT}'")
    if done.rc == 0:
        return "connected"
    said = done.stderr.strip()
    return "refused" if "refused" in said.lower() else said or f"rc {done.rc}"


def worker_firewall(name):
    """The RPC worker's firewall on host ``name``, this boot: its nftables table is loaded, and its rules were in place
    before the worker started (the firewall unit's nft exited before the worker's process started, as the worker
    unit's After= orders it)."""
    host = lab(name)

    def show(unit, prop):
        return host.check_output(f"systemctl show -p {prop} --value {unit}")

    rules_at = int(show(f"{WORKER_UNIT}-firewall.service", "ExecMainExitTimestampMonotonic") or 0)
    worker_at = int(show(f"{WORKER_UNIT}.service", "ExecMainStartTimestampMonotonic") or 0)
    ordered = f"{WORKER_UNIT}-firewall.service" in show(f"{WORKER_UNIT}.service", "After").split()
    return {
        "loaded": host.run(f"nft list table {FIREWALL_TABLE}").rc == 0,
        "first": ordered and 0 < rules_at <= worker_at,
    }


def greedy(prompt, tokens=24):
    return {"prompt": prompt, "n_predict": tokens, "temperature": 0, "cache_prompt": False, "seed": 1}


def serving(timeout=2):
    """True when a completion comes back now."""
    status, body = api("/completion", greedy("ping", 2), timeout=timeout + 20)
    return status == 200 and isinstance(body, dict) and body.get("tokens_predicted", 0) > 0


def deployed_plan():
    return json.loads(lab("node1").file("/etc/llamarpc/coordinator/plan.json").content_string)


def wait_serving(timeout):
    """Seconds until the cluster serves a completion again (or None after ``timeout``)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if serving():
            return time.monotonic() - start
        time.sleep(1)
    return None


def inventory_copy(tmp_path, edit):
    """A copy of the lab inventory (it holds the scenario's settings too), changed by ``edit``."""
    with open(INVENTORY, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    edit(data["all"])
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def playbook(inventory, *args, name="demo.yml", timeout=1800):
    """ansible-playbook of the collection's ``playbooks/<name>``, or the lab's ``lab/playbooks/<name>``, against
    ``inventory`` (a completed process).

    The lab's demo.yml by default: it is the scenario's converge, site.yml with the demo's model files and plan
    strategy, so a re-run (``--tags`` included) asks for the deployed cluster and nothing else."""
    path = REPO / "playbooks" / name
    if not path.is_file():
        path = REPO / "lab" / "playbooks" / name
    return run_ansible("ansible-playbook", path, *args, inventory=inventory, timeout=timeout)


def plan_only(inventory, *args):
    """Only the coordinator's ``plan`` tag (llama.cpp version, memory, probes, planner) against ``inventory``. The
    model step is skipped under that tag, so the deployed model is named (else there is nothing to plan)."""
    return playbook(
        inventory, "--tags", "plan", "-e", f"llama_coordinator_model_path={deployed_plan()['model_path']}", *args
    )


def main_pid(host, unit):
    return host.run_expect([0], f"systemctl show -p MainPID --value {unit}").stdout.strip()


def restarts(host, unit):
    """How often systemd restarted ``unit`` by itself (its NRestarts)."""
    return int(host.run(f"systemctl show -p NRestarts --value {unit}").stdout.strip() or 0)


SUPERVISOR_STATE = "/run/llamarpc/coordinator/supervisor.json"
#: The supervisor's (and status.yml's) states of a worker that is up.
UP = ("serving", "ready", "busy")


def supervisor():
    """The supervisor's last record on the coordinator ({} before its first check)."""
    text = lab("node1").run("cat " + SUPERVISOR_STATE).stdout
    return json.loads(text) if text.strip() else {}


def came_back(name, unit, killed_pid, checked_before, timeout=EVENTUALLY):
    """After ``killed_pid`` of ``unit`` on host ``name`` was killed: (its new MainPID, the supervisor's first record
    since ``checked_before`` (its checked_at before the kill) that finds the worker up), each None if it never came.
    Back means systemd started the unit again (a new, non-zero MainPID of an active unit) and the supervisor's own
    probe found the new worker: serving again alone would not tell a worker that came back from one never killed."""
    host = lab(name)
    pid = wait_for(
        lambda: (now := main_pid(host, unit)) not in ("0", killed_pid) and host.service(unit).is_running and now,
        timeout,
        2,
    )
    record = wait_for(
        lambda: (
            (state := supervisor()).get("checked_at", 0) > checked_before
            and state.get("workers", {}).get(name) in UP
            and state
        ),
        timeout,
        2,
    )
    return pid or None, record or None


def changed_nothing(result):
    """True when the run ended in a PLAY RECAP and every host in it says changed=0 (a run that fails on purpose,
    refused by a preflight, counts too: what matters is that nothing changed; a run with no recap proves nothing)."""
    counts = recap(result.stdout)
    return bool(counts) and all(host["changed"] == 0 for host in counts.values())


def inventory_vars():
    """The lab inventory's ``all: vars:`` (the scenario's settings from lab.yml included)."""
    with open(INVENTORY, encoding="utf-8") as handle:
        return yaml.safe_load(handle)["all"]["vars"]


def model_dir():
    """The model directory on every host: the seed's, in pool's home (lab.yml)."""
    return inventory_vars()["llama_model_dir"]


def held_shards(hosts):
    """Host -> {name: sha256} of the regular ``*.gguf`` files in its model directory (symlinks left out: on the
    coordinator they lead into the mounts). One command per host; a host that cannot be read holds nothing."""
    command = (
        f"cd {model_dir()} && find . -maxdepth 1 -type f -name '*.gguf' -print0 | xargs -0 -r timeout 120 sha256sum"
    )
    held = {}
    for name in hosts:
        out = lab(name).run(command).stdout
        held[name] = {line.split()[1].removeprefix("./"): line.split()[0] for line in out.splitlines() if line.strip()}
    return held


def shards_intact(hosts):
    """(True when every shard of the model is whole, a one-line account). Whole: each shard is held as a regular
    file with its manifest sha256 by at least one host, no host holds a copy with another sha256, and it reads back
    with that sha256 through the coordinator's model directory (its file, or its link into a mount)."""
    expected = {shard["name"]: shard["sha256"] for shard in json.loads(MANIFEST.read_text())["files"]}
    held = held_shards(hosts)
    names = " ".join(f"{model_dir()}/{name}" for name in sorted(expected))
    out = lab("node1").run(f"timeout 120 sha256sum {names}").stdout
    through = {line.split()[1].rsplit("/", 1)[1]: line.split()[0] for line in out.splitlines() if line.strip()}
    problems = []
    for name, want in sorted(expected.items()):
        holders = sorted(host for host, files in held.items() if files.get(name) == want)
        wrong = sorted(host for host, files in held.items() if name in files and files[name] != want)
        if not holders:
            problems.append(f"{name} held by no host")
        if wrong:
            problems.append(f"{name} CHANGED on {', '.join(wrong)}")
        if through.get(name) != want:
            problems.append(f"{name} {'unreadable' if name not in through else 'WRONG'} through node1's model dir")
    if problems:
        return False, "; ".join(problems)
    return True, f"{len(expected)}/{len(expected)} shards whole (sha256 on their hosts and through node1)"


def shard_digests():
    """Shard name -> (sha256 read back through the coordinator's model directory, sha256 in the manifest)."""
    manifest = json.loads(MANIFEST.read_text())
    node1 = lab("node1")
    model_dir = deployed_plan()["model_path"].rsplit("/", 1)[0]
    return {
        shard["name"]: (
            node1.run_expect([0], f"timeout 60 sha256sum {model_dir}/{shard['name']}").stdout.split()[0],
            shard["sha256"],
        )
        for shard in manifest["files"]
    }


def module(host, name, args, timeout=300):
    """(rc, result dict) of one collection module run ad hoc on a lab host (``ansible -o``)."""
    done, result = adhoc(host, name, args, timeout=timeout)
    return done.returncode, result if result is not None else {"msg": done.stdout + done.stderr}


def status_report(tmp_path):
    """playbooks/status.yml's record (llamarpc_status), written as JSON on the controller and read back."""
    path = tmp_path / "status.json"
    result = run_ansible("ansible-playbook", REPO / "playbooks" / "status.yml", "-e", f"llamarpc_status_json={path}")
    assert result.returncode == 0, result.stdout[-3000:]
    return json.loads(path.read_text(encoding="utf-8"))


def status_problems(report, expect_down=()):
    """What in a status record says the cluster is not well, apart from the workers in ``expect_down``."""
    problems = []
    if not report["health"].startswith("200 "):
        problems.append(f"health {report['health']}")
    workers = report["workers"]
    if sorted(workers) != sorted(inventory_hosts()):
        problems.append(f"workers listed: {sorted(workers)}")
    problems += [f"{name}: {state}" for name, state in workers.items() if (state in UP) == (name in expect_down)]
    memory = dict(item.split(": ", 1) for item in report["memory_available"])
    if sorted(memory) != sorted(inventory_hosts()) or any(not value[0].isdigit() for value in memory.values()):
        problems.append(f"memory_available: {report['memory_available']}")
    problems += [mount for mount in report["mounts"] if not mount.endswith(": ok")]
    if not report["plan"]:
        problems.append("no plan table")
    return problems


def lab_name():
    return yaml.safe_load((SCENARIO / "lab.yml").read_text())["lab_name"]


def nspawn_pid_file(name):
    """The lab role's pid file of the host's systemd-nspawn, in the host's state directory."""
    return Path(f"/var/lib/llamarpc-lab/{lab_name()}/hosts/{name}/nspawn.pid")


def host_init(name):
    """PID (in the controller's namespace) of the host's systemd: the child of its systemd-nspawn (the lab role's pid
    file in the host's state directory)."""
    nspawn = nspawn_pid_file(name).read_text().strip()
    init = _lab.container_init(int(nspawn))
    assert init is not None, (name, nspawn)
    return init


def in_host(name, command, timeout=120):
    """Run a shell command inside lab host ``name`` from the controller (nsenter into its namespaces through its
    systemd), for what must not depend on the host's sshd: stopping and starting it. A completed process."""
    return subprocess.run(
        ["nsenter", "-t", str(host_init(name)), "-m", "-u", "-i", "-n", "-p", "/bin/sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ask(timeout=600):
    """One small completion from the controller to the coordinator's public address: (status, Retry-After, the number
    of tokens or the body's start, when it was sent on CLOCK_MONOTONIC), status and Retry-After None when no HTTP
    answer came (what went wrong in their place). A slow answer is still an answer: the timeout only guards against a
    hang (a loaded machine)."""
    sent = time.monotonic()
    connection = http.client.HTTPConnection(address("node1"), PORT, timeout=timeout)
    try:
        connection.request(
            "POST",
            "/completion",
            json.dumps(greedy("The capital of France is", 2)),
            {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
        )
        response = connection.getresponse()
        body = response.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as exc:
        return None, None, f"{type(exc).__name__}: {exc}", sent
    finally:
        connection.close()
    try:
        said = json.loads(body).get("tokens_predicted", body[:200])
    except (ValueError, AttributeError):
        said = body[:200]
    return response.status, response.getheader("Retry-After"), said, sent


def clear(answer):
    """Whether an answer is one a client can act on: 200 with tokens, or 503 that says when to retry."""
    status, retry_after, said, _sent = answer
    return (status == 200 and isinstance(said, int) and said > 0) or (
        status == 503 and retry_after is not None and retry_after.isdigit()
    )


@contextlib.contextmanager
def client(pause=1.0):
    """A client that asks again and again (one request in flight, ``pause`` seconds between two) until the block
    ends: yields the list of its answers, which it keeps filling."""
    answers, stop = [], threading.Event()

    def loop():
        while not stop.is_set():
            answers.append(ask())
            stop.wait(pause)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield answers
    finally:
        stop.set()
        thread.join(timeout=700)


def started_at(host, unit):
    """When ``unit``'s main process started, on CLOCK_MONOTONIC in seconds: the lab's hosts share the controller's
    kernel, so it compares with ``ask``'s times."""
    return int(host.run(f"systemctl show -p ExecMainStartTimestampMonotonic --value {unit}").stdout.strip()) / 1e6


def through_switch(answers, restarted_at=None):
    """The failures of a client's answers through a switch (empty when it all holds): every answer clear, and the
    switch met. Without ``restarted_at``: a completion came back and the gate's 503 was seen (a window that spans
    several of the client's requests). With it (llama-server's new start, ``started_at``): a request sent before it
    and a completion sent after it, whether or not a request fell into the window."""
    counts = {}
    for status, *_rest in answers:
        counts[status] = counts.get(status, 0) + 1
    print(f"\na client through the switch: {len(answers)} answers, by status {counts}")
    problems = [f"answer {n}: {answer}" for n, answer in enumerate(answers) if not clear(answer)]
    if restarted_at is None:
        if not any(answer[0] == 200 for answer in answers):
            problems.append(f"no completion came back: {answers[:5]}")
        if not any(answer[0] == 503 for answer in answers):
            problems.append(f"no 503 with Retry-After: the client never met the switch ({len(answers)} answers)")
        return problems
    if not any(answer[3] < restarted_at for answer in answers):
        problems.append(f"no request before llama-server's restart ({len(answers)} answers)")
    if not any(answer[0] == 200 and answer[3] > restarted_at for answer in answers):
        problems.append(f"no completion asked after llama-server's restart ({len(answers)} answers)")
    return problems
