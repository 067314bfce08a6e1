# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark mechanics: llama-server completions and their timings, statistics, ratios, the report files."""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.request

from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils.bench._bench_spec import report_lines, spec_summary
from ansible_collections.llamarpc.cluster.plugins.module_utils.model._model_profile import comparison_lines

#: A prompt word that the tiny models' tokenizers and real ones both turn into about one token.
PROMPT_WORD = " the"


def summarize(values):
    """Median and spread of repeated measurements: ``{n, median, min, max, spread}`` (spread = (max-min)/median)."""
    values = [float(v) for v in values if v is not None]
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None, "spread": None}
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median if median else None
    return {"n": len(values), "median": median, "min": min(values), "max": max(values), "spread": spread}


def prompt_of(tokens):
    """A prompt of about ``tokens`` tokens."""
    return (PROMPT_WORD * max(1, int(tokens))).strip()


def http_json(url, body=None, timeout=600.0, headers=None):
    """GET (body None) or POST JSON; returns (status, parsed body or None)."""
    data = None if body is None else json.dumps(body).encode()
    try:
        with open_url(
            url,
            data=data,
            method="GET" if body is None else "POST",
            headers={"Content-Type": "application/json", **(headers or {})},
            timeout=timeout,
        ) as response:
            raw = response.read()
            return response.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def wait_healthy(base_url, timeout, is_alive=lambda: True, interval=0.25, clock=time.monotonic, sleep=time.sleep):
    """Seconds until ``/health`` answers 200; raises TimeoutError (or RuntimeError when the server died)."""
    start = clock()
    while clock() - start < timeout:
        status, _body = http_json(base_url + "/health", timeout=5)
        if status == 200:
            return clock() - start
        if not is_alive():
            raise RuntimeError("llama-server exited while loading")
        sleep(interval)
    raise TimeoutError(f"llama-server not healthy after {timeout:.0f} s")


def completion(base_url, prompt_tokens, predict_tokens, timeout=600.0):
    """One greedy /completion; returns its timings (prompt/predicted tokens and tokens/s, and with speculation the
    drafted and accepted tokens). ``prompt_tokens``: a length (a synthetic prompt, ``prompt_of``) or a prompt's
    text."""
    body = {
        "prompt": prompt_tokens if isinstance(prompt_tokens, str) else prompt_of(prompt_tokens),
        "n_predict": int(predict_tokens),
        "temperature": 0,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    start = time.monotonic()
    status, answer = http_json(base_url + "/completion", body, timeout=timeout)
    wall = time.monotonic() - start
    if status != 200 or not answer or "timings" not in answer:
        raise RuntimeError(f"completion failed (HTTP {status})")
    t = answer["timings"]
    return {
        "prompt_n": t.get("prompt_n"),
        "predicted_n": t.get("predicted_n"),
        "prompt_per_second": t.get("prompt_per_second"),
        "predicted_per_second": t.get("predicted_per_second"),
        "draft_n": t.get("draft_n"),
        "draft_n_accepted": t.get("draft_n_accepted"),
        "wall_seconds": wall,
        "content": answer.get("content", ""),
    }


def alternated_runs(bases, prompts, predicts, repeats, pair_id="", complete=completion):
    """Every (prompt, output) pair ``repeats`` times on each of ``bases``, llama-servers loaded side by side: one
    request to each in turn, the order rotating from one request to the next (A B, then B A), so that whatever a
    shared machine does meanwhile falls on all of them alike. Returns one list of runs per base. With more than one
    base, the runs made back to back carry the same ``pair`` key (``<pair_id>/<index>``), for ``paired_ratio``."""
    runs = [[] for _base in bases]
    index = 0
    for prompt in prompts:
        for predict_n in predicts:
            for rep in range(int(repeats)):
                turn = index % len(bases)
                for i in list(range(turn, len(bases))) + list(range(turn)):
                    run = complete(bases[i], prompt, predict_n)
                    length = run.get("prompt_n") if isinstance(prompt, str) else prompt  # a text: its token count
                    run.update(prompt_tokens=length, predict_tokens=predict_n, repeat=rep)
                    if len(bases) > 1:
                        run["pair"] = f"{pair_id}/{index}"
                    runs[i].append(run)
                index += 1
    return runs


def parallel_completions(base_url, clients, prompt_tokens, predict_tokens, timeout=600.0):
    """``clients`` completions at once: aggregate generated tokens per wall-clock second."""
    results, errors = [], []

    def one():
        try:
            results.append(completion(base_url, prompt_tokens, predict_tokens, timeout))
        except RuntimeError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=one) for _i in range(int(clients))]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - start
    if errors:
        raise RuntimeError("; ".join(errors))
    generated = sum(r["predicted_n"] or 0 for r in results)
    return {
        "clients": int(clients),
        "generated": generated,
        "wall_seconds": wall,
        "aggregate_per_second": generated / wall,
    }


def tbf_burst(text):
    """The smallest token-bucket burst (bytes) of the ``tbf`` qdiscs in ``tc -j qdisc show`` output ``text``, on any
    device but loopback: what a shaped link passes at the wire's speed (``_perf_model``'s ``burst``). 0 without a
    tbf, or when ``text`` is not that output (no tc on the host)."""
    try:
        qdiscs = json.loads(text or "[]")
    except ValueError:
        return 0
    bursts = [
        int(q.get("options", {}).get("burst") or 0)
        for q in qdiscs
        if isinstance(q, dict) and q.get("kind") == "tbf" and q.get("dev") != "lo"
    ]
    return min(bursts) if bursts else 0


def interface_bytes(text):
    """Bytes received and sent so far on every network interface but loopback, from the text of /proc/net/dev:
    ``{"received_bytes", "sent_bytes"}`` (the host's links, as a byte count around a load needs them)."""
    received = sent = 0
    for line in text.splitlines()[2:]:  # two header lines
        name, colon, counters = line.partition(":")
        if not colon or name.strip() == "lo":
            continue
        fields = counters.split()  # 8 receive counters, then 8 transmit counters; bytes first in each
        received += int(fields[0])
        sent += int(fields[8])
    return {"received_bytes": received, "sent_bytes": sent}


def sshfs_bytes(sizes, mounts):
    """Bytes of the files in ``sizes`` ({real path: size}) that lie on an SSHFS mount (``mounts``: the mount points
    of the fuse.sshfs entries of /proc/self/mountinfo): what a load of them reads over the links to other hosts."""
    points = [point.rstrip("/") + "/" for point in mounts]
    return sum(size for path, size in sizes.items() if any(path.startswith(point) for point in points))


def bytes_between(before, after):
    """What the counters of :func:`interface_bytes` grew by from ``before`` to ``after``."""
    return {key: after[key] - before[key] for key in before}


def same_output(results, reference="single"):
    """Whether each configuration's greedy outputs equal the ``reference`` configuration's: ``{name: bool or
    None}``. Every run is compared with the reference's first run of the same (prompt, output) lengths, the
    reference's own repeats too; None where there is nothing to compare (no reference, no runs, or a length pair the
    reference did not run)."""
    by_name = {r["name"]: r for r in results}
    expected = {}
    for run in by_name.get(reference, {}).get("runs") or ():
        expected.setdefault((run.get("prompt_tokens"), run.get("predict_tokens")), run.get("content"))
    verdicts = {}
    for r in results:
        runs = r.get("runs") or []
        keys = [(run.get("prompt_tokens"), run.get("predict_tokens")) for run in runs]
        if not expected or not runs or any(key not in expected for key in keys):
            verdicts[r["name"]] = None
        else:
            verdicts[r["name"]] = all(run.get("content") == expected[key] for run, key in zip(runs, keys, strict=True))
    return verdicts


def output_row(verdicts, reference="single"):
    """The ratios table's row for :func:`same_output`: the share of the compared configurations whose greedy output
    is the reference's (target 1), and which differ."""
    compared = [name for name, same in verdicts.items() if same is not None and name != reference]
    differ = [name for name in compared if not verdicts[name]]
    value = (len(compared) - len(differ)) / len(compared) if compared else None
    name = f"greedy output identical to {reference} (share of {len(compared)} configurations)"
    if differ:
        name += "; differ: " + ", ".join(differ)
    return {
        "name": name,
        "metric": "output",
        "numerator_value": len(compared) - len(differ),
        "denominator_value": len(compared),
        "value": value,
        "target": 1.0,
        "compare": "ge",
        "met": None if value is None else value >= 1.0,
        "differ": differ,
    }


#: Load figures of a configuration loaded more than once (the load ratios' cold, warm and seeded loads): the report
#: takes their medians.
REPEATED_LOAD_KEYS = ("load_seconds", "load_sent_bytes", "load_received_bytes", "seed_seconds", "seeded_total_seconds")


def hold_between(before, after):
    """What the delaying proxy held between two of its hold tallies (``--hold-file``): ``{chunks, mean_ms, asked_ms,
    relay_bps}``, the mean one-way hold per chunk written and the bytes it relayed per second of its own CPU (None
    from a tally without them); None without both tallies or with no chunk between them."""
    if not before or not after:
        return None
    chunks = after["chunks"] - before["chunks"]
    if chunks <= 0:
        return None
    held = after["held_seconds"] - before["held_seconds"]
    relayed = after.get("bytes", 0) - before.get("bytes", 0)
    cpu = after.get("cpu_s", 0.0) - before.get("cpu_s", 0.0)
    return {
        "chunks": chunks,
        "mean_ms": 1000.0 * held / chunks,
        "asked_ms": 1000.0 * after["delay_s"],
        "relay_bps": relayed / cpu if relayed > 0 and cpu > 0 else None,
    }


def completion_summary(runs):
    """The completion figures of a configuration's ``summary`` from its greedy completions: the median prompt tok/s,
    and the generation tok/s with its spread, minimum and maximum."""
    runs = list(runs)
    gen = summarize(r["predicted_per_second"] for r in runs)
    return {
        "prompt_tps": summarize(r["prompt_per_second"] for r in runs)["median"],
        "generation_tps": gen["median"],
        "generation_spread": gen["spread"],
        "generation_min": gen["min"],
        "generation_max": gen["max"],
        **spec_summary(runs),
    }


def merge_repeats(results):
    """One result per configuration name, in the order of first appearance. A configuration run more than once keeps
    its first run's figures but for the load figures (``REPEATED_LOAD_KEYS``), which become the medians of its runs,
    and the completion figures (``completion_summary``), taken over every run's completions together; ``runs`` holds
    them all, so that ``same_output`` compares them all, and ``summary.load_runs`` lists every run's load seconds."""
    groups = {}
    for result in results:
        groups.setdefault(result["name"], []).append(result)
    merged = []
    for group in groups.values():
        if len(group) == 1:
            merged.append(group[0])
            continue
        first = dict(group[0])
        summary = dict(first.get("summary", {}))
        for key in REPEATED_LOAD_KEYS:
            values = [r.get("summary", {}).get(key) for r in group]
            if any(value is not None for value in values):
                summary[key] = summarize(values)["median"]
        summary["load_runs"] = [r.get("summary", {}).get("load_seconds") for r in group]
        first["runs"] = [run for r in group for run in r.get("runs") or ()]
        if first["runs"]:
            summary.update(completion_summary(first["runs"]))
        first["summary"] = summary
        merged.append(first)
    return merged


#: The per-completion figure behind a summary's completion metric (``completion_summary``).
RUN_FIGURES = {"generation_tps": "predicted_per_second", "prompt_tps": "prompt_per_second"}


def paired_ratio(numerator_runs, denominator_runs, figure="predicted_per_second"):
    """The median, over completions made back to back on two servers loaded side by side (the same ``pair`` key,
    ``alternated_runs``), of the numerator's ``figure`` over the denominator's, and the number of pairs: a ratio
    that drift on a shared machine cannot move, since both halves of a pair meet the same moment. (None, 0) without
    pairs."""
    den = {r["pair"]: r.get(figure) for r in denominator_runs or () if r.get("pair")}
    ratios = [
        r[figure] / den[r["pair"]]
        for r in numerator_runs or ()
        if r.get("pair") in den and r.get(figure) and den[r["pair"]]
    ]
    return summarize(ratios)["median"], len(ratios)


def ratio_rows(results, ratios):
    """Ratios between configurations: each ``{name, metric, numerator, denominator, target, compare}``.

    ``metric`` is a key of a configuration's ``summary`` (e.g. ``generation_tps``, ``load_seconds``).
    ``compare`` is ``ge`` or ``le`` against ``target`` (optional). Instead of a ``denominator`` configuration a spec
    may give a fixed ``denominator_value`` (the model's bytes, say). With ``paired`` true, and a completion metric
    (``RUN_FIGURES``), the value is the median of the paired completions' ratios (``paired_ratio``), with their
    number in ``pairs``; without pairs, the ratio of the medians, with ``pairs`` 0.
    """
    by_name = {r["name"]: r for r in results}
    rows = []
    for spec in ratios:
        num = by_name.get(spec["numerator"], {}).get("summary", {}).get(spec["metric"])
        if spec.get("denominator") is None and spec.get("denominator_value") is not None:
            den = spec["denominator_value"]
        else:
            den = (
                by_name.get(spec["denominator"], {})
                .get("summary", {})
                .get(spec.get("denominator_metric", spec["metric"]))
            )
        value = num / den if num is not None and den else None
        extra = {}
        if spec.get("paired") and spec["metric"] in RUN_FIGURES:
            paired, pairs = paired_ratio(
                by_name.get(spec["numerator"], {}).get("runs"),
                by_name.get(spec.get("denominator"), {}).get("runs"),
                RUN_FIGURES[spec["metric"]],
            )
            extra["pairs"] = pairs
            value = paired if pairs else value
        target = spec.get("target")
        met = None
        if value is not None and target is not None:
            met = value >= target if spec.get("compare", "ge") == "ge" else value <= target
        rows.append({**spec, **extra, "numerator_value": num, "denominator_value": den, "value": value, "met": met})
    return rows


def _module_tasks(timings):
    """The "module runs on hosts" kind of a timings callback's figures: ``{tasks, seconds, ...}``."""
    kinds = (timings or {}).get("kinds", [])
    return next((k for k in kinds if k["name"] == "module runs on hosts"), {"tasks": 0, "seconds": 0.0})


def _floor_per_task(floor):
    """Seconds per module task of a floor playbook (its tasks are all trivial module tasks), or None."""
    module = _module_tasks(floor)
    return (module["seconds"] / module["tasks"], module["tasks"]) if module["tasks"] else (None, 0)


def rerun_summary(site, floor=None, budget_seconds=45.0, floor_one_host=None):
    """What a no-op ``site.yml`` rerun cost, from the ``llamarpc.cluster.timings`` callback's figures (``site``), set
    against Ansible's own floor on the same hosts (``floor``: the same callback's figures for a playbook of trivial
    module tasks on every host): seconds per task of that floor, and the rerun's module tasks priced at it.

    ``floor_one_host`` (the same playbook on one host) prices the module tasks as if every host had its own CPU:
    the estimate for separate machines, where the hosts' module runs overlap instead of sharing the lab's cores."""
    out = {
        "seconds": site.get("seconds"),
        "changed": site.get("changed"),
        "tasks": site.get("tasks"),
        "budget_seconds": budget_seconds,
        "met": site.get("seconds") is not None and site["seconds"] <= budget_seconds and site.get("changed") == 0,
        "kinds": site.get("kinds", []),
        "plays": site.get("plays", []),
        "roles": site.get("roles", []),
        "slowest": site.get("slowest", [])[:10],
    }
    per_task, measured = _floor_per_task(floor)
    if per_task is not None:
        module = _module_tasks(site)
        out["floor"] = {
            "seconds_per_task": per_task,
            "tasks_measured": measured,
            "hosts": len(floor.get("host_seconds", {})),
            "module_tasks": module["tasks"],
            "module_seconds": module["seconds"],
            "module_tasks_at_floor_seconds": module["tasks"] * per_task,
        }
        one_host, _count = _floor_per_task(floor_one_host)
        if one_host is not None:
            rest = sum(k["seconds"] for k in out["kinds"] if k["name"] != "module runs on hosts")
            out["floor"]["seconds_per_task_one_host"] = one_host
            out["floor"]["separate_machines_estimate_seconds"] = module["tasks"] * one_host + rest
    return out


def rerun_lines(rerun):
    """The no-op rerun as a Markdown section."""
    lines = [
        "",
        f"## site.yml no-op rerun: {_fmt(rerun.get('seconds'), 1)} s, changed {rerun.get('changed')}, "
        f"{rerun.get('tasks')} tasks (budget {_fmt(rerun.get('budget_seconds'), 0)} s: "
        f"{'met' if rerun.get('met') else 'missed'})",
        "",
        "| kind of task | tasks | host runs | s |",
        "|---|---|---|---|",
    ]
    lines += [f"| {k['name']} | {k['tasks']} | {k['host_tasks']} | {_fmt(k['seconds'], 1)} |" for k in rerun["kinds"]]
    floor = rerun.get("floor")
    if floor:
        lines += [
            "",
            f"Ansible's floor on these {floor['hosts']} hosts: {_fmt(floor['seconds_per_task'])} s per task (mean of "
            f"{floor['tasks_measured']} ping tasks on every host). The rerun's {floor['module_tasks']} module tasks "
            f"took {_fmt(floor['module_seconds'], 1)} s; at the floor they would take "
            f"{_fmt(floor['module_tasks_at_floor_seconds'], 1)} s.",
        ]
        if floor.get("separate_machines_estimate_seconds") is not None:
            lines += [
                "",
                f"On one host the floor is {_fmt(floor['seconds_per_task_one_host'])} s per task. Estimate for "
                f"separate machines (each host's module runs on its own CPU, the controller's tasks as measured): "
                f"{_fmt(floor['separate_machines_estimate_seconds'], 1)} s.",
            ]
    lines += ["", "| play | s |", "|---|---|"]
    lines += [f"| {p['name']} | {_fmt(p['seconds'], 1)} |" for p in rerun["plays"]]
    lines += ["", "| slowest task | role | ran on | s |", "|---|---|---|---|"]
    lines += [
        f"| {t['name']} | {t.get('role') or '-'} | {t.get('ran')}/{t.get('hosts')} | {_fmt(t['seconds'], 1)} |"
        for t in rerun["slowest"]
    ]
    return lines


def seeding_lines(name, seeding):
    """A seeded configuration's seeding as a Markdown section: its time (not part of the load's), the bytes each
    worker wrote into its tensor cache and where they came from, and what the coordinator's links carried
    meanwhile. ``seeding``: ``{seconds, workers: {host: {written, present, unavailable, bytes_written, bytes_fetched,
    bytes_peer, shards_local, shards_fetched, shards_peer}}, sources: {shard: URL}, coordinator_network: {sent_bytes,
    received_bytes}}`` (a worker's ``summary`` of tensor_cache_seed)."""
    workers = seeding.get("workers") or {}
    written = sum(w.get("bytes_written") or 0 for w in workers.values())
    fetched = sum(w.get("bytes_fetched") or 0 for w in workers.values())
    peer = sum(w.get("bytes_peer") or 0 for w in workers.values())
    net = seeding.get("coordinator_network") or {}
    sources = ", ".join(f"{url} ({shard})" for shard, url in sorted((seeding.get("sources") or {}).items()))
    lines = [
        "",
        f"## Seeding before {name}: {_fmt(seeding.get('seconds'), 1)} s (not in its load time)",
        "",
        f"{_fmt(written / 1e6, 1)} MB written into the workers' tensor caches: "
        f"{_fmt((written - fetched - peer) / 1e6, 1)} MB "
        f"from shards on the worker's own disk, {_fmt(peer / 1e6, 1)} MB over SFTP from the host holding the shard, "
        f"{_fmt(fetched / 1e6, 1)} MB by HTTP Range requests (URLs offered: "
        f"{sources or 'none'}).",
        "",
        f"The coordinator's links meanwhile: {_fmt((net.get('sent_bytes') or 0) / 1e6, 2)} MB sent, "
        f"{_fmt((net.get('received_bytes') or 0) / 1e6, 2)} MB received.",
        "",
        "| worker | files written | present | unavailable | MB from own disk (shards) | MB from a peer (shards) "
        "| MB by Range (shards) |",
        "|---|---|---|---|---|---|---|",
    ]
    for host, w in sorted(workers.items()):
        local = (w.get("bytes_written") or 0) - (w.get("bytes_fetched") or 0) - (w.get("bytes_peer") or 0)
        lines.append(
            f"| {host} | {w.get('written')} | {w.get('present')} | {w.get('unavailable')} "
            f"| {_fmt(local / 1e6, 1)} ({', '.join(w.get('shards_local') or []) or '-'}) "
            f"| {_fmt((w.get('bytes_peer') or 0) / 1e6, 1)} ({', '.join(w.get('shards_peer') or []) or '-'}) "
            f"| {_fmt((w.get('bytes_fetched') or 0) / 1e6, 1)} ({', '.join(w.get('shards_fetched') or []) or '-'}) |"
        )
    return lines


def _fmt(value, digits=2):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def paper_lines(paper):
    """The seed's case on paper (``tools/seed_paper.py --json``): predicted load times and tokens/s for each plan and
    link, next to what the seed measured."""
    measured = paper.get("measured") or {}
    assumed = paper.get("assumptions") or {}
    lines = [
        "",
        f"## The seed on paper: {paper.get('model', 'the seed model')} on six 8 GB nodes",
        "",
        "The collection's planner and performance model on the seed's own model (headers only), with this tree's "
        f"code; from {paper.get('source', 'tools/seed_paper.py')}. Assumed: "
        f"{_fmt(assumed.get('memory_bandwidth_gb_per_s'), 0)} GB/s of memory bandwidth per node, "
        f"{_fmt(assumed.get('rtt_ms'), 1)} ms round trip.",
        "",
        "| plan | link | cold load | seeded load | seeded load, tensor hashes | warm load | generation tok/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in paper.get("rows") or ():
        hashes = row.get("seeded_hashes_s")
        lines.append(
            f"| {row['plan']} | {row['link_mbit']:g} Mbit/s | {row['cold_s'] / 60:.1f} min | "
            f"{row['seeded_s'] / 60:.1f} min | {'-' if hashes is None else f'{hashes / 60:.1f} min'} | "
            f"{row['warm_s'] / 60:.1f} min | {row['tokens_per_second']:.2f} |"
        )
    lines.append(
        f"| the seed, measured | - | {_fmt(measured.get('load_minutes'), 0)} min | - | - | - "
        f"| {_fmt(measured.get('tokens_per_second'))} |"
    )
    return lines


def markdown_report(results, ratios, meta, links=(), rerun=None, models=None, paper=None):
    """The results table (like the seed's), the ratios, the model's predictions and the link figures, as Markdown;
    with ``models`` (the model's profile and a reference's), the two models' proportions side by side; with ``paper``,
    the seed's case on paper (``paper_lines``)."""
    lines = [f"# Benchmark {meta.get('title', '')}".rstrip(), ""]
    for key in sorted(meta):
        if key != "title":
            lines.append(f"- {key}: {meta[key]}")
    lines += [
        "",
        "| configuration | split | workers | load s | MB sent at load | prompt tok/s "
        "| generation tok/s (median, spread) | predicted tok/s | predicted/measured | output = single |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r.get("summary", {})
        same = s.get("same_output_as_single")
        sent = s.get("load_sent_bytes")
        lines.append(
            "| {name} | {split} | {workers} | {load} | {sent} | {prompt} | {gen} ({spread}) | {pred} | {pm} "
            "| {same} |".format(
                name=r["name"],
                split=r.get("split_mode", "-"),
                workers=len(r.get("rpc", [])),
                load=_fmt(s.get("load_seconds"), 1)
                + (f" (median of {len(s['load_runs'])})" if len(s.get("load_runs") or ()) > 1 else ""),
                sent=_fmt(None if sent is None else sent / 1e6, 1),
                prompt=_fmt(s.get("prompt_tps")),
                gen=_fmt(s.get("generation_tps")),
                spread=_fmt(s.get("generation_spread")),
                pred=_fmt(s.get("predicted_tps")),
                pm=_fmt(s.get("predicted_over_measured")),
                same="-" if same is None else ("yes" if same else "NO"),
            )
        )
    if ratios:
        lines += ["", "| ratio | value | target | met |", "|---|---|---|---|"]
        for row in ratios:
            target = row.get("target")
            sign = ">=" if row.get("compare", "ge") == "ge" else "<="
            shown = f"{sign} {_fmt(target)}" if target is not None else "-"
            met = "-" if row["met"] is None else ("yes" if row["met"] else "NO")
            how = ""
            if "pairs" in row:
                how = f" (median of {row['pairs']} paired completions)" if row["pairs"] else " (ratio of the medians)"
            lines.append(f"| {row['name']}{how} | {_fmt(row['value'], 3)} | {shown} | {met} |")
    if links:
        lines += ["", "| link | kind | from -> to | MB | MB/s |", "|---|---|---|---|---|"]
        for link in links:
            lines.append(
                f"| {link['name']} | {link.get('kind', '-')} | {link.get('from', '-')} -> {link.get('to', '-')} "
                f"| {_fmt((link.get('bytes') or 0) / 1e6, 1)} | {_fmt(link.get('mb_per_s'))} |"
            )
    held = [r for r in results if r.get("proxy_hold")]
    if held:
        lines += [
            "",
            "Delay emulation (the proxy's one-way hold per chunk during the completions, and the bytes it relayed per "
            "second of its own CPU; the predictions take twice the mean hold as the round trip, and no link through "
            "the proxy faster than its relay):",
            "",
            "| configuration | asked ms | held ms (mean) | chunks | relay MB/s |",
            "|---|---|---|---|---|",
        ]
        for r in held:
            h = r["proxy_hold"]
            relay = _fmt(h["relay_bps"] / 1e6, 0) if h.get("relay_bps") else "-"
            lines.append(
                f"| {r['name']} | {_fmt(h.get('asked_ms'))} | {_fmt(h['mean_ms'])} | {h['chunks']} | {relay} |"
            )
    parallel = [r for r in results if r.get("parallel_runs")]
    if parallel:
        lines += ["", "| configuration | clients | aggregate tok/s |", "|---|---|---|"]
        for r in parallel:
            for p in r["parallel_runs"]:
                lines.append(f"| {r['name']} | {p['clients']} | {_fmt(p['aggregate_per_second'])} |")
    for r in results:
        if r.get("seeding"):
            lines += seeding_lines(r["name"], r["seeding"])
    lines += report_lines(results)
    if models:
        lines += comparison_lines(*models)
    if paper:
        lines += paper_lines(paper)
    if rerun:
        lines += rerun_lines(rerun)
    return "\n".join(lines) + "\n"


def write_chart(results, path):
    """A bar chart of generation and prompt tokens/s per configuration; False when matplotlib is missing."""
    try:
        import matplotlib  # noqa: PLC0415 - optional, only for the chart

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415 - optional, only for the chart
    except ImportError:
        return False
    names = [r["name"] for r in results]
    gen = [r.get("summary", {}).get("generation_tps") or 0 for r in results]
    pred = [r.get("summary", {}).get("predicted_tps") or 0 for r in results]
    load = [r.get("summary", {}).get("load_seconds") or 0 for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(8, 1.4 * len(names) + 4), 4.5))
    xs = range(len(names))
    ax1.bar([x - 0.2 for x in xs], gen, width=0.4, label="measured")
    ax1.bar([x + 0.2 for x in xs], pred, width=0.4, label="predicted")
    ax1.set_xticks(list(xs), names, rotation=30, ha="right")
    ax1.set_ylabel("generation tokens/s")
    ax1.legend()
    ax2.bar(list(xs), load)
    ax2.set_xticks(list(xs), names, rotation=30, ha="right")
    ax2.set_ylabel("model load s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
