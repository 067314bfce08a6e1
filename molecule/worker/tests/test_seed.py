"""Seeding through the roles, on the scenario's real workers with a real model (Gemma 3 270M Q4_K_M, one file).

The llama_coordinator role plans every worker (strategy all, fit first off) and, before llama-server loads, fills each
planned worker's tensor cache from the model file on that worker's own disk (seed.yml). Gemma's one tensor over
10 MiB, its 178 MB token embedding, goes a second time to the output layer's worker (a tied output): seeded, that load
sends its hash instead of its bytes, so the worker writes no cache file of its own ("saved to" in its journal).

The check of the check: the same plan loaded cold with seeding off makes that worker receive the bytes and write the
file itself, under the same name. So this test fails when seeding is removed from the role, or names files wrongly.
"""

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtest import REPO, address, lab, recap, run_ansible, systemctl_tried

from ansible_collections.llamarpc.cluster.plugins.module_utils import _paths

MODEL_DIR = "/data/models/seedtest"
CACHE = "/var/cache/llamarpc/rpc-worker"
HASHER = "/usr/local/lib/llamarpc/llamarpc-fnv1a"
SERVER = "llamarpc-server"
WORKER = "llamarpc-rpc-worker"

PLAY = """
- name: The model on every host, as shard placement leaves a shard on a worker's disk
  hosts: all
  gather_facts: false
  tasks:
    - name: Model directory
      ansible.builtin.file:
        path: {model_dir}
        state: directory
        mode: "0755"
    - name: The model file
      ansible.builtin.copy:
        src: {model}
        dest: {model_dir}/
        mode: "0644"

- name: The workers' published facts, as site.yml's workers' play leaves them
  hosts: rpc_workers
  gather_facts: false
  tasks:
    - name: Tensor cache and seeding facts
      ansible.builtin.include_role:
        name: llamarpc.cluster.llama_rpc_worker
        tasks_from: tensor_cache

- name: The coordinator, every worker planned
  hosts: coordinator
  gather_facts: false
  roles:
    - role: llamarpc.cluster.llama_coordinator
      vars:
        llama_coordinator_model_path: {model_dir}/{name}
        llama_coordinator_plan_strategy: all
        llama_coordinator_fit_first: false
        llama_coordinator_supervisor: false
        llama_coordinator_seed_caches: {seed}
"""


def hosts():
    return ["node1", "node2", "node3"]


def cold_caches():
    """No cache file, no keep-list, llama-server stopped: the next run loads on an empty cache."""
    lab("node1").run(f"systemctl stop {SERVER}.service")
    for name in hosts():
        lab(name).run_expect([0], f"find {CACHE}/rpc -type f -delete; rm -f {CACHE}/seeded-tensors")


def deploy(tmp_path, model, seed):
    playbook = tmp_path / f"seed-{seed}.yml"
    playbook.write_text(
        PLAY.format(model_dir=MODEL_DIR, model=model, name=Path(model).name, seed=str(seed).lower()), encoding="utf-8"
    )
    since = int(time.time())
    done = run_ansible("ansible-playbook", playbook, timeout=1200)
    assert done.returncode == 0 and recap(done.stdout), done.stdout[-4000:]
    plan = json.loads(lab("node1").check_output("cat /etc/llamarpc/coordinator/plan.json"))
    by_address = {address(name): name for name in hosts()}
    rpc = plan["plan"]["rpc"]
    rpc = rpc.split(",") if isinstance(rpc, str) else rpc
    output_worker = by_address[rpc[-1].rsplit(":", 1)[0]]
    journal = lab(output_worker).check_output(f"journalctl -u {WORKER} --since @{since} -o cat --no-pager")
    cache = lab(output_worker).check_output(f"ls {CACHE}/rpc").split()
    keep = lab(output_worker).run(f"cat {CACHE}/seeded-tensors").stdout
    return {"worker": output_worker, "journal": journal, "cache": cache, "keep": keep, "output": done.stdout}


@pytest.fixture(scope="module")
def loads(tmp_path_factory):
    fetched = subprocess.run(
        [
            sys.executable,
            str(REPO / "lab/tools/real_model.py"),
            "fetch",
            "--out",
            _paths.user_path("real-model"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    model = json.loads(fetched.stdout)["path"]
    tmp = tmp_path_factory.mktemp("seed")
    try:
        cold_caches()
        cold = deploy(tmp, model, seed=False)
        cold_caches()
        seeded = deploy(tmp, model, seed=True)
        yield {"cold": cold, "seeded": seeded}
    finally:
        lab("node1").run(f"systemctl stop {SERVER}.service {SERVER}-supervisor.timer")
        for name in hosts():
            lab(name).run(f"rm -rf {MODEL_DIR}; find {CACHE}/rpc -type f -delete; rm -f {CACHE}/seeded-tensors")


def test_cold_load_sends_the_embedding_and_the_worker_caches_it_itself(loads):
    cold = loads["cold"]
    assert "saved to" in cold["journal"], cold["journal"][-2000:]
    assert len(cold["cache"]) == 1, cold["cache"]
    # Seeding off: nothing listed for the pruner to keep.
    assert cold["keep"] == ""


def test_seeded_load_sends_only_the_hash(loads):
    seeded, cold = loads["seeded"], loads["cold"]
    assert seeded["worker"] == cold["worker"]
    # The worker answered the hash from the seeded file and received no bytes to save.
    assert "saved to" not in seeded["journal"], seeded["journal"][-2000:]
    # The seeder named the file as llama.cpp names it.
    assert seeded["cache"] == cold["cache"]
    # The keep-list names it, with where its bytes came from; its bytes hash to its name.
    rows = [line.split() for line in seeded["keep"].splitlines() if line.strip()]
    assert [row[0] for row in rows] == seeded["cache"], seeded["keep"]
    assert rows[0][1] == "token_embd.weight", rows
    digest = lab(seeded["worker"]).check_output(f"{HASHER} {CACHE}/rpc/{seeded['cache'][0]}").split()[0]
    assert digest == seeded["cache"][0]


PRUNE = f"{WORKER}-cache-prune"


def test_the_prune_timer_keeps_the_cap_and_the_plans_seeded_tensors(loads):
    """The cap "by a timer": the timer's own service run over a cache above the cap. Files newer than the plan's seeded
    tensors fill it to 1.5 times the cap (sparse: their size counts, no disk is used), so least recently used alone
    would remove the seeded ones first; the pruner removes the others until the cap holds and keeps the plan's."""
    seeded = loads["seeded"]
    worker = lab(seeded["worker"])
    kept = sorted(row.split()[0] for row in seeded["keep"].splitlines() if row.strip())
    assert kept, seeded["keep"]
    assert worker.check_output(f"systemctl show -p Triggers --value {PRUNE}.timer") == f"{PRUNE}.service"
    assert worker.check_output(f"systemctl is-active {PRUNE}.timer") == "active"
    argv = shlex.split(worker.check_output(f"systemctl show -p ExecStart --value {PRUNE}.service").split(";")[1])
    cap = int(argv[argv.index(f"{CACHE}/rpc") + 1])

    def cache():
        listing = worker.check_output(f"find {CACHE}/rpc -maxdepth 1 -type f -printf '%f %s\\n'")
        return {name: int(size) for name, size in (line.split() for line in listing.splitlines())}

    owner = worker.check_output(f"stat -c %U:%G {CACHE}/rpc")
    fill = [f"fill{index:02d}" for index in range(3)]
    worker.run_expect(
        [0],
        f"cd {CACHE}/rpc && touch -d '1 hour ago' {' '.join(kept)} && "
        + " && ".join(f"truncate -s {cap // 2} {name} && chown {owner} {name}" for name in fill),
    )
    try:
        before = cache()
        assert sum(before.values()) > cap and set(kept) <= set(before), before
        started = systemctl_tried(worker, "start", f"{PRUNE}.service")
        assert started.rc == 0, started.stderr
        after = cache()
        result = worker.check_output(f"systemctl show -p Result --value {PRUNE}.service")
    finally:
        worker.run(f"cd {CACHE}/rpc && rm -f {' '.join(fill)}")
    assert result == "success"
    assert sum(after.values()) <= cap, after
    assert set(kept) <= set(after), (kept, after)
    assert set(fill) - set(after), after  # the pruner had to remove something: the cache was over its cap
