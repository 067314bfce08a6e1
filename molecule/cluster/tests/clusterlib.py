"""What the cluster scenario's tests share: the API client, the deployed plan, waiting for the cluster to serve."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import yaml
from labtest import INVENTORY, REPO, address, adhoc, lab, run_ansible

API_KEY = "molecule-cluster-key"  # lab.yml: lab_inventory_vars
PORT = 8080
SCENARIO = REPO / "molecule" / "cluster"
MANIFEST = REPO / ".cache" / "demo-model" / "llamarpc-tiny-seed0.manifest.json"


def api(path, body=None, key=API_KEY, timeout=60):
    """(status, parsed JSON or text) of a request to the coordinator's API (a lab host: allowed)."""
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
    """ansible-playbook of the collection's ``playbooks/<name>`` against ``inventory`` (a completed process).

    demo.yml by default: it is the scenario's converge, site.yml with the demo's model files and plan strategy, so a
    re-run (``--tags`` included) asks for the deployed cluster and nothing else."""
    return run_ansible("ansible-playbook", REPO / "playbooks" / name, *args, inventory=inventory, timeout=timeout)


def plan_only(inventory, *args):
    """Only the coordinator's ``plan`` tag (llama.cpp version, memory, probes, planner) against ``inventory``. The
    model step is skipped under that tag, so the deployed model is named (else there is nothing to plan)."""
    return playbook(
        inventory, "--tags", "plan", "-e", f"llama_coordinator_model_path={deployed_plan()['model_path']}", *args
    )


def main_pid(host, unit):
    return host.run_expect([0], f"systemctl show -p MainPID --value {unit}").stdout.strip()


def changed_nothing(result):
    """True when the run ended in a PLAY RECAP and every line of it says changed=0 (a run that fails on purpose,
    refused by a preflight, counts too: what matters is that nothing changed; a run with no recap proves nothing)."""
    lines = result.stdout.splitlines()
    if "PLAY RECAP" not in "\n".join(lines):
        return False
    recap = [line for line in lines if "changed=" in line and "ok=" in line]
    return bool(recap) and all("changed=0" in line for line in recap)


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
