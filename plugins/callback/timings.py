# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a playbook run spends its time: per play, role and task, per host, and how much of it went on tasks that
every host skipped. Enabled alongside the normal output; optionally writes the figures as JSON."""

from __future__ import annotations

DOCUMENTATION = r"""
name: timings
type: aggregate
short_description: Where a playbook run spends its time (plays, roles, tasks, hosts)
description:
  - Measures the wall time of every task (from its start to the last host's result), sums it per play and per
    role, and the time each host spent running tasks. Tasks that every host skipped are summed apart, since they
    cost only the controller.
  - At the end of the run it prints the plays, the roles and the slowest tasks, and writes the same figures as JSON
    when O(output) is set. The benchmark uses it to say what dominates a no-op C(site.yml) rerun.
  - Enable it with C(ANSIBLE_CALLBACKS_ENABLED=llamarpc.cluster.timings).
author:
  - llamarpc.cluster contributors (@llamarpc)
options:
  output:
    description: Write the figures as JSON to this file (its directory must exist).
    type: path
    env:
      - name: LLAMARPC_TIMINGS_OUTPUT
    ini:
      - section: callback_timings
        key: output
  top:
    description: How many of the slowest tasks to print and write.
    type: int
    default: 15
    env:
      - name: LLAMARPC_TIMINGS_TOP
    ini:
      - section: callback_timings
        key: top
"""

import json
import time

from ansible.plugins.callback import CallbackBase

#: Actions that run on the controller alone (no module run on a host).
CONTROLLER_ACTIONS = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in (
        "set_fact",
        "assert",
        "debug",
        "fail",
        "meta",
        "include_tasks",
        "import_tasks",
        "include_role",
        "import_role",
        "include_vars",
        "add_host",
        "group_by",
        "set_stats",
    )
)


class Timings:
    """The figures, fed with events and a clock (unit-tested without Ansible)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.started = clock()
        self.finished = None
        self.plays = []
        self.tasks = []
        self._current = {"uuid": None}
        self._host_start = {}

    def play(self, name):
        self._close_play()
        self.plays.append({"name": name, "start": self.clock(), "end": None})

    def task(self, uuid, name, role, action):
        now = self.clock()
        self._current = {
            "uuid": uuid,
            "name": name,
            "role": role or "",
            "action": action,
            "play": self.plays[-1]["name"] if self.plays else "",
            "start": now,
            "end": now,
            "hosts": {},
        }
        self.tasks.append(self._current)

    def host_start(self, uuid, host):
        self._host_start[(uuid, host)] = self.clock()

    def host_done(self, uuid, host, status):
        now = self.clock()
        task = self._current if self._current["uuid"] == uuid else self._find(uuid)
        if task is None:
            return
        begun = self._host_start.pop((uuid, host), task["start"])
        entry = task["hosts"].setdefault(host, {"seconds": 0.0, "status": status})
        entry["seconds"] += now - begun
        # A host's worst outcome over the task's loop items: failed > changed > ok > skipped.
        rank = {"skipped": 0, "ok": 1, "changed": 2, "failed": 3, "unreachable": 4}
        if rank.get(status, 1) > rank.get(entry["status"], 1):
            entry["status"] = status
        task["end"] = max(task["end"], now)

    def finish(self):
        self._close_play()
        self.finished = self.clock()

    def _find(self, uuid):
        return next((t for t in reversed(self.tasks) if t["uuid"] == uuid), None)

    def _close_play(self):
        """A play lasts until the next one starts (or the run ends)."""
        if self.plays and self.plays[-1]["end"] is None:
            self.plays[-1]["end"] = self.clock()

    def summary(self, top=15):
        """Plays, roles and tasks with their seconds, biggest first where the order is free; and totals."""
        total = (self.finished if self.finished is not None else self.clock()) - self.started
        tasks = []
        for task in self.tasks:
            statuses = [h["status"] for h in task["hosts"].values()]
            tasks.append(
                {
                    "name": task["name"],
                    "role": task["role"],
                    "play": task["play"],
                    "action": task["action"],
                    "seconds": round(task["end"] - task["start"], 3),
                    "hosts": len(statuses),
                    "ran": sum(1 for s in statuses if s != "skipped"),
                    "changed": sum(1 for s in statuses if s == "changed"),
                }
            )
        hosts = {}
        for task in self.tasks:
            for host, entry in task["hosts"].items():
                if entry["status"] != "skipped":
                    hosts[host] = hosts.get(host, 0.0) + entry["seconds"]
        return {
            "seconds": round(total, 3),
            "tasks": len(tasks),
            "task_seconds": round(sum(t["seconds"] for t in tasks), 3),
            "changed": sum(t["changed"] for t in tasks),
            # In this order, whatever the seconds: the report reads them by name.
            "kinds": totals(tasks, kind_of, order=KINDS),
            "plays": [
                {"name": p["name"], "seconds": round((p["end"] or p["start"]) - p["start"], 3)} for p in self.plays
            ],
            "roles": totals(tasks, lambda t: t["role"] or "(play tasks)"),
            "actions": totals(tasks, lambda t: t["action"]),
            "host_seconds": {k: round(v, 3) for k, v in sorted(hosts.items(), key=lambda kv: -kv[1])},
            "slowest": sorted(tasks, key=lambda t: -t["seconds"])[:top],
        }


#: Kinds of task, by where their time goes.
KINDS = ("skipped everywhere", "controller only", "module runs on hosts")


def kind_of(task):
    """Skipped on every host, run on the controller alone, or module runs on hosts."""
    if task["hosts"] and not task["ran"]:
        return KINDS[0]
    return KINDS[1] if task["action"] in CONTROLLER_ACTIONS else KINDS[2]


def totals(tasks, key, order=None):
    """Tasks grouped by ``key(task)``: ``{name, tasks, host_tasks, seconds}`` each, biggest first (or in ``order``,
    every name of it present)."""
    groups = {name: {"name": name, "tasks": 0, "host_tasks": 0, "seconds": 0.0} for name in order or ()}
    for task in tasks:
        name = key(task)
        group = groups.setdefault(name, {"name": name, "tasks": 0, "host_tasks": 0, "seconds": 0.0})
        group["tasks"] += 1
        group["host_tasks"] += task["ran"]
        group["seconds"] += task["seconds"]
    rows = [{**g, "seconds": round(g["seconds"], 3)} for g in groups.values()]
    return rows if order else sorted(rows, key=lambda g: -g["seconds"])


def format_summary(summary):
    """The summary as lines of text for the end of the run."""
    lines = [
        f"{summary['seconds']:.1f} s in all; {summary['tasks']} tasks ({summary['task_seconds']:.1f} s); "
        f"changed {summary['changed']}",
        "kinds of task:",
    ]
    lines += [
        f"  {k['seconds']:8.1f} s  {k['name']} ({k['tasks']} tasks, {k['host_tasks']} host runs)"
        for k in summary["kinds"]
    ]
    lines.append("plays:")
    lines += [f"  {p['seconds']:8.1f} s  {p['name']}" for p in summary["plays"]]
    lines.append("roles:")
    lines += [f"  {r['seconds']:8.1f} s  {r['name']}" for r in summary["roles"]]
    lines.append("modules:")
    lines += [f"  {a['seconds']:8.1f} s  {a['name']} ({a['tasks']} tasks)" for a in summary["actions"]]
    lines.append("busy seconds per host (tasks it ran):")
    lines += [f"  {s:8.1f} s  {h}" for h, s in summary["host_seconds"].items()]
    lines.append("slowest tasks:")
    lines += [
        f"  {t['seconds']:8.1f} s  {t['role'] + ' : ' if t['role'] else ''}{t['name']} (ran on {t['ran']}/{t['hosts']})"
        for t in summary["slowest"]
    ]
    return lines


def task_key(task):
    """A task's identity from its start to its results, from public methods: where it is written (file:line) and its
    action. A task file imported twice gives two tasks one key; the latest of them (the one running) takes the
    results, as a result of an earlier task is looked up from the newest back."""
    return f"{task.get_path() or ''} {task.action}"


def _task_of(result):
    return getattr(result, "task", None) or result._task  # pylint: disable=protected-access


def _host_of(result):
    return (getattr(result, "host", None) or result._host).get_name()  # pylint: disable=protected-access


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "llamarpc.cluster.timings"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timings = Timings()

    def v2_playbook_on_play_start(self, play):
        self.timings.play(play.get_name().strip())

    def _task_start(self, task):
        role = task._role.get_name() if task._role else ""  # pylint: disable=protected-access
        name = task.get_name().strip()
        if role and name.startswith(f"{role} : "):
            name = name[len(role) + 3 :]
        self.timings.task(task_key(task), name, role, task.action)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._task_start(task)

    def v2_runner_on_start(self, host, task):
        self.timings.host_start(task_key(task), host.get_name())

    def _done(self, result, status):
        self.timings.host_done(task_key(_task_of(result)), _host_of(result), status)

    def v2_runner_on_ok(self, result):
        self._done(result, "changed" if result.is_changed() else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._done(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._done(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._done(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        self.timings.finish()
        summary = self.timings.summary(top=self.get_option("top"))
        self._display.banner("TIMINGS (llamarpc.cluster.timings)")
        for line in format_summary(summary):
            self._display.display(line)
        path = self.get_option("output")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(summary, handle, indent=2)
