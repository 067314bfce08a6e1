"""The coordinator's planner reads the workers' memory as site.yml's memory play published it (llama_rpc_worker's entry
point memory: llama_rpc_worker_memory, a fact of this run) and reads only the others itself. Rendered by a real
ansible-playbook over Ansible's own hostvars (a host without the fact has no such attribute there, which a plain dict
in a test would not show), on two local hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
VARS = yaml.safe_load((REPO / "roles/llama_coordinator/vars/main.yml").read_text())
PLANNER = yaml.safe_load((REPO / "roles/llama_coordinator/tasks/planner.yml").read_text())
MEMORY_TASK = next(task for task in PLANNER if "llamarpc.cluster.node_memory_facts" in task)


def test_the_planner_reads_only_the_workers_that_did_not_publish_their_memory(tmp_path):
    published = {"available": 5 * 2**30, "limit": None}
    play = [
        {
            "hosts": "w1",
            "gather_facts": False,
            "tasks": [{"ansible.builtin.set_fact": {"llama_rpc_worker_memory": published}}],
        },
        {
            "hosts": "w1",
            "gather_facts": False,
            "vars": {
                "_llama_coordinator_workers": ["w1", "w2"],
                "_llama_coordinator_published_memory": VARS["_llama_coordinator_published_memory"],
                "_llama_coordinator_worker_memory": VARS["_llama_coordinator_worker_memory"],
                # What the planner's loop registers when it reads w2 itself.
                "_llama_coordinator_memory": {
                    "results": [{"item": "w2", "ansible_facts": {"llamarpc_memory": {"available": 1}}}]
                },
            },
            "tasks": [
                {
                    "ansible.builtin.copy": {
                        "content": "{{ {'loop': " + MEMORY_TASK["loop"][3:-3] + ", "
                        "'memory': _llama_coordinator_worker_memory} | to_json }}",
                        "dest": str(tmp_path / "out.json"),
                        "mode": "0644",
                    }
                }
            ],
        },
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {name: {"ansible_connection": "local"} for name in ("w1", "w2")}}})
    )
    env = {**os.environ, "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["loop"] == ["w2"]  # w1 published its memory: not read again
    assert out["memory"] == {"w1": published, "w2": {"available": 1}}
