"""The timings callback: the figures from events on a fake clock, then a real ansible-playbook run with it enabled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llamarpc.cluster.plugins.callback.timings import Timings, format_summary

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_BIN = Path(sys.executable).parent


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_figures_from_events():
    clock = Clock()
    t = Timings(clock=clock)
    t.play("first")
    t.task("u1", "slow", "roleA", "ansible.builtin.command")
    t.host_start("u1", "a")
    t.host_start("u1", "b")
    clock.now += 2
    t.host_done("u1", "a", "ok")
    clock.now += 3
    t.host_done("u1", "b", "changed")
    t.task("u2", "skipped everywhere", "roleA", "ansible.builtin.debug")
    clock.now += 0.5
    t.host_done("u2", "a", "skipped")
    t.host_done("u2", "b", "skipped")
    t.play("second")
    t.task("u3", "loop", "", "ansible.builtin.command")
    t.host_start("u3", "a")
    clock.now += 2
    t.host_done("u3", "a", "ok")
    clock.now += 1
    t.finish()
    s = t.summary(top=2)

    assert s["seconds"] == 8.5 and s["tasks"] == 3 and s["changed"] == 1
    assert [(p["name"], p["seconds"]) for p in s["plays"]] == [("first", 5.5), ("second", 3.0)]
    assert [(r["name"], r["seconds"]) for r in s["roles"]] == [("roleA", 5.5), ("(play tasks)", 2.0)]
    assert [(k["name"], k["tasks"], k["host_tasks"], k["seconds"]) for k in s["kinds"]] == [
        ("skipped everywhere", 1, 0, 0.5),
        ("controller only", 0, 0, 0.0),
        ("module runs on hosts", 2, 3, 7.0),
    ]
    assert [(a["name"], a["tasks"], a["seconds"]) for a in s["actions"]] == [
        ("ansible.builtin.command", 2, 7.0),
        ("ansible.builtin.debug", 1, 0.5),
    ]
    # b ran u1 for 5 s; a ran u1 for 2 s and u3 for 2 s; nobody ran u2.
    assert s["host_seconds"] == {"b": 5.0, "a": 4.0}
    assert [x["name"] for x in s["slowest"]] == ["slow", "loop"]
    assert s["slowest"][0]["ran"] == 2 and s["slowest"][0]["changed"] == 1
    text = "\n".join(format_summary(s))
    assert "8.5 s in all; 3 tasks" in text and "0.5 s  skipped everywhere (1 tasks, 0 host runs)" in text
    assert "roleA : slow (ran on 2/2)" in text


def test_a_result_of_an_earlier_task_still_counts():
    clock = Clock()
    t = Timings(clock=clock)
    t.play("p")
    t.task("u1", "async", "", "x")
    t.task("u2", "next", "", "x")
    clock.now += 4
    t.host_done("u1", "a", "failed")
    assert t.summary()["slowest"][0]["name"] == "async"


PLAYBOOK = """
- name: Timed
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Sleep a little
      ansible.builtin.command: sleep 1.2
      changed_when: false
    - name: Never runs
      ansible.builtin.command: "false"
      when: false
"""


@pytest.mark.skipif(not (ANSIBLE_BIN / "ansible-playbook").exists(), reason="ansible-playbook is not installed")
def test_enabled_in_a_real_run(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    output = tmp_path / "timings.json"
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
        ANSIBLE_CALLBACKS_ENABLED="llamarpc.cluster.timings",
        LLAMARPC_TIMINGS_OUTPUT=str(output),
    )
    proc = subprocess.run(
        [str(ANSIBLE_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
        cwd=tmp_path,
        env={**env, "ANSIBLE_PYTHON_INTERPRETER": sys.executable},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TIMINGS (llamarpc.cluster.timings)" in proc.stdout
    data = json.loads(output.read_text())
    slowest = data["slowest"][0]
    assert slowest["name"] == "Sleep a little" and 1.2 <= slowest["seconds"] < 60
    assert next(k for k in data["kinds"] if k["name"] == "skipped everywhere")["tasks"] == 1
    assert data["plays"][0]["name"] == "Timed" and data["plays"][0]["seconds"] >= 1.2
    assert data["host_seconds"]["localhost"] >= 1.2
