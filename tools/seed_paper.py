"""The seed at full scale, on paper: docs/seed-on-paper.md from the collection's own planner and performance model.

Writes the headers of Qwen2.5-32B-Instruct Q4_K_M (tools/seed_gguf.py) into a temporary directory, reads them as the
llama_cluster_plan module does, plans the seed's six 8 GB nodes and five 6 GB ones, and predicts load time and
tokens/s with plugins/module_utils/plan/_perf_model.py for a cold load as today, a seeded one and a warm one, at
100 Mbit/s and 1 Gbit/s, next to what the seed measured, with the assumptions and how each figure moves with them.

    python tools/seed_paper.py [--out docs/seed-on-paper.md]

Regenerate the page after a change to the planner or the performance model (a unit test checks it is current).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / ".collections"), str(ROOT / "tools")]

import seed_gguf  # noqa: E402 - found through the path above

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf_header  # noqa: E402
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as planner  # noqa: E402
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _perf_model as perf  # noqa: E402

GIB = 1 << 30
OUT = ROOT / "docs" / "seed-on-paper.md"
#: What the seed measured (platform notes): the first load and generation.
MEASURED_LOAD_MIN, MEASURED_TPS = 48, 0.52
#: The seed's context: llama-server's default (-c 0) is the model's trained context.
SEED_CTX = 32768
#: Shards on the coordinator's disk (1-3); 4 and 5 lived on another node and were read over SSHFS.
COORDINATOR_SHARDS = 3
LINKS_MBIT = (100, 1000)
#: The assumptions: name -> (value, unit shown, low, high, what it is).
BASE = {
    "memory_bandwidth": 10e9,
    "rtt": 0.001,
    "sshfs_fraction": 8.2e6 / (100e6 / 8 * 0.94),
    "disk_rate": 200e6,
    "hash_rate": 1e9,
    "link_efficiency": 0.94,
    "call_seconds": perf.RPC_CALL_SECONDS,
    "compute_factor": perf.RPC_COMPUTE_FACTOR,
}
SENSITIVITY = {
    "memory_bandwidth": ((5e9, 20e9), lambda v: f"{v / 1e9:g} GB/s"),
    "rtt": ((0.0002, 0.005), lambda v: f"{v * 1000:g} ms"),
    "sshfs_fraction": ((0.35, 1.0), lambda v: f"{v:.2f}"),
    "disk_rate": ((100e6, 500e6), lambda v: f"{v / 1e6:g} MB/s"),
    "hash_rate": ((0.5e9, 2e9), lambda v: f"{v / 1e9:g} GB/s"),
    "call_seconds": ((0.0, 0.0026), lambda v: f"{v * 1000:.2f} ms"),
    "compute_factor": ((1.0, 1.5), lambda v: f"{v:.2f}"),
}
MEANING = {
    "memory_bandwidth": "bytes/s a node reads its weights at while generating (per node; nothing shared)",
    "rtt": "network round trip between the coordinator and a worker",
    "sshfs_fraction": "SSHFS (direct_io) read rate as a fraction of the link's payload rate: the seed's 8.2 MB/s "
    "over (taken as) 100 Mbit/s",
    "disk_rate": "a node's disk, reading shards and writing cache files",
    "hash_rate": "FNV-1a over the weights (llama-server at each load; the seeding helper)",
    "link_efficiency": "payload rate / line rate of a TCP link",
    "call_seconds": "RPC_CALL_SECONDS: what one RPC round trip costs on the hosts beyond the wire",
    "compute_factor": "RPC_COMPUTE_FACTOR: how much slower a worker reads its weights than an in-process backend",
}
LOOPBACK_RTT = 0.0001


def vms(count, gib):
    """``count`` VMs of ``gib`` GiB as node_memory_facts sees a Debian guest: MemTotal about 250 MiB under the RAM
    (the kernel's reservations), MemAvailable about 450 MiB under MemTotal (systemd, sshd, the worker)."""
    total = int(gib * GIB) - (250 << 20)
    return [
        {
            "name": f"node{i}",
            "endpoint": f"10.0.0.{i}:50052",
            "mem_available": total - (450 << 20),
            "mem_total": total,
            "state": "ready",
        }
        for i in range(1, count + 1)
    ]


def plan(summary, workers, strategy="all", ctx_size=SEED_CTX):
    return planner.plan(summary, planner.round_memory(workers), ctx_size, strategy=strategy, coordinator="node1")


def placement(model, result):
    """Per worker: bytes, bytes of tensors over the hash threshold and their count; the coordinator's CPU keeps the
    token embeddings."""
    owner = {}
    out_owner = None
    for row in result["workers"]:
        owner.update(dict.fromkeys(row["layers"], row["name"]))
        if row["output_layer"]:
            out_owner = row["name"]
    per = {row["name"]: {"bytes": 0, "hashed": 0, "offers": 0} for row in result["workers"]}
    for tensor in model["tensors"]:
        name = tensor["name"]
        if name.startswith("token_embd."):
            continue
        worker = owner[int(name.split(".")[1])] if name.startswith("blk.") else out_owner
        per[worker]["bytes"] += tensor["bytes"]
        if tensor["bytes"] > seed_gguf.mp.CACHE_THRESHOLD_BYTES:
            per[worker]["hashed"] += tensor["bytes"]
            per[worker]["offers"] += 1
    return per


def taken_by_hash(tensor):
    """Whether llama-server takes ``tensor`` by hash from the tensor hashes file (``--rpc-tensor-hashes``) after a
    seeding, without reading it: a weight over the cache's threshold bound for a worker (the token embedding stays on
    the coordinator's CPU)."""
    return not tensor["name"].startswith("token_embd.") and tensor["bytes"] > seed_gguf.mp.CACHE_THRESHOLD_BYTES


def read_with_hashes(model, shard_bytes):
    """(local, SSHFS) bytes llama-server still reads at a seeded load given the tensor hashes: every tensor it does not
    take by hash, from its shard (shards 1-COORDINATOR_SHARDS on its disk). The tensor table lists shard 1's tensors
    first, then shard 2's, ... (``read_model``), so a running sum of the shards' bytes tells each tensor's shard."""
    local = sshfs = seen = 0
    for tensor in model["tensors"]:
        on_disk = seen < sum(shard_bytes[:COORDINATOR_SHARDS])
        seen += tensor["bytes"]
        if taken_by_hash(tensor):
            continue
        if on_disk:
            local += tensor["bytes"]
        else:
            sshfs += tensor["bytes"]
    return local, sshfs


def figures(model, summary, result, shard_bytes, mbit, a):
    """Load times (cold, seeded, warm; seconds) and tokens/s of ``result`` over ``mbit`` links under assumptions
    ``a``."""
    link = mbit * 1e6 / 8 * a["link_efficiency"]
    per = placement(model, result)
    remote = [name for name in per if name != "node1"]
    common = {
        "local_bytes": sum(shard_bytes[:COORDINATOR_SHARDS]),
        "sshfs_bytes": sum(shard_bytes[COORDINATOR_SHARDS:]),
        "hashed_bytes": sum(p["hashed"] for p in per.values()),
        "offers": sum(p["offers"] for p in per.values()),
        "disk_rate": a["disk_rate"],
        "sshfs_rate": link * a["sshfs_fraction"],
        "hash_rate": a["hash_rate"],
        "link_rate": link,
        "rtt": a["rtt"],
    }
    cold = perf.load_seconds(sent_bytes=sum(per[n]["bytes"] for n in remote), **common)
    warm_sent = sum(per[n]["bytes"] - per[n]["hashed"] for n in remote)
    warm = perf.load_seconds(sent_bytes=warm_sent, **common)
    seed = perf.seed_seconds([p["hashed"] for p in per.values()], a["disk_rate"], a["hash_rate"])
    # With the tensor hashes: the seeded tensors offered by hash unread and unhashed, the rest read and sent as warm.
    local, sshfs = read_with_hashes(model, shard_bytes)
    unread = {**common, "local_bytes": local, "sshfs_bytes": sshfs, "hashed_bytes": 0}
    hashes = perf.load_seconds(sent_bytes=warm_sent, **unread)
    nodes = pass_nodes(per, link, a)
    vocab = next(t["dims"][1] for t in model["tensors"] if t["name"] == "output.weight")
    speed = perf.predict(
        nodes,
        "layer",
        activation_bytes=2 * summary["n_embd"] * 4,
        logits_bytes=vocab * 4,
        call_seconds=a["call_seconds"],
        compute_factor=a["compute_factor"],
    )
    return {
        "cold": cold,
        "warm": warm,
        "seed": seed,
        "seeded": seed + warm["total"],
        "hashes": hashes,
        "seeded_hashes": seed + hashes["total"],
        "tps": speed["tokens_per_second"],
        "speed": speed,
    }


#: Speculative decoding on paper: the acceptance rates shown (the probability that a drafted token is accepted when the
#: ones before it were), the draft lengths (``--spec-draft-n-max``; 3 is llama.cpp's default, 7 the longest whose greedy
#: output stays the model's on the bench lab, docs/development.md), and where the draft runs (the coordinator's CPU).
SPEC_ACCEPTANCE = (0.5, 0.7)
SPEC_DRAFT_MAX = (3, 5, 7)
DRAFT_PATH = "/var/lib/llamarpc/draft/qwen2.5-0.5b-instruct-q4_k_m.gguf"


def pass_nodes(per, link, a):
    """The performance model's nodes of a plan's ``placement``: each worker's weights at the assumed memory bandwidth,
    node1's own worker over loopback, the others ``a["rtt"]`` away over a link of ``link`` bytes/s."""
    return [
        {
            "name": name,
            "bytes": per[name]["bytes"],
            "bandwidth": a["memory_bandwidth"],
            "rtt": LOOPBACK_RTT if name == "node1" else a["rtt"],
            "throughput": None if name == "node1" else link,
        }
        for name in per
    ]


def draft_case():
    """The draft on paper (Qwen2.5-0.5B-Instruct Q4_K_M, ``seed_gguf.DRAFT_SHAPE``): its summary for the planner and
    the bytes it reads per drafted token (every weight: its output matrix is its embedding, read whole)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = seed_gguf.write(tmp, seed_gguf.DRAFT_PREFIX, split_max_size=0, shape=seed_gguf.DRAFT_SHAPE)
        model = gguf_header.read_model(out["files"][0]["path"])
    read = seed_gguf.mp.profile(model["tensors"], seed_gguf.DRAFT_PREFIX)["read_per_token_bytes"]
    return {"out": out, "summary": planner.summarize(model), "read_bytes": read}


def speculation(c=None, a=None):
    """Tokens/s of the seed's plan with the draft on node1's CPU (draft-simple), at each link, acceptance and draft
    length, next to the plain layer split; the plan that counts the draft's memory on node1."""
    c, a = c or case(), a or BASE
    draft = draft_case()
    spec = {"types": ["draft-simple"], "draft": draft["summary"], "draft_path": DRAFT_PATH}
    spec_plan = planner.plan(
        c["summary"], planner.round_memory(vms(6, 8)), SEED_CTX, strategy="all", coordinator="node1", speculative=spec
    )
    per = placement(c["model"], spec_plan)
    vocab = next(t["dims"][1] for t in c["model"]["tensors"] if t["name"] == "output.weight")
    terms = {
        "activation_bytes": 2 * c["summary"]["n_embd"] * 4,
        "logits_bytes": vocab * 4,
        "call_seconds": a["call_seconds"],
        "compute_factor": a["compute_factor"],
    }
    summary = c["summary"]
    share = perf.head_share(summary["output_bytes"], sum(summary["layer_bytes"]) + summary["output_bytes"])
    rows = []
    for mbit in LINKS_MBIT:
        nodes = pass_nodes(per, mbit * 1e6 / 8 * a["link_efficiency"], a)
        plain = perf.predict(nodes, "layer", **terms)["tokens_per_second"]
        for acceptance in SPEC_ACCEPTANCE:
            by_k = {}
            for k in SPEC_DRAFT_MAX:
                on_cpu = {"bytes": draft["read_bytes"], "bandwidth": a["memory_bandwidth"]}
                fast = perf.speculative(nodes, k, acceptance, on_cpu, share=share, **terms)
                by_k[k] = {"tokens_per_second": fast["tokens_per_second"], "tokens_per_pass": fast["tokens_per_pass"]}
            rows.append({"link_mbit": mbit, "acceptance": acceptance, "plain_tps": plain, "draft_max": by_k})
    return {"draft": draft, "plan": spec_plan, "rows": rows, "head_share": share, "slope": perf.verify_slope_for(share)}


def speculation_json(s=None):
    """The speculation table for the paper's JSON (``summary_json``)."""
    s = s or speculation()
    return {
        "draft": seed_gguf.DRAFT_SHAPE["name"],
        "draft_tensor_bytes": s["draft"]["out"]["tensor_bytes"],
        "draft_on": "node1's CPU",
        "head_share": s["head_share"],
        "verify_slope": s["slope"],
        "rows": [
            {
                "link_mbit": row["link_mbit"],
                "acceptance": row["acceptance"],
                "plain_tokens_per_second": row["plain_tps"],
                **{f"draft_max_{k}_tokens_per_second": v["tokens_per_second"] for k, v in row["draft_max"].items()},
            }
            for row in s["rows"]
        ],
    }


def speculation_lines(s=None):
    """The page's section on speculative decoding."""
    s = s or speculation()
    draft = s["draft"]["out"]
    draft_line = next(line for line in s["plan"]["table"] if line.startswith("draft model"))
    at = {(row["link_mbit"], row["acceptance"]): row for row in s["rows"]}
    default = SPEC_DRAFT_MAX[0]
    head = " | ".join(f"k = {k}" for k in SPEC_DRAFT_MAX)
    lines = [
        "",
        "## Speculative decoding",
        "",
        f"A draft for it: {seed_gguf.DRAFT_SHAPE['name']} (`tools/seed_gguf.py --draft`, headers only),",
        f"{draft['tensors']} tensors, {_gb(draft['tensor_bytes'])} of tensor data. Its 24 blocks are 896 wide, no "
        "multiple of 256,",
        "so llama.cpp's Q4_K_M gives most of its matrices the fallback types (Q5_0 for Q4_K,",
        "Q8_0 for Q6_K and for its embedding, which is also its output matrix). Its vocabulary is 151936 entries",
        "against the 32B's 152064: the same token list, within the 128 entries llama.cpp allows a draft. It runs on",
        "node1's CPU (`--spec-draft-device none`), where the planner counts it (the seed's plan, strategy all):",
        "",
        "```",
        draft_line,
        "```",
        "",
        "Tokens/s of the seed's plan, plain and with the draft at `k` drafted tokens per pass (`--spec-draft-n-max`),",
        "by the performance model: per pass the draft reads its weights `k + 1` times, the verification of `k + 1`",
        "tokens reads every weight once (each drafted token adds "
        f"{s['slope']:.3f} of a token's compute: {perf.VERIFY_BODY_SLOPE} for the layers' batch and",
        f"{perf.VERIFY_HEAD_SLOPE} x the output head's {s['head_share']:.1%} share of a token's bytes for its logits,"
        " both measured",
        "on this project's machines, not on the seed's) and pays each worker's round trip once, with the",
        "logits of every verified token back from the last worker; a pass yields `1 + a (1 - a^k) / (1 - a)` tokens",
        "at acceptance `a`.",
        "",
        f"| link | acceptance | plain | {head} |",
        "|---|---|---|" + "---|" * len(SPEC_DRAFT_MAX),
    ]
    for row in s["rows"]:
        cells = " | ".join(
            f"{row['draft_max'][k]['tokens_per_second']:.2f} ({row['draft_max'][k]['tokens_per_pass']:.2f}/pass)"
            for k in SPEC_DRAFT_MAX
        )
        lines.append(f"| {row['link_mbit']:g} Mbit/s | {row['acceptance']} | {row['plain_tps']:.2f} | {cells} |")
    lines += [
        f"| seed, measured | - | {MEASURED_TPS} | " + " | ".join("-" for _k in SPEC_DRAFT_MAX) + " |",
        "",
        f"With llama.cpp's default draft length (k = {default}), the seed's six nodes at 100 Mbit/s would give "
        f"{at[(100, 0.5)]['draft_max'][default]['tokens_per_second']:.2f} tokens/s",
        f"at acceptance 0.5 and {at[(100, 0.7)]['draft_max'][default]['tokens_per_second']:.2f} at 0.7 "
        f"({at[(1000, 0.5)]['draft_max'][default]['tokens_per_second']:.2f} and "
        f"{at[(1000, 0.7)]['draft_max'][default]['tokens_per_second']:.2f} at 1 Gbit/s), against the measured "
        f"{MEASURED_TPS} without.",
        "A pass reads the 19.4 GB of weights once for several tokens, which is the gain; what eats into it is the",
        "draft's own reads (0.39 GB per drafted token on node1), the logits of every verified token back over the",
        "last worker's link (608 KB each: what 1 Gbit/s gains over 100 Mbit/s), and the verification's compute,",
        f"which grows by {s['slope']:.3f} of a token's per drafted token: every longer draft gains less. The"
        " acceptance depends on",
        "the text (code and quoting accept more than free prose) and was never measured on the seed.",
    ]
    return lines


def _min(seconds):
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _gb(size):
    return f"{size / 1e9:.2f} GB"


def case():
    """The seed's model on paper and the planner's and performance model's figures for it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = seed_gguf.write(tmp)
        model = gguf_header.read_model(out["files"][0]["path"])
        shard_bytes = [
            sum(t["bytes"] for t in gguf_header.read_header(entry["path"])["tensors"]) for entry in out["files"]
        ]
    summary = planner.summarize(model)
    seed_plan = plan(summary, vms(6, 8))
    fewest = plan(summary, vms(6, 8), strategy="fewest")
    runs = {
        (label, mbit): figures(model, summary, result, shard_bytes, mbit, BASE)
        for label, result in (("seed", seed_plan), ("fewest", fewest))
        for mbit in LINKS_MBIT
    }
    return {"out": out, "model": model, "shard_bytes": shard_bytes, "summary": summary, "seed_plan": seed_plan,
            "fewest": fewest, "runs": runs}  # fmt: skip


def plan_label(label, fewest):
    return "seed (all 6)" if label == "seed" else f"fewest ({len(fewest['workers'])})"


def summary_json(c=None):
    """The load times and tokens/s of the page's table, for the benchmark report (``make bench``): each plan and
    link, and what the seed measured."""
    c = c or case()
    rows = [
        {
            "plan": plan_label(label, c["fewest"]),
            "link_mbit": mbit,
            "cold_s": run["cold"]["total"],
            "seeded_s": run["seeded"],
            "seeded_hashes_s": run["seeded_hashes"],
            "warm_s": run["warm"]["total"],
            "tokens_per_second": run["tps"],
        }
        for (label, mbit), run in c["runs"].items()
    ]
    return {
        "model": "Qwen2.5-32B-Instruct Q4_K_M",
        "rows": rows,
        "measured": {"load_minutes": MEASURED_LOAD_MIN, "tokens_per_second": MEASURED_TPS},
        "assumptions": {"memory_bandwidth_gb_per_s": BASE["memory_bandwidth"] / 1e9, "rtt_ms": BASE["rtt"] * 1000},
        "source": "docs/seed-on-paper.md (tools/seed_paper.py)",
        "speculation": speculation_json(speculation(c)),
    }


def build():
    """The page, as text."""
    c = case()
    out, model, shard_bytes, summary = c["out"], c["model"], c["shard_bytes"], c["summary"]
    seed_plan, fewest, runs = c["seed_plan"], c["fewest"], c["runs"]
    try:
        plan(summary, vms(5, 6), strategy="fewest")
        refusal = "(it fits)"
    except planner.PlanError as exc:
        refusal = str(exc)
    at4096 = plan(summary, vms(5, 6), strategy="fewest", ctx_size=4096)
    lines = [
        "# The seed at full scale, on paper",
        "",
        "<!-- Generated by tools/seed_paper.py from the collection's planner and performance model: do not edit. -->",
        "",
        "The seed served Qwen2.5-32B-Instruct Q4_K_M from six VMs of 8 GB: a first load of 48 minutes and 0.52",
        "tokens/s. This page replays that case with the collection's own code, on the model's real tensor table and",
        "no tensor data. Regenerate it with `python tools/seed_paper.py`.",
        "",
        "## The model on paper",
        "",
        f"`tools/seed_gguf.py` writes the headers of the five shards ({len(out['files'])} files of "
        f"{min(f['header_bytes'] for f in out['files']) // 1024}-{max(f['header_bytes'] for f in out['files']) // 1024}"
        f" KiB): {out['tensors']} tensors, **{out['tensor_bytes']:,} bytes** of tensor data "
        f"({out['tensor_bytes'] / 1e9:.2f} GB, {out['tensor_bytes'] / GIB:.2f} GiB), of which "
        + ", ".join(f"{kind} {_gb(size)}" for kind, size in sorted(out["types"].items()))
        + ". Shapes: 64 blocks, width 5120, FFN 27648, 40 heads, 8 KV heads, vocabulary 152064, untied output.",
        "The Q4_K/Q6_K mix is llama.cpp's rule for Q4_K_M (`src/llama-quant.cpp`, `llama_tensor_get_type_impl`, in",
        "the tree the collection pins): `output.weight` Q6_K; `attn_v` and `ffn_down` Q6_K in the 32 layers where",
        "`use_more_bits` holds (the first and last 8, and every third between), Q4_K elsewhere; every other matrix,",
        "`token_embd` included, Q4_K; norms and biases F32.",
        "Split at 4 GB like `llama-gguf-split --split-max-size 4G`: shards of "
        + ", ".join(_gb(size) for size in shard_bytes)
        + ".",
        "",
        "## The planner against it",
        "",
        f"Context: {SEED_CTX} tokens (llama-server's default `-c 0` is the model's trained context), one slot, f16 KV "
        f"cache ({summary['n_layer']} x {planner.human_bytes(seed_plan['kv_bytes_per_layer'])}); the role's headroom "
        "(512M) and worker overhead (128M); node1 coordinates and is a worker too. A VM of N GB is seen with MemTotal "
        "N GiB - 250 MiB and MemAvailable 450 MiB less.",
        "",
        f"Six 8 GB nodes, every node as the seed ran it (strategy all): fits, {len(seed_plan['workers'])} workers.",
        "",
        "```",
        *seed_plan["table"],
        "```",
        "",
        f"The same nodes planned with the fewest workers (the default): {len(fewest['workers'])} workers "
        f"(tensor split {fewest['tensor_split']}). No node holds the whole model, so fit first does not apply.",
        "",
        "Five 6 GB nodes: refused.",
        "",
        "```",
        refusal,
        "```",
        "",
        f"At the role's default context of 4096 tokens the KV cache is 1 GiB instead of 8 and the same five nodes "
        f"hold the model ({len(at4096['workers'])} workers, tensor split {at4096['tensor_split']}).",
        "",
        "## Load time and tokens/s",
        "",
        "Cold as today: llama-server reads shards 1-3 from its disk and 4-5 over SSHFS, hashes every weight tensor",
        "over 10 MiB and offers it by hash to the workers' empty caches, then sends every weight of the other",
        "nodes' layers over its own link (node1's own worker is loopback). Seeded: each worker first fills its cache",
        "from its own copy of the shards (in parallel), then llama-server loads as warm. Warm: the caches hold every",
        "tensor over 10 MiB; llama-server still reads and hashes every weight (SSHFS included) and sends the small",
        "ones (`attn_k`, `attn_v`, norms and biases: 2.9-4.3 MB each, under the cache's threshold). Seeded with",
        "tensor hashes: the seeding, then a load given the hashes it computed (`--rpc-tensor-hashes`, the `llama_cpp`",
        "role's patch): every seeded tensor is offered by hash without being read or hashed; llama-server reads only",
        "the token embedding (its own CPU's) and the tensors under the threshold, and sends those as warm.",
        "",
        "| plan | link | cold | seeded | seeded, tensor hashes | warm | tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for (label, mbit), run in runs.items():
        name = plan_label(label, fewest)
        lines.append(
            f"| {name} | {mbit:g} Mbit/s | {_min(run['cold']['total'])} | {_min(run['seeded'])} | "
            f"{_min(run['seeded_hashes'])} | {_min(run['warm']['total'])} | {run['tps']:.2f} |"
        )
    lines += [
        f"| seed, measured | (not recorded) | {MEASURED_LOAD_MIN} min | - | - | - | {MEASURED_TPS} |",
        "",
        "Where the time goes (seed's plan, seconds):",
        "",
        "| link | load | read local | read SSHFS | hash | offers | send | seeding |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mbit in LINKS_MBIT:
        run = runs[("seed", mbit)]
        for kind, label in (("cold", "cold"), ("warm", "warm"), ("hashes", "seeded, tensor hashes")):
            t = run[kind]
            seeding = f"{run['seed']:.0f} before a seeded load" if kind != "cold" else "-"
            lines.append(
                f"| {mbit:g} Mbit/s | {label} | {t['read_local']:.0f} | {t['read_sshfs']:.0f} | {t['hash']:.0f} | "
                f"{t['offer']:.1f} | {t['send']:.0f} | {seeding} |"
            )
    speed = runs[("seed", 100)]["speed"]
    lines += [
        "",
        f"Per token at 100 Mbit/s (seed's plan): compute {speed['compute_seconds'] * 1000:.0f} ms, RPC "
        f"{speed['network_seconds'] * 1000:.0f} ms ({perf.LAYER_ROUND_TRIPS} round trip(s) per worker, counted on the "
        "wire, the hidden state in and out, "
        "608 KB of f32 logits from the last worker).",
        "",
        "## Assumptions",
        "",
        "| assumption | value | what it is |",
        "|---|---|---|",
    ]
    for key, value in BASE.items():
        shown = SENSITIVITY[key][1](value) if key in SENSITIVITY else f"{value:g}"
        lines.append(f"| {key} | {shown} | {MEANING[key]} |")
    lines += [
        "",
        "Not modelled: the download of the shards, the workers' writes of cache files during a cold load (their",
        "disks outrun the link), CPU contention between reading, hashing and sending (taken as one after another).",
        "",
        "## Sensitivity",
        "",
        "Each assumption at a low and a high value, the others as above (seed's plan).",
        "",
        "| assumption | value | cold 100M | seeded 100M | warm 100M | tok/s 100M | cold 1G | seeded 1G | warm 1G "
        "| tok/s 1G |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, (values, show) in SENSITIVITY.items():
        for value in (values[0], BASE[key], values[1]):
            cells = []
            for mbit in LINKS_MBIT:
                run = figures(model, summary, seed_plan, shard_bytes, mbit, {**BASE, key: value})
                cells += [_min(run["cold"]["total"]), _min(run["seeded"]), _min(run["warm"]["total"])]
                cells.append(f"{run['tps']:.2f}")
            base = " (base)" if value == BASE[key] else ""
            lines.append(f"| {key} | {show(value)}{base} | " + " | ".join(cells) + " |")
    cold100, warm100, hashes100 = (runs[("seed", 100)][kind] for kind in ("cold", "warm", "hashes"))
    local_read, sshfs_read = read_with_hashes(model, shard_bytes)
    weighted = sum(row["weight_bytes"] for row in seed_plan["workers"])
    budget = 1 / MEASURED_TPS - speed["network_seconds"]
    need = speed["compute_seconds"] * BASE["memory_bandwidth"] / budget
    lines += [
        "",
        "## What follows",
        "",
        f"- The cold load at 100 Mbit/s comes to {_min(cold100['total'])} against the measured 48: sending the",
        f"  weights ({cold100['send']:.0f} s) and reading shards 4-5 over SSHFS ({cold100['read_sshfs']:.0f} s) are",
        "  nearly all of it.",
        "- Seeding removes the send, not the SSHFS read: llama-server reads and hashes every weight at each load, so",
        f"  in the seed's layout a warm or seeded load still spends {cold100['read_sshfs']:.0f} s reading shards",
        f"  4-5 over SSHFS (seeded/cold {runs[('seed', 100)]['seeded'] / cold100['total']:.2f}, warm/cold "
        f"{warm100['total'] / cold100['total']:.2f} at 100 Mbit/s). A seeded/cold ratio of 0.3 or less needs",
        "  the coordinator's shards on its own disk (or a faster path to them), not only seeded workers.",
        "- The tensor hashes remove the SSHFS read: given the hashes the seeding computed, llama-server reads "
        f"{sshfs_read / 1e6:.0f} MB",
        f"  of shards 4-5 ({sshfs_read / sum(shard_bytes[COORDINATOR_SHARDS:]):.1%} of them) and "
        f"{local_read / 1e6:.0f} MB of its own shards, hashes nothing, and the seeded load comes to",
        f"  {_min(runs[('seed', 100)]['seeded_hashes'])} at 100 Mbit/s ({hashes100['total']:.0f} s of load after "
        f"{runs[('seed', 100)]['seed']:.0f} s of seeding; seeded/cold "
        f"{runs[('seed', 100)]['seeded_hashes'] / cold100['total']:.2f}) and "
        f"{_min(runs[('seed', 1000)]['seeded_hashes'])} at 1 Gbit/s.",
        f"- Tokens/s is memory bandwidth: {_gb(weighted)} read per token, RPC "
        f"{speed['network_seconds'] / speed['seconds_per_token']:.0%} of a token at 100 Mbit/s. The seed's "
        f"{MEASURED_TPS} tokens/s is what {need / 1e9:.1f} GB/s per node gives with workers computing at the",
        f"  in-process rate (compute factor {BASE['compute_factor']:.2f}, measured on the bench lab with",
        "  llama-server's prompt cache off); the memory bandwidth of the seed's VMs was not recorded and is the least",
        "  certain figure here.",
    ]
    return "\n".join(lines + speculation_lines(speculation(c))) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--json", help="write the load times and tokens/s as JSON here instead of the page")
    args = parser.parse_args(argv)
    if args.json:
        Path(args.json).write_text(json.dumps(summary_json(), indent=1) + "\n", encoding="utf-8")
        return
    Path(args.out).write_text(build(), encoding="utf-8")


if __name__ == "__main__":
    main()
