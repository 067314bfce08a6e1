# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/tools/noop_profile.py: the demo's variables, the floor per task and each run priced in floor-tasks."""

from pathlib import Path

import noop_profile
import pytest


def summary(seconds, changed=0, host_tasks=7):
    return {
        "seconds": seconds,
        "task_seconds": seconds,
        "tasks": 9,
        "changed": changed,
        "kinds": [{"name": "module runs on hosts", "tasks": host_tasks, "host_tasks": 40, "seconds": seconds}],
        "roles": [{"name": "llama_coordinator", "tasks": 3, "host_tasks": 3, "seconds": 1.5}],
    }


def test_demo_vars_are_the_shards_on_disk_in_order(tmp_path):
    shards = tmp_path / "llamarpc" / "real-model" / "shards"
    shards.mkdir(parents=True)
    for index in (2, 1):
        (shards / f"gemma-3-270m-q4_k_m-0000{index}-of-00002.gguf").write_bytes(b"")
    (shards / "other.gguf").write_bytes(b"")
    got = noop_profile.demo_vars("real", tmp_path)
    assert [Path(f).name for f in got["llama_model_files"]] == [
        "gemma-3-270m-q4_k_m-00001-of-00002.gguf",
        "gemma-3-270m-q4_k_m-00002-of-00002.gguf",
    ]
    assert got["llama_coordinator_plan_strategy"] == "all"


def test_no_shards_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="run `make demo` first"):
        noop_profile.demo_vars("tiny", tmp_path)


def test_each_run_is_priced_in_floor_tasks():
    runs = [
        {"name": "site-noop", "rc": 0, "wall_seconds": 33.0, "summary": summary(30.0)},
        {"name": "ansible-floor", "rc": 0, "wall_seconds": 7.0, "summary": summary(6.0)},
    ]
    per_task = noop_profile.floor_per_task(runs[1])
    assert per_task == pytest.approx(0.6)
    got = noop_profile.report(runs, per_task)
    assert got["floor_seconds_per_task"] == 0.6
    assert got["runs"][0]["floor_tasks"] == 50.0
    assert got["runs"][0]["tasks_with_module_on_hosts"] == 7
    assert got["runs"][0]["roles"][0]["name"] == "llama_coordinator"
