# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan before deploy (playbooks/plan.yml): predictions from the two planners' results, and the report.

Pure functions, standard library only. The inputs are what site.yml's own planners return - the shard placement of
``gguf_shard_plan`` (run with ``fetch=false``) and the memory plan of ``llama_cluster_plan`` - so the plan shown is
the plan site.yml deploys; this file only adds the predictions and the text.

Load time (a first deploy, nothing cached): every host downloads its shards from the source, one host after the
other as site.yml fills them, at the slower of the source's rate and the host's link; then llama-server reads the
shards (those on other hosts over SSHFS, at the slower of the two hosts' links) and sends every RPC worker its
weights over the slower of the coordinator's and the worker's link (a worker on the coordinator's host: loopback,
not counted). Tokens/s: ``_perf_model.predict`` in the layer split with each worker's weight bytes, the nodes'
memory bandwidth, the links' round trips and throughput, and one f32 activation vector per hop.

A link figure is measured when there is one (the TCP connect time to an RPC worker already running), else assumed
(the ``llamarpc_plan_*`` variables); the report says which.

With speculative decoding in the memory plan (its ``speculative``), ``_perf_model.speculative`` predicts tokens/s with
it and without it, at an assumed acceptance (the llama_coordinator role's ``llama_coordinator_spec_acceptance``), the
tokens drafted per pass that its settings give (``drafted_per_pass``), and, when the vocabulary size is known, the
logits of every verified token back over the last worker's link; both figures count the same terms.
"""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as cluster_plan
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _perf_model as perf
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._cluster_plan import human_bytes
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_plan import human

ACTIVATION_BYTES_PER_WIDTH = 4  # one f32 activation vector crosses each hop per generated token
LOOPBACK_RTT_S = 0.0001


def rate(mbit):
    """Bytes per second of a link of ``mbit`` megabits per second."""
    return float(mbit) * 1e6 / 8


def link_of(links, host, default_mbit, default_rtt_ms, measured_rtt_ms=None):
    """``{"mbit", "rtt_ms", "measured": [...]}`` of a host's link: its bandwidth from ``links`` (Mbit/s, or None), its
    round trip as measured (``measured_rtt_ms``) when it was, else the defaults."""
    mbit = links.get(host)
    link = {"mbit": float(mbit or default_mbit), "rtt_ms": float(default_rtt_ms), "measured": []}
    if measured_rtt_ms is not None:
        link["rtt_ms"] = float(measured_rtt_ms)
        link["measured"].append("rtt")
    return link


def predict_load(placement, coordinator, workers, complete, links, source_mbit):
    """Seconds a first deploy spends moving bytes: downloads, shards read over SSHFS, weights sent to workers.

    ``placement``: shards with ``name``, ``size``, ``host``; ``workers``: memory plan rows (``name``,
    ``weight_bytes``); ``complete``: ``{host: {shard name: size}}`` already there; ``links``: ``{host: link_of()}``.
    """
    download = {}
    for shard in placement:
        host = shard["host"]
        if complete.get(host, {}).get(shard["name"]) == int(shard["size"]):
            continue
        speed = rate(min(source_mbit, links[host]["mbit"]))
        download[host] = download.get(host, 0.0) + int(shard["size"]) / speed
    remote = 0.0
    for shard in placement:
        if shard["host"] != coordinator:
            remote += int(shard["size"]) / rate(min(links[shard["host"]]["mbit"], links[coordinator]["mbit"]))
    send = {}
    for row in workers:
        if row["name"] == coordinator:
            continue
        send[row["name"]] = int(row["weight_bytes"]) / rate(min(links[row["name"]]["mbit"], links[coordinator]["mbit"]))
    total = sum(download.values()) + remote + sum(send.values())
    return {
        "download_seconds": download,
        "sshfs_read_seconds": remote,
        "send_seconds": send,
        "total_seconds": total,
    }


def predict_speed(model, workers, coordinator, links, memory_bandwidth):
    """``_perf_model.predict`` of the memory plan (layer split), with its terms; a local plan (fit first: no worker)
    is one process reading every weight."""
    if not workers:
        return perf.predict([{"name": coordinator, "bytes": int(model["weight_bytes"]), "bandwidth": memory_bandwidth}])
    nodes = []
    for row in workers:
        link = links[row["name"]]
        nodes.append(
            {
                "name": row["name"],
                "bytes": int(row["weight_bytes"]),
                "bandwidth": float(memory_bandwidth),
                "rtt": LOOPBACK_RTT_S if row["name"] == coordinator else link["rtt_ms"] / 1000,
                "throughput": rate(min(link["mbit"], links[coordinator]["mbit"])),
            }
        )
    return perf.predict(nodes, "layer", activation_bytes=int(model["n_embd"]) * ACTIVATION_BYTES_PER_WIDTH)


#: The setting that bounds each type's draft (``_cluster_plan.SPEC_SETTINGS``); ngram-cache drafts up to the draft
#: length of the draft model's settings.
DRAFT_LENGTH = {
    "draft-simple": "draft-n-max",
    "ngram-cache": "draft-n-max",
    "ngram-mod": "ngram-mod-n-max",
    "ngram-simple": "ngram-simple-size-m",
    "ngram-map-k": "ngram-map-k-size-m",
    "ngram-map-k4v": "ngram-map-k4v-size-m",
}


def drafted_per_pass(speculative):
    """Tokens drafted per verification pass: the longest draft the plan's types allow (their settings, else llama.cpp's
    defaults), what a pass verifies; what it yields follows from the acceptance (``_perf_model.tokens_per_pass``)."""
    settings = speculative.get("settings") or {}
    return max(
        int(settings.get(DRAFT_LENGTH[kind], cluster_plan.SPEC_DEFAULTS[DRAFT_LENGTH[kind]]))
        for kind in speculative["types"]
    )


def _node(row, coordinator, links, memory_bandwidth):
    link = links[row["name"]]
    return {
        "name": row["name"],
        "bytes": int(row["weight_bytes"]),
        "bandwidth": float(memory_bandwidth),
        "rtt": LOOPBACK_RTT_S if row["name"] == coordinator else link["rtt_ms"] / 1000,
        "throughput": rate(min(link["mbit"], links[coordinator]["mbit"])),
    }


def predict_speculation(model, memory, coordinator, links, memory_bandwidth, acceptance, n_vocab=0):
    """Tokens/s with the memory plan's speculative decoding and without it (``_perf_model.speculative``; the same terms
    both ways), or None when the plan has none. ``n_vocab``: the vocabulary size (0: logits not counted)."""
    speculative = memory.get("speculative")
    if not speculative:
        return None
    rows = memory.get("workers") or []
    nodes = [_node(row, coordinator, links, memory_bandwidth) for row in rows] or [
        {"name": coordinator, "bytes": int(model["weight_bytes"]), "bandwidth": float(memory_bandwidth)}
    ]
    drafted = drafted_per_pass(speculative)
    logits = int(n_vocab) * ACTIVATION_BYTES_PER_WIDTH
    draft = None
    if speculative.get("draft"):
        draft = {"bytes": int(speculative["draft_weight_bytes"]), "bandwidth": float(memory_bandwidth)}
        host = speculative.get("draft_host")
        if speculative.get("draft_device") not in ("", "none") and host in links:
            on_worker = _node({"name": host, "weight_bytes": 0}, coordinator, links, memory_bandwidth)
            draft.update(rtt=on_worker["rtt"], throughput=on_worker["throughput"], logits_bytes=logits)
    terms = {"activation_bytes": int(model["n_embd"]) * ACTIVATION_BYTES_PER_WIDTH, "logits_bytes": logits}
    share = perf.head_share(
        model.get("output_bytes", 0), sum(model.get("layer_bytes") or ()) + model.get("output_bytes", 0)
    )
    fast = perf.speculative(nodes, drafted, acceptance, draft, share=share, **terms)
    plain = perf.speculative(nodes, 0, 0.0, None, **terms)
    return {
        "types": list(speculative["types"]),
        "drafted_per_pass": drafted,
        "acceptance": float(acceptance),
        "tokens_per_pass": fast["tokens_per_pass"],
        "verify_slope": perf.verify_slope_for(share),
        "logits_counted": bool(logits),
        "with": fast,
        "without": plain,
        "speedup": fast["tokens_per_second"] / plain["tokens_per_second"],
    }


def build(
    *,
    model,
    shards,
    coordinator,
    placement=None,
    disk=None,
    reports=None,
    memory=None,
    probe=(),
    workers=(),
    header_reads=(),
    refusals=(),
    staging=None,
    links=None,
    default_mbit=1000.0,
    source_mbit=100.0,
    default_rtt_ms=1.0,
    memory_bandwidth=10e9,
    spec_acceptance=0.5,
    n_vocab=0,
):
    """The plan document: the inputs, the predictions (when both planners placed the model) and ``text``.

    ``links``: ``{host: Mbit/s or None}``; ``workers``: the memory planner's input (``name``, ``rtt_ms`` measured or
    None); ``probe``: the RPC workers' states now (``rpc_endpoint_facts``)."""
    hosts = set((disk or {}).keys()) | {row["name"] for row in (memory or {}).get("workers", [])} | {coordinator}
    measured = {worker["name"]: worker.get("rtt_ms") for worker in workers}
    link_table = {
        host: link_of(links or {}, host, default_mbit, default_rtt_ms, measured.get(host)) for host in sorted(hosts)
    }
    doc = {
        "coordinator": coordinator,
        "model": {
            **{key: model.get(key) for key in ("name", "architecture", "n_layer", "n_embd", "weight_bytes")},
            "summary": model,
            "shards": [{"name": shard["name"], "size": int(shard["size"])} for shard in shards],
            "header_reads": list(header_reads),
        },
        "placement": placement,
        "disk": disk,
        "memory": memory,
        "workers_now": list(probe),
        "links": link_table,
        "assumptions": {
            "link_mbit": default_mbit,
            "source_mbit": source_mbit,
            "rtt_ms": default_rtt_ms,
            "memory_bandwidth_bytes_per_second": memory_bandwidth,
        },
        "refusals": list(refusals),
        "staging": staging or None,
        "load": None,
        "speed": None,
    }
    # Speculative decoding: its keys only when the memory plan speculates (a report without it is what it was).
    if memory is not None and memory.get("speculative"):
        doc["assumptions"]["spec_acceptance"] = spec_acceptance
        doc["speculation"] = None
    if placement is not None and memory is not None:
        complete = {name: report.get("complete", {}) for name, report in (reports or {}).items()}
        doc["load"] = predict_load(placement, coordinator, memory["workers"], complete, link_table, source_mbit)
        doc["speed"] = predict_speed(model, memory["workers"], coordinator, link_table, memory_bandwidth)
        speculation = predict_speculation(
            model, memory, coordinator, link_table, memory_bandwidth, spec_acceptance, n_vocab
        )
        if speculation is not None:
            doc["speculation"] = speculation
    doc["text"] = text(doc)
    return doc


def staging_lines(staging):
    """The model change: whether the new model is staged beside the one served now, and both footprints per host."""
    if not staging:
        return []
    if not staging.get("served"):
        return ["Model change: none served yet (a first deploy)"]
    if staging["served"][0] == staging["model_id"]:
        return ["Model change: none (this model is served now)"]
    how = (
        "staged beside the model served now (it serves until the switch)"
        if staging["fits"]
        else f"in place - {staging.get('downtime', 'llama-server stops first')}"
    )
    lines = [f"Model change {staging['served'][0]} -> {staging['model_id']}: {how}; per host:"]
    for host, room in sorted(staging["footprints"].items()):
        lines.append(
            f"  {host}: served now {human(room['serving'])}, older kept {human(room['previous'])}, new "
            f"{human(room.get('new', 0))}, removed first {human(room['reclaim'])}, free {human(room['free'])}"
        )
    return lines


def _seconds(value):
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def text(doc):
    """The plan as lines for a person: model, shards per host, memory per worker, links, predictions, refusals."""
    model = doc["model"]
    total = sum(shard["size"] for shard in model["shards"])
    reads = model["header_reads"]
    lines = [
        f"Model {model.get('name') or '?'} ({model.get('architecture')}, {model.get('n_layer')} layers): "
        f"{human(total)} in {len(model['shards'])} shard(s); headers read with "
        f"{sum(read['requests'] for read in reads)} request(s), {human(sum(read['received'] for read in reads))}",
        "Shards per host:",
    ]
    if doc["placement"] is None:
        lines.append("  (no placement: see the refusal)")
    else:
        for host, room in (doc["disk"] or {}).items():
            mine = [shard for shard in doc["placement"] if shard["host"] == host]
            lines.append(
                f"  {host}: {len(mine)} shard(s), {human(sum(int(shard['size']) for shard in mine))} "
                f"(usable {human(room['usable'])}, left {human(room['left'])})"
                + (f" {', '.join(shard['name'] for shard in mine)}" if mine else "")
            )
    lines.extend(staging_lines(doc.get("staging")))
    memory = doc["memory"]
    if memory is None:
        lines.append("Memory plan: none (see the refusal)")
    else:
        where = (
            f"local: the whole model fits on {doc['coordinator']} with its headroom, so llama-server serves it there "
            f"with no RPC worker (fit first; {human_bytes(memory['coordinator_bytes'])})"
            if memory.get("local")
            else f"llama-server keeps {human_bytes(memory['coordinator_bytes'])} on {doc['coordinator']}"
        )
        lines.append(
            f"Memory plan ({memory['strategy']}, ctx_size {memory['ctx_size']} x parallel {memory['parallel']}, "
            f"KV cache {human_bytes(memory['kv_bytes_per_layer'])} per layer; {where}):"
        )
        lines.extend(f"  {line}" for line in memory["table"])
        lines.extend(f"  left out: {entry['name']}: {entry['reason']}" for entry in memory.get("excluded", []))
    if doc["workers_now"]:
        lines.append(
            "RPC workers now: "
            + "; ".join(
                f"{entry.get('endpoint')} {entry.get('state')}"
                + (f" (protocol {entry['protocol']})" if entry.get("protocol") else "")
                for entry in doc["workers_now"]
            )
        )
    lines.append(
        "Links: "
        + "; ".join(
            f"{host} {link['mbit']:g} Mbit/s, rtt {link['rtt_ms']:g} ms"
            + (f" ({', '.join(link['measured'])} measured)" if link["measured"] else " (assumed)")
            for host, link in doc["links"].items()
        )
        + f"; source {doc['assumptions']['source_mbit']:g} Mbit/s (assumed)"
    )
    if doc["load"] is not None:
        load = doc["load"]
        downloads = ", ".join(f"{host} {_seconds(value)}" for host, value in load["download_seconds"].items())
        sends = ", ".join(f"{host} {_seconds(value)}" for host, value in load["send_seconds"].items())
        lines.append(
            f"Predicted load time: {_seconds(load['total_seconds'])} (download: {downloads or 'nothing'}; "
            f"shards read over SSHFS: {_seconds(load['sshfs_read_seconds'])}; weights to workers: {sends or 'none'})"
        )
        speed = doc["speed"]
        lines.append(
            f"Predicted generation: {speed['tokens_per_second']:.1f} tokens/s (compute "
            f"{speed['compute_seconds'] * 1000:.1f} ms + network {speed['network_seconds'] * 1000:.1f} ms per token, "
            f"memory bandwidth {doc['assumptions']['memory_bandwidth_bytes_per_second'] / 1e9:g} GB/s assumed)"
        )
    if doc.get("speculation"):
        spec = doc["speculation"]
        fast, plain = spec["with"]["tokens_per_second"], spec["without"]["tokens_per_second"]
        lines.append(
            f"Predicted with speculative decoding ({', '.join(spec['types'])}): {fast:.1f} tokens/s against "
            f"{plain:.1f} without ({spec['speedup']:.2f} x), at an acceptance of {spec['acceptance']:.2f} assumed "
            f"(per drafted token), {spec['drafted_per_pass']} tokens drafted and {spec['tokens_per_pass']:.2f} "
            "yielded per pass" + ("; the logits of every verified token counted" if spec["logits_counted"] else "")
        )
    lines.extend(f"REFUSED: {refusal}" for refusal in doc["refusals"])
    return lines
