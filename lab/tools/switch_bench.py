# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The day-2 switches on a deployed lab, each beside a plain redeploy, a client asking one token every 0.25 s.

Every phase runs with ``switch_probe``'s client against the coordinator and records the seconds without an answer,
the requests that failed other than with a 503 carrying Retry-After, and the bytes the controller sent over the lab's
bridge (every model file, build archive and Ansible module the run shipped; the no-op rerun's bytes are the floor
that Ansible alone sends). In order:

- ``noop``: site.yml, nothing changed (the floor);
- ``restart``: llama-server restarted by hand, nothing changed: the warm load the targets compare with;
- ``model-plain``: llama-server stopped, then site.yml with the model's files ``--plain-files`` (a plain redeploy);
- ``model-back``: rollback.yml to the model before it;
- ``model-staged``: site.yml with ``--staged-files`` (staged while serving, one restart);
- ``model-rollback``: rollback.yml back to the first model (a rollback after a staged switch);
- ``build-plain``, ``build-back``, ``build-staged``, ``build-rollback``: the same with the build in use repacked into
  two other archives (another sha256, the same binaries), deployed as prebuilt builds; the plain one without the
  workers' cutover (``llama_rpc_worker_cutover=false``).

Paired: a hand restart (``<phase>:warm``) runs just after every staged switch and every rollback, and the switch's
downtime is taken against that restart's: the warm load of the model and build the switch went to, on the same
machine a few seconds later (a restart before it would load the model switched from). ``--repeats`` runs each staged
switch and its rollback that many times, and the downtime target holds when the median of the paired ratios does.

Two other file sets (``--plain-files``, ``--staged-files``: the same weights split differently is enough) keep each
switch a download: the rollback keeps the previous model, so a set switched to before is already on the hosts.

    python3 lab/tools/switch_bench.py --inventory inventories/bench/hosts.yml -e @lab/benchmarks/cluster.yml \\
        --plain-files '.cache/switch-a/*.gguf' --staged-files '.cache/switch-b/*.gguf' --bridge llrpcmol9 --out DIR

Writes DIR/switch.json and DIR/switch.md; prints the table. Traffic: the lab's hosts only.
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / ".collections"), str(ROOT / "molecule" / "_shared")]

import switch_probe  # noqa: E402 - beside this file
from llama_builds import INSTALL_DIR, cached_archive, key_of, repack  # noqa: E402 - the scenarios' build helpers

#: What the targets ask (issue text, README's day-2 table): a staged switch's downtime at most this many warm loads.
DOWNTIME_TARGET = 1.2
SERVER_UNIT = "llamarpc-server"


def probe_args(url, api_key, interval=0.25, max_tokens=1):
    """``switch_probe``'s options: one completion of ``max_tokens`` every ``interval`` seconds (the downtime's
    resolution), a request given 120 s. A finer tick needs shorter completions: four of 8 tokens a second kept the
    lab's workers busy enough to slow a restart's load."""
    return argparse.Namespace(
        url=url, api_key=api_key, prompt="The capital of France is", max_tokens=max_tokens, interval=interval,
        timeout=120.0, duration=0, log=None,
    )  # fmt: skip


def bridge_sent(bridge):
    """Bytes the controller sent so far over the lab's bridge (to every lab host)."""
    return int(Path(f"/sys/class/net/{bridge}/statistics/tx_bytes").read_text(encoding="ascii"))


def measured(name, commands, probe_options, bridge, log_dir, settle=3.0):
    """Run ``commands`` (argv lists, one after another, each to the end) with the probe running: the phase's record.
    The probe goes on ``settle`` seconds after the last command (an answer after the switch ends the gap)."""
    probe = switch_probe.Probe(probe_options)
    summary = {}
    thread = threading.Thread(target=lambda: summary.update(probe.run()), daemon=True)
    sent, started = bridge_sent(bridge), time.monotonic()
    thread.start()
    codes = []
    with open(log_dir / f"{name}.log", "w", encoding="utf-8") as log:
        for argv in commands:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            codes.append(subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False).returncode)
    seconds = time.monotonic() - started
    time.sleep(settle)
    probe.stop.set()
    thread.join()
    return {"name": name, "seconds": round(seconds, 1), "rc": codes, "probe": summary,
            "sent_bytes": bridge_sent(bridge) - sent}  # fmt: skip


def kind(name):
    """A phase's kind: its name without the repeat's number (``model-staged#2`` is a ``model-staged``, and
    ``model-staged#2:warm`` a ``model-staged:warm``)."""
    return re.sub(r"#\d+", "", name)


def rows(phases):
    """The report's rows: each phase's downtime against its paired warm restart's (``<phase>:warm``, just after it)
    or else the first one's (``restart``), and its bytes over the no-op's."""
    by_name = {p["name"]: p for p in phases}
    first = by_name.get("restart", {}).get("probe", {}).get("downtime_s")
    floor = by_name.get("noop", {}).get("sent_bytes", 0)
    out = []
    for phase in phases:
        probe = phase["probe"]
        warm = by_name.get(f"{phase['name']}:warm", {}).get("probe", {}).get("downtime_s", first)
        ratio = probe.get("downtime_s", 0) / warm if warm else None
        out.append({
            "name": phase["name"], "seconds": phase["seconds"], "ok": phase["rc"] and all(c == 0 for c in phase["rc"]),
            "downtime_s": probe.get("downtime_s"), "downtime_over_warm": ratio,
            "answers": probe.get("ok"), "busy": probe.get("busy"), "failed": probe.get("failed"),
            "mb_over_noop": (phase["sent_bytes"] - floor) / 1e6,
        })  # fmt: skip
    return out


def targets(table, artifacts=None):
    """Each target's verdict. Per kind of staged switch and of rollback: the median of its paired downtime ratios within
    DOWNTIME_TARGET warm restarts. Per run of one: no failed request (a 503 with Retry-After aside). Per rollback: it
    shipped less over the no-op than the smallest file a download would have shipped (``artifacts``: bytes by
    ``model`` and ``build``; what is left is Ansible's own modules, which a rollback runs more of)."""
    verdicts = []
    ratios = {}
    for row in table:
        if kind(row["name"]).endswith(("-staged", "-rollback")):
            ratios.setdefault(kind(row["name"]), []).append(row["downtime_over_warm"])
    for name, values in ratios.items():
        known = sorted(v for v in values if v is not None)
        median = statistics.median(known) if len(known) == len(values) else None
        shown = ", ".join(f"{v:.2f}" for v in known)
        verdicts.append((f"{name}: downtime / paired warm restart <= {DOWNTIME_TARGET} (median of {shown})",
                         median is not None and median <= DOWNTIME_TARGET))  # fmt: skip
    for row in table:
        if kind(row["name"]).endswith(("-staged", "-rollback")):
            verdicts.append((f"{row['name']}: no failed request (503 with Retry-After aside)", row["failed"] == 0))
        smallest = (artifacts or {}).get(row["name"].split("-")[0])
        if kind(row["name"]).endswith("-rollback") and smallest:
            verdicts.append((f"{row['name']}: ships less than one file a download would ({smallest / 1e6:.1f} MB)",
                             row["mb_over_noop"] * 1e6 < smallest))  # fmt: skip
    return verdicts


def markdown(table, verdicts, command):
    def fmt(value, digits=1):
        return "-" if value is None else f"{value:.{digits}f}"

    lines = [
        "# Day-2 switches", "", f"`{command}`", "",
        "| phase | run s | downtime s | / warm restart (paired) | answers | 503 | failed | MB over the no-op |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for row in table:
        lines.append(
            f"| {row['name']}{'' if row['ok'] else ' (FAILED)'} | {fmt(row['seconds'])} | {fmt(row['downtime_s'])} "
            f"| {fmt(row['downtime_over_warm'], 2)} | {row['answers']} | {row['busy']} | {row['failed']} "
            f"| {fmt(row['mb_over_noop'])} |"
        )
    lines += ["", "| target | met |", "|---|---|"]
    lines += [f"| {name} | {'yes' if met else 'NO'} |" for name, met in verdicts]
    return "\n".join(lines) + "\n"


class Lab:
    """The deployed lab: its inventory, the coordinator, and the commands a phase runs."""

    def __init__(self, args):
        self.args = args
        # The coordinator, its URL as the deployed plan has it and the API key as the run's variables give it.
        host, plan = self.remote("ansible.builtin.slurp", f"src={args.config_dir}/plan.json")
        self.coordinator = host
        self.url = args.url or json.loads(base64.b64decode(plan["content"]))["url"]
        _host, key = self.remote("ansible.builtin.debug", "msg={{ llama_coordinator_api_key | default('') }}")
        self.api_key = key["msg"]
        self.scratch = Path(tempfile.mkdtemp(prefix="switch-bench-"))

    def remote(self, module, arguments):
        """One module on the coordinator (the inventory's group), with the run's variables: its host and result."""
        argv = ["ansible", "-i", self.args.inventory, "coordinator[0]", "-b", "-o", "-m", module, "-a", arguments]
        argv += [word for path in self.args.extra_vars for word in ("-e", path)]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        host, _sep, result = out.strip().splitlines()[0].partition(" | SUCCESS => ")
        return host, json.loads(result)

    def settings(self, name, values):
        path = self.scratch / f"{name}.json"
        path.write_text(json.dumps(values), encoding="utf-8")
        return ["-e", f"@{path}"]

    def playbook(self, name, *more):
        argv = ["ansible-playbook", "-i", self.args.inventory, str(ROOT / "playbooks" / name)]
        return argv + [word for path in self.args.extra_vars for word in ("-e", path)] + list(more)

    def adhoc(self, module, arguments, hosts=None):
        return ["ansible", "-i", self.args.inventory, hosts or self.coordinator, "-b", "-m", module, "-a", arguments]

    def stop_server(self):
        return self.adhoc("ansible.builtin.systemd_service", f"name={SERVER_UNIT} state=stopped")

    def running_build(self):
        """The build key llama-server's binary comes from on the coordinator."""
        pid = f"$(systemctl show -p MainPID --value {SERVER_UNIT})"
        argv = self.adhoc("ansible.builtin.shell", f"readlink /proc/{pid}/exe")
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return next(key_of(word) for word in out.split() if word.startswith(INSTALL_DIR))


def files(pattern):
    found = sorted(str(Path(p).resolve()) for p in glob.glob(pattern))
    if not found:
        raise SystemExit(f"no files match {pattern}")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--inventory", required=True)
    parser.add_argument("-e", dest="extra_vars", action="append", default=[], help="as ansible-playbook's -e")
    parser.add_argument("--plain-files", required=True, help="glob: the model's files for the plain redeploy")
    parser.add_argument("--staged-files", required=True, help="glob: the model's files for the staged switch")
    parser.add_argument("--bridge", required=True, help="the lab's bridge on this controller")
    parser.add_argument("--url", help="llama-server's base URL (default: the deployed plan's)")
    parser.add_argument("--config-dir", default="/etc/llamarpc/coordinator", help="llama_coordinator_config_dir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--skip-builds", action="store_true", help="the model's switches only")
    # A quarter second resolves the 1.2 x target against a warm restart of about a second; 1-token completions keep
    # four a second from slowing the lab (8-token ones did).
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between the probe's requests")
    parser.add_argument("--max-tokens", type=int, default=1, help="tokens of each of the probe's completions")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each staged switch and its rollback")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lab = Lab(args)
    options = probe_args(lab.url, lab.api_key, args.interval, args.max_tokens)
    plain, staged = files(args.plain_files), files(args.staged_files)
    back = {what: lab.playbook("rollback.yml", "-e", f"llamarpc_rollback={what}") for what in ("model", "build")}
    to_plain = lab.playbook("site.yml", *lab.settings("plain", {"llama_model_files": plain}))
    to_staged = lab.playbook("site.yml", *lab.settings("staged", {"llama_model_files": staged}))
    restart = [lab.adhoc("ansible.builtin.systemd_service", f"name={SERVER_UNIT} state=restarted")]
    phases = []

    def run(name, commands):
        phases.append(measured(name, commands, options, args.bridge, out))
        print(json.dumps({k: phases[-1][k] for k in ("name", "seconds", "rc")}), flush=True)

    def paired(name, commands, repeat):
        name = name if repeat == 1 else f"{name}#{repeat}"
        run(name, commands)
        run(f"{name}:warm", restart)

    run("deploy", [lab.playbook("site.yml")])  # this checkout's collection, whatever the lab ran before
    run("noop", [lab.playbook("site.yml")])
    run("restart", restart)
    run("model-plain", [lab.stop_server(), to_plain])
    run("model-back", [back["model"]])
    for repeat in range(1, args.repeats + 1):
        paired("model-staged", [to_staged], repeat)
        paired("model-rollback", [back["model"]], repeat)
    artifacts = {"model": min(Path(f).stat().st_size for f in plain + staged)}
    if not args.skip_builds:
        archive = cached_archive(lab.running_build())
        builds = {}
        for which in ("plain", "staged"):
            (lab.scratch / which).mkdir()
            path, checksum = repack(archive, lab.scratch / which)
            builds[which] = {"llama_cpp_install_method": "prebuilt", "llama_cpp_prebuilt_archive": str(path),
                             "llama_cpp_prebuilt_checksum": checksum}  # fmt: skip
            artifacts["build"] = Path(path).stat().st_size
        # A build rollback keeps the inventory's model, and its inventory names the build in use (as a user's does).
        plain_build = lab.settings("build-plain", {**builds["plain"], "llama_rpc_worker_cutover": False})
        run("build-plain", [lab.stop_server(), lab.playbook("site.yml", *plain_build)])
        run("build-back", [back["build"] + lab.settings("build-back", builds["plain"])])
        staged_build = lab.playbook("site.yml", *lab.settings("build-staged", builds["staged"]))
        for repeat in range(1, args.repeats + 1):
            paired("build-staged", [staged_build], repeat)
            paired("build-rollback", [back["build"] + lab.settings("build-rollback", builds["staged"])], repeat)
    table = rows(phases)
    verdicts = targets(table, artifacts)
    command = " ".join(["python3", "lab/tools/switch_bench.py", *(argv if argv is not None else sys.argv[1:])])
    (out / "switch.json").write_text(json.dumps({"phases": phases, "rows": table, "targets": verdicts}, indent=2))
    text = markdown(table, verdicts, command)
    (out / "switch.md").write_text(text, encoding="utf-8")
    print(text)
    return 0 if all(row["ok"] for row in table) else 1


if __name__ == "__main__":
    sys.exit(main())
