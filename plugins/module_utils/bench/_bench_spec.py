# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Speculative decoding in the benchmark: a configuration's llama-server arguments, its acceptance from the
completions' timings, the performance model's prediction from what it counted, and the report's section.

llama-server's ``timings`` of a completion with speculation carry ``draft_n`` (tokens drafted) and
``draft_n_accepted`` (of them accepted). Every generated token is either a drafted one accepted or the one a target
pass produces, so the target's passes are ``predicted_n - draft_n_accepted``; per pass a configuration drafted
``draft_n / passes`` and had ``draft_n_accepted / passes`` accepted (an n-gram type drafts only where the text repeats,
so its mean draft is under its maximum). Those two are what ``_perf_model.speculative`` takes (``drafted``,
``accepted``): the prediction then checks the cost of a pass, not a guess at the acceptance.

Standard library only (and the planner's argument builder); no I/O.
"""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as cluster_plan
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _perf_model as perf

#: Where the benchmark runs a draft model: the coordinator's CPU, llama.cpp's device ``none`` (what the planner gives a
#: draft requested on ``_cluster_plan.DRAFT_ON_CPU``).
DRAFT_DEVICE = "none"


def server_args(speculative, draft_summary=None):
    """llama-server's speculative arguments for ``speculative`` (``types``, ``settings``, ``draft_path``), built and
    checked by the planner's own functions (``check_speculative``, ``speculative_args``), the draft on the
    coordinator's CPU; ``draft_summary``: the draft's ``summarize`` (a draft type needs it). Empty without types.
    Raises ``_cluster_plan.PlanError``."""
    if not speculative or not speculative.get("types"):
        return []
    spec = dict(speculative, draft=draft_summary if speculative.get("draft_path") else None)
    return cluster_plan.speculative_args(cluster_plan.check_speculative(spec), DRAFT_DEVICE)


def spec_summary(runs):
    """The speculative figures of a configuration's summary from its completions' timings: ``drafted``,
    ``accepted`` (tokens, over every run), ``acceptance`` (accepted / drafted, llama-server's rate),
    ``drafted_per_pass`` and ``accepted_per_pass`` (over the target's passes); ``{}`` when no run drafted anything
    or reported no draft counts (no speculation)."""
    runs = [r for r in runs if r.get("draft_n") is not None]
    drafted = sum(int(r["draft_n"]) for r in runs)
    accepted = sum(int(r.get("draft_n_accepted") or 0) for r in runs)
    passes = sum(int(r.get("predicted_n") or 0) - int(r.get("draft_n_accepted") or 0) for r in runs)
    if not runs or passes <= 0:
        return {}
    return {
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": accepted / drafted if drafted else 0.0,
        "drafted_per_pass": drafted / passes,
        "accepted_per_pass": accepted / passes,
    }


def same_as_pair(runs, pair_runs):
    """Whether each completion's text equals the one its pair made back to back (the same ``pair`` key): speculation
    must change how fast tokens come, never which. None without paired completions."""
    theirs = {r["pair"]: r.get("content") for r in pair_runs or () if r.get("pair")}
    mine = [(r.get("content"), theirs[r["pair"]]) for r in runs or () if r.get("pair") in theirs]
    return all(a == b for a, b in mine) if mine else None


def calibrated_slope(staged, bandwidth, share=0.0):
    """``_perf_model.verify_slope_for`` measured on the benchmark's nodes: what each drafted token adds to a
    verification pass, as a fraction of one token's predicted compute. A pass costs more than its batch's compute:
    llama-server computes and returns the logits of every verified token and samples each, which no prompt shows.

    Fitted on the speculative configurations without a draft model at the least round trip among them (drafting costs
    nothing there and the network least): a least-squares fit through the origin of (drafted tokens per pass x one
    token's predicted compute, the measured seconds per pass less the prediction with no slope). ``staged``: per
    result ``(result, nodes, terms, plain)``, ``plain`` the model's prediction without speculation; ``bandwidth``: the
    coordinator's, for a draft; ``share``: the output head's share of a token's bytes. Returns ``(slope, names of the
    configurations it was fitted on)``; ``verify_slope_for(share)`` and no name when no such configuration ran or
    drafted."""
    fit = []
    for r, nodes, terms, plain in staged:
        summary = r.get("summary") or {}
        ngram = r.get("speculative") and not r["speculative"].get("draft_path")
        if ngram and summary.get("generation_tps") and summary.get("drafted_per_pass"):
            fit.append((float(r.get("proxy_delay_ms") or 0), r, nodes, terms, plain))
    least = min((delay for delay, *_rest in fit), default=None)
    points, names = [], []
    for delay, r, nodes, terms, plain in fit:
        if delay != least:
            continue
        summary = r["summary"]
        tokens = 1.0 + summary["accepted_per_pass"]
        at_zero = predict(nodes, r, bandwidth, 0.0, **terms)
        points.append(
            (
                plain["compute_seconds"] * summary["drafted_per_pass"],
                tokens / summary["generation_tps"] - at_zero["seconds_per_token"] * tokens,
            )
        )
        names.append(r["name"])
    square = sum(x * x for x, _y in points)
    if square <= 0:
        return perf.verify_slope_for(share), []
    return max(0.0, sum(x * y for x, y in points) / square), names


def predict(nodes, result, bandwidth, slope, **terms):
    """``_perf_model.speculative`` for a speculative result (its summary's drafted and accepted tokens per pass, its
    draft's bytes read per drafted token, ``result['speculative']['draft_read_bytes']``, on the coordinator's CPU at
    ``bandwidth``), each drafted token adding ``slope`` of a token's compute to the verification (``verify_slope``);
    None for a result without speculation. ``terms``: ``activation_bytes``, ``logits_bytes``, ``shared_bandwidth``."""
    summary = result.get("summary") or {}
    if summary.get("accepted_per_pass") is None:
        return None
    read = ((result.get("speculative") or {}).get("draft_read_bytes")) or 0
    draft = {"bytes": read, "bandwidth": bandwidth} if read else None
    return perf.speculative(
        nodes,
        summary["drafted_per_pass"],
        draft=draft,
        accepted=summary["accepted_per_pass"],
        verify_slope=slope,
        **terms,
    )


def _fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def report_lines(results):
    """The report's section on speculative decoding: each configuration that ran with speculation or beside one (its
    pair), its prompt, round trip, acceptance, tokens per pass, tokens/s and the prediction."""
    shown = [r for r in results if r.get("speculative") or r.get("paired_with_speculation")]
    if not shown:
        return []
    lines = [
        "",
        "## Speculative decoding",
        "",
        "Each speculative configuration ran beside its plain layer split (same round trip through the same proxy, the "
        "output layer on a worker on the coordinator's host in both), completions alternating. Acceptance is "
        "llama-server's (accepted / drafted); per pass: over the target's passes (generated - accepted tokens). The "
        "prediction takes the drafted and accepted tokens per pass that were counted, and what each drafted token "
        "adds to a verification pass (verify slope, a fraction of one token's compute), fitted on the configurations "
        "marked *fit* (no draft model, the least round trip); the others are predicted.",
        "",
        "| configuration | speculation | prompt | rtt ms | acceptance | drafted/pass | accepted/pass | tok/s "
        "| predicted | predicted/measured | verify slope | output = pair |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in shown:
        s = r.get("summary") or {}
        spec = r.get("speculative") or {}
        kind = ",".join(spec.get("types") or []) or "none"
        if spec.get("draft_name"):
            kind += f" ({spec['draft_name']})"
        same = s.get("same_output_as_pair")
        rtt = 2 * float(r.get("proxy_delay_ms") or 0)
        lines.append(
            f"| {r['name']} | {kind} | {r.get('prompt_name') or '-'} | {_fmt(rtt, 0)} "
            f"| {_fmt(s.get('acceptance'))} | {_fmt(s.get('drafted_per_pass'))} | {_fmt(s.get('accepted_per_pass'))} "
            f"| {_fmt(s.get('generation_tps'))} | {_fmt(s.get('predicted_tps'))} "
            f"| {_fmt(s.get('predicted_over_measured'))} | {_fmt(s.get('verify_slope'))}"
            f"{' *fit*' if s.get('slope_fitted_here') else ''} "
            f"| {'-' if same is None else ('yes' if same else 'NO')} |"
        )
    return lines


def ratio_specs(results):
    """A paired ratio (``_bench.ratio_rows``) of each speculative configuration's generation tokens/s to its plain
    pair's, in the order of the results; each row also carries its ``prompt`` and ``rtt_ms`` for ``best_rows``."""
    return [
        {
            "name": f"{r['name']} / {r['paired_with']} (generation)",
            "metric": "generation_tps",
            "numerator": r["name"],
            "denominator": r["paired_with"],
            "paired": True,
            "prompt": r.get("prompt_name") or "",
            "rtt_ms": 2 * float(r.get("proxy_delay_ms") or 0),
        }
        for r in results
        if r.get("speculative") and r.get("paired_with")
    ]


def best_rows(rows, targets=None, target_rtt_ms=16.0):
    """For each prompt and round trip of ``ratio_specs``' rows (with their values), the best speculative configuration
    against the plain split: a row with the highest value, and the prompt's target (``targets``: prompt -> least
    ratio) at ``target_rtt_ms``."""
    groups = {}
    for row in rows:
        if "rtt_ms" in row and row.get("value") is not None:
            groups.setdefault((row["prompt"], row["rtt_ms"]), []).append(row)
    out = []
    for (prompt, rtt), group in groups.items():
        best = max(group, key=lambda row: row["value"])
        target = (targets or {}).get(prompt) if rtt == float(target_rtt_ms) else None
        out.append(
            {
                "name": f"best speculative / plain, {prompt or 'prompt'}, rtt {rtt:g} ms ({best['numerator']})",
                "metric": "generation_tps",
                "value": best["value"],
                "target": target,
                "compare": "ge",
                "met": None if target is None else best["value"] >= target,
                "pairs": best.get("pairs", 0),
            }
        )
    return out
