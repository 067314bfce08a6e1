"""llama_coordinator_status on this host: the deployed plan, /health (nothing answers here), a scripted supervisor,
mounts listed in a bounded child, the workers' memory; and what it says when a part is missing."""

from __future__ import annotations

import json
import sys

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_status as status
from ansible_collections.llamarpc.cluster.plugins.modules import llama_coordinator_status

GIB = 1 << 30


@pytest.fixture
def coordinator(tmp_path, closed_port):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"url": f"http://127.0.0.1:{closed_port}", "plan": {"table": ["t"]}}))
    supervisor = tmp_path / "supervisor.py"
    supervisor.write_text("import json\nprint(json.dumps({'verdict': 'ok', 'workers': {'n1': 'ready'}}))\n")
    return {"plan_file": str(plan), "supervisor": str(supervisor), "python": sys.executable, "workers": ["n1", "n2"]}


def test_the_module_reads_the_status_on_the_host(run_module, coordinator, tmp_path, monkeypatch):
    monkeypatch.setattr(status, "sshfs_mounts", lambda _text, _root: [str(tmp_path), str(tmp_path / "gone")])
    out = run_module(llama_coordinator_status, {**coordinator, "memory": {"n1": {"available": GIB}}}, check_mode=True)
    assert not out.failed, out.result
    doc = out.result["ansible_facts"]["llama_coordinator_status"]
    assert out.result["changed"] is False
    assert doc["health"].startswith("no answer: ")
    assert doc["supervisor"] == {"verdict": "ok", "workers": {"n1": "ready"}} and doc["workers"] == {"n1": "ready"}
    assert doc["mounts"] == [f"{tmp_path}: ok", f"{tmp_path / 'gone'}: ERROR"]
    assert doc["memory_available"] == ["n1: 1.00 GB", "n2: no answer"]
    assert doc["plan"] == ["t"]


def test_the_module_says_what_is_missing(run_module, coordinator, tmp_path):
    missing = run_module(llama_coordinator_status, {**coordinator, "plan_file": str(tmp_path / "none.json")})
    assert (
        missing.failed
        and "no deployed plan in" in missing.result["msg"]
        and "run site.yml first" in missing.result["msg"]
    )
    (tmp_path / "supervisor.py").write_text("import sys\nsys.exit('state file unreadable')\n")
    broken = run_module(llama_coordinator_status, coordinator)
    assert broken.failed and "the supervisor's status failed (exit 1): state file unreadable" in broken.result["msg"]
