# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A no-op site.yml against Ansible's own floor, in one run on a deployed lab (`make noop-profile` after `make demo`).

Runs, one after the other on the same inventory, each timed by the llamarpc.cluster.timings callback:
  1. site.yml again with the demo's variables (it must change nothing: changed=0 is checked),
  2. the same in check mode (--check, --diff),
  3. playbooks/ansible_floor.yml (ten ping tasks on every host): Ansible's own seconds per task here.
Prints the seconds of each, the seconds per role, and each run priced in floor-tasks (its seconds over the floor's
seconds per task), and writes them as JSON (--out). The target (docs/development.md, "Rerun cost"): a no-op site.yml on
the six-host demo lab in at most 30 s or at most 45 floor-tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLOOR_TASKS = 10  # playbooks/ansible_floor.yml: ten ping tasks


def demo_vars(model, cache_home):
    """site.yml's variables as lab/playbooks/demo.yml gives them (the shards on disk, every host a planned worker)."""
    base = Path(cache_home) / "llamarpc" / ("real-model" if model == "real" else "demo-model")
    pattern = "shards/gemma-3-270m-q4_k_m-*-of-*.gguf" if model == "real" else "*.gguf"
    files = sorted(str(p) for p in base.glob(pattern))
    if not files:
        raise SystemExit(f"noop_profile: no model shards under {base} ({pattern}): run `make demo` first")
    return {"llama_model_files": files, "llama_coordinator_plan_strategy": "all"}


def run(playbook_cmd, name, args, outdir, env, cwd=None):
    """One timed ansible-playbook run; returns the callback's summary with the wall seconds and the exit code."""
    timings = outdir / f"{name}-timings.json"
    started = time.monotonic()
    proc = subprocess.run(
        [*playbook_cmd, *args],
        env={**env, "ANSIBLE_CALLBACKS_ENABLED": "llamarpc.cluster.timings", "LLAMARPC_TIMINGS_OUTPUT": str(timings)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        cwd=cwd,
    )
    wall = time.monotonic() - started
    (outdir / f"{name}.log").write_text(proc.stdout)
    summary = json.loads(timings.read_text()) if timings.exists() else {}
    return {"name": name, "rc": proc.returncode, "wall_seconds": round(wall, 1), "summary": summary}


def floor_per_task(floor):
    """Seconds Ansible spends per task on this inventory: the floor playbook's task seconds over its ten tasks."""
    seconds = floor["summary"].get("task_seconds") or floor["wall_seconds"]
    return seconds / FLOOR_TASKS


def report(runs, per_task):
    """The figures as printed and written: per run its seconds, changed tasks, host tasks, roles and floor-tasks."""
    rows = []
    for item in runs:
        summary = item["summary"]
        host_tasks = next((k["tasks"] for k in summary.get("kinds", []) if k["name"] == "module runs on hosts"), None)
        rows.append(
            {
                "run": item["name"],
                "rc": item["rc"],
                "wall_seconds": item["wall_seconds"],
                "playbook_seconds": summary.get("seconds"),
                "tasks": summary.get("tasks"),
                "tasks_with_module_on_hosts": host_tasks,
                "changed": summary.get("changed"),
                "floor_tasks": round((summary.get("seconds") or item["wall_seconds"]) / per_task, 1),
                "roles": summary.get("roles", []),
            }
        )
    return {"floor_seconds_per_task": round(per_task, 3), "runs": rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inventory", default=str(ROOT / "inventories/lab/hosts.yml"))
    parser.add_argument("--model", choices=("real", "tiny"), default="real")
    parser.add_argument("--mesh", default="none", help="llamarpc_mesh_provider, as make demo MESH=")
    parser.add_argument("--out", default=str(ROOT / "tests/output/noop-profile"))
    parser.add_argument("--ansible-playbook", default=str(Path(sys.executable).parent / "ansible-playbook"))
    parser.add_argument(
        "--root",
        default=str(ROOT),
        help="the checkout whose site.yml runs (another commit's, to compare on the same lab); default this one",
    )
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=outdir, delete=False) as handle:
        json.dump({**demo_vars(args.model, cache_home), "llamarpc_mesh_provider": args.mesh}, handle)
        extra = f"@{handle.name}"
    cmd = [args.ansible_playbook, "-i", str(Path(args.inventory).resolve())]
    site = [str(root / "playbooks/site.yml"), "-e", extra]
    env = {**os.environ, "ANSIBLE_CONFIG": str(root / "ansible.cfg")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(root / ".collections")
    runs = [
        run(cmd, "site-noop", site, outdir, env, root),
        run(cmd, "site-check", [*site, "--check", "--diff"], outdir, env, root),
        run(cmd, "ansible-floor", [str(root / "playbooks/ansible_floor.yml")], outdir, env, root),
    ]
    result = report(runs, floor_per_task(runs[2]))
    (outdir / "noop-profile.json").write_text(json.dumps(result, indent=2) + "\n")

    print(f"Ansible's floor here: {result['floor_seconds_per_task']:.2f} s per task on every host")
    for row in result["runs"]:
        print(
            f"{row['run']:14} rc={row['rc']} {row['playbook_seconds'] or row['wall_seconds']:7.1f} s "
            f"= {row['floor_tasks']:6.1f} floor-tasks; {row['tasks']} tasks, {row['tasks_with_module_on_hosts']} "
            f"ran a module on hosts, changed={row['changed']}"
        )
        if row["run"] != "ansible-floor":
            for role in sorted(row["roles"], key=lambda r: -r["seconds"]):
                print(f"    {role['name']:40} {role['seconds']:6.1f} s  {role['tasks']:3} tasks")
    failed = [row["run"] for row in result["runs"] if row["rc"] != 0]
    noop = result["runs"][0]
    if noop["changed"]:
        failed.append(f"site-noop changed {noop['changed']} task(s): not a no-op")
    if failed:
        print(f"noop_profile: FAILED: {', '.join(failed)} (logs in {outdir})", file=sys.stderr)
        return 1
    print(f"noop_profile: logs and noop-profile.json in {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
