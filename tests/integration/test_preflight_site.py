"""site.yml refuses bad variables in its first play, the preflight, before any other play starts.

ansible-playbook runs the real site.yml against a throwaway inventory of two hosts with ``ansible_connection: local``;
the preflight play never connects to them (its checks run on the controller), and a bad case must stop the run there:
no later play (the mesh first) may start. The good case runs only the preflight play's tasks (tag site_preflight;
``--skip-tags always`` keeps the later plays from even gathering facts).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
SHA = "0" * 64


def inventory(tmp_path, extra=None, webui=False):
    """Two local hosts: node1 coordinates and serves, node2 serves; one model source (files) unless ``extra`` says."""
    data = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "llama_model_files": [str(tmp_path / "model-00001-of-00002.gguf")],
                **(extra or {}),
            },
            "hosts": {"node1": {"ansible_host": "127.0.0.11"}, "node2": {"ansible_host": "127.0.0.12"}},
            "children": {
                "coordinator": {"hosts": {"node1": None}},
                "rpc_workers": {"hosts": {"node1": None, "node2": None}},
                **({"webui": {"hosts": {"node1": None}}} if webui else {}),
            },
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def site(hosts, *args):
    return subprocess.run(
        [str(PLAYBOOK), "-i", str(hosts), "playbooks/site.yml", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            **os.environ,
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
        },
    )


def tasks_after(output, marker):
    """The TASK lines printed after the line starting with ``marker``."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(marker)), len(lines))
    return [line for line in lines[start:] if line.startswith("TASK [")]


@pytest.mark.parametrize(
    ("extra", "webui", "message"),
    [
        (
            {"llamarpc_mesh_provder": "tailscale"},
            False,
            "unknown variable `llamarpc_mesh_provder`: did you mean `llamarpc_mesh_provider`?",
        ),
        (
            {"llama_model_urls": [{"url": "https://example.org/model-00001-of-00002.gguf", "sha256": SHA}]},
            False,
            "llama_model_urls and llama_model_files are both set: set exactly one model source",
        ),
        (
            {"llama_coordinator_port": 8080, "open_webui_port": 8080},
            True,
            "node1: port 8080 is used by llama-server (llama_coordinator_port) and Open WebUI (open_webui_port)",
        ),
        (
            {"llama_model_files": [], "llama_model_hf_repo": "Qwen/Qwen2.5-32B-Instruct-GGUF"},
            False,
            "llama_model_hf_repo 'Qwen/Qwen2.5-32B-Instruct-GGUF' needs llama_model_hf_pattern",
        ),
    ],
    ids=["typo", "two-model-sources", "port-clash", "hf-repo-without-pattern"],
)
def test_bad_variables_stop_site_in_the_preflight_play(tmp_path, extra, webui, message):
    result = site(inventory(tmp_path, extra, webui))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert message in output, output
    assert "PLAY [Preflight" in output
    assert "PLAY [Mesh" not in output, output
    first_fatal = output.index("fatal: [")
    assert output.rindex("TASK [", 0, first_fatal) == output.index(
        "TASK [Check every role's arguments, the model source, the mesh, the ports and the variable names]"
    )
    for line in result.stdout.splitlines():
        if "changed=" in line and "ok=" in line:
            assert "changed=0" in line, line


def test_every_problem_of_a_host_is_reported_at_once(tmp_path):
    extra = {
        "llamarpc_mesh_provder": "tailscale",
        "llama_model_hf_repo": "Qwen/Qwen2.5-32B-Instruct-GGUF",
        "llama_rpc_worker_port": "many",
    }
    result = site(inventory(tmp_path, extra))
    assert result.returncode != 0
    assert "node1: the preflight found 4 problems; nothing has changed anywhere:" in result.stdout, result.stdout
    assert "llama_rpc_worker: argument 'llama_rpc_worker_port' is of type str" in result.stdout
    assert "PLAY [Mesh" not in result.stdout


def test_good_variables_pass_the_preflight_play(tmp_path):
    """Open WebUI on the coordinator's host (node1) with every port at its default: no clash."""
    result = site(inventory(tmp_path, webui=True), "--tags", "site_preflight", "--skip-tags", "always")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "TASK [Check every role's arguments, the model source, the mesh, the ports and the variable names]" in output
    assert "llama_coordinator : The inventory names exactly one coordinator, and this is it" in output
    assert tasks_after(output, "PLAY [Mesh") == [], output
    recap = [line for line in result.stdout.splitlines() if "changed=" in line and "ok=" in line]
    assert len(recap) == 2
    assert all("failed=0" in line and "changed=0" in line for line in recap), recap
