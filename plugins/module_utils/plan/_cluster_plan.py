# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory-aware planner: which RPC workers hold the model's layers, and in what proportions.

Standard library only and no Ansible imports: the module ``llama_cluster_plan`` uses it on the coordinator, and the
coordinator's supervisor (installed by the ``llama_coordinator`` role) imports the same file to re-plan without a
worker that stays down.

The model (``summarize``): weight bytes per repeating layer and of the output layer, read from the GGUF header; the
token embeddings stay on the coordinator's CPU whatever the plan (llama.cpp never offloads the input layer).
KV cache per layer = cells x KV heads x (key width x bytes per key element + value width x bytes per value element),
cells = per-slot context x parallel slots, rounded up to 256 (llama.cpp pads the cache).

Layers go to devices exactly as llama.cpp does it with ``-ngl all`` (``src/llama-model.cpp``, ``load_tensors``):
normalised cumulative ``--tensor-split`` fractions; layer ``il`` of ``n_layer + 1`` slots (the last slot is the output
layer) goes to the first device whose cumulative fraction exceeds ``il / (n_layer + 1)`` (``std::upper_bound`` on
float32 values).

Workers: what each can hold is its MemAvailable (or its cgroup's remaining memory, whichever is smaller) minus a
headroom, minus a compute-buffer overhead; CPU workers report free == total over RPC, so that figure is never used.
Strategy ``fewest`` takes the smallest number of reachable workers, largest first, whose layers fit (whole
-layer slot counts in proportion to memory, moved from a short worker to a roomy one when needed)
(every extra worker is an extra network hop per token); ``all`` uses every reachable worker.

Fit first (strategy ``fewest``): when the coordinator's own memory is known (it is one of the workers, or the caller
gives its MemAvailable) and the whole model - every weight, the KV cache and a compute buffer - fits there with the
headroom, the plan is local (``local``: true, no worker, empty ``rpc``): llama-server computes on its own CPU, with no
RPC hop at all. A model that fits was measured 23.5% slower through one loopback worker (issue #22), 29.5% split in two
over 2.5 GbE (bc250, 8B). The module ``llama_cluster_plan`` and the llama_coordinator role plan fit first by default.

What llama-server is given for a plan is ``args`` (``plan_args``): ``--rpc``, ``--device``, ``--tensor-split`` and
``--n-gpu-layers all`` for workers; ``--device none --n-gpu-layers 0`` (the CPU only, no RPC) for a local plan. The
role's env file and the supervisor's override both write it as ``LLAMARPC_PLAN_ARGS``, which the unit expands
unbraced (systemd splits it into words).

Speculative decoding (``speculative``; ``check_speculative`` says what it holds): its arguments are part of
``args`` (``speculative_args``). The n-gram types draft from the text already seen and cost no memory. A draft model
(type ``draft-simple``) is placed on the coordinator and runs on its CPU (``--spec-draft-device none``) or on one
worker's RPC device: its weights, its KV cache (the target's cells: llama.cpp sizes the draft's context like the
target's, ``common_base_params_to_speculative``) and one compute buffer are counted into the memory of the host that
runs it (``draft_need``; on a worker its token embeddings still stay on the coordinator's CPU). A draft on a worker
puts that worker in every plan (no local plan then).
"""

from __future__ import annotations

import math
import struct

CELL_PAD = 256

# Bytes per element of the KV cache types llama-server accepts (--cache-type-k / --cache-type-v).
CACHE_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}

STRATEGIES = ("fewest", "all")

#: llama-server's arguments for a local plan: the CPU only, no RPC device, no layer offloaded (what the benchmark's
#: ``single`` configuration runs too).
LOCAL_ARGS = ("--device", "none", "--n-gpu-layers", "0")


#: ``--spec-type`` values the planner accepts (the pinned llama.cpp's ``common/arg.cpp`` has also draft-eagle3,
#: draft-mtp, draft-dflash and draft-dspark, which need a model's own sidecar heads the planner does not count).
SPEC_TYPES = ("draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
#: The type that runs a draft model.
DRAFT_TYPE = "draft-simple"
#: The draft's device when it runs on the coordinator's CPU.
DRAFT_ON_CPU = "cpu"
#: The types' own settings, passed as ``--spec-<name> <value>`` (the pinned llama-server's --help), with the kind of
#: their value and the range ``common/arg.cpp`` accepts (a value outside it stops llama-server at start, in a restart
#: loop). ``--draft-max``/``--draft-min`` were removed from this llama.cpp: ``draft-n-max``/``draft-n-min``.
SPEC_SETTINGS = {
    "draft-n-max": (int, 0, None),
    "draft-n-min": (int, 0, None),
    "draft-p-min": (float, 0.0, 1.0),
    "draft-p-split": (float, 0.0, 1.0),
    "draft-threads": (int, 1, None),
    "draft-type-k": (str, None, None),
    "draft-type-v": (str, None, None),
    "ngram-mod-n-match": (int, 1, 1024),
    "ngram-mod-n-min": (int, 0, 1024),
    "ngram-mod-n-max": (int, 0, 1024),
    "ngram-simple-size-n": (int, 1, 1024),
    "ngram-simple-size-m": (int, 1, 1024),
    "ngram-simple-min-hits": (int, 1, None),
    "ngram-map-k-size-n": (int, 1, 1024),
    "ngram-map-k-size-m": (int, 1, 1024),
    "ngram-map-k-min-hits": (int, 1, None),
    "ngram-map-k4v-size-n": (int, 1, 1024),
    "ngram-map-k4v-size-m": (int, 1, 1024),
    "ngram-map-k4v-min-hits": (int, 1, None),
}
#: llama.cpp's own values of the settings the performance model reads (common/common.h).
SPEC_DEFAULTS = {
    "draft-n-max": 3,
    "draft-n-min": 0,
    "ngram-mod-n-min": 48,
    "ngram-mod-n-max": 64,
    "ngram-simple-size-m": 48,
    "ngram-map-k-size-m": 48,
    "ngram-map-k4v-size-m": 48,
}


class PlanError(Exception):
    """The request cannot be planned; the message says what to do."""


def human_bytes(value):
    """1536 -> '1.5 KiB' (binary units, one decimal)."""
    value = float(value)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    return f"{sign}{value:.1f} TiB"  # pragma: no cover


def _first(value):
    """A per-layer array in the metadata (some architectures) counts by its largest entry."""
    if isinstance(value, list):
        return max(value) if value else 0
    return value


def summarize(model):
    """What the planner needs from ``_gguf_header.read_model``'s result: a small JSON-able dict."""
    metadata = model["metadata"]
    arch = metadata.get("general.architecture")
    if not arch:
        raise PlanError("the GGUF metadata has no general.architecture")

    def key(name, default=None):
        value = metadata.get(f"{arch}.{name}", default)
        if value is None:
            raise PlanError(f"the GGUF metadata has no {arch}.{name}")
        return _first(value)

    n_layer = int(key("block_count"))
    n_embd = int(key("embedding_length"))
    n_head = int(key("attention.head_count"))
    n_head_kv = int(key("attention.head_count_kv", n_head))
    head_k = int(key("attention.key_length", n_embd // max(n_head, 1)))
    head_v = int(key("attention.value_length", n_embd // max(n_head, 1)))
    layers = [0] * n_layer
    output = 0
    embedding = 0
    tied = is_tied(model["tensors"])
    for tensor in model["tensors"]:
        if tensor["name"].startswith("token_embd."):
            embedding += tensor["bytes"]
        slot = tensor_slot(tensor["name"], n_layer, tied)
        if slot is None:
            continue
        if slot < n_layer:
            layers[slot] += tensor["bytes"]
        else:
            output += tensor["bytes"]
    return {
        "architecture": arch,
        "name": metadata.get("general.name", ""),
        "n_layer": n_layer,
        "n_embd": n_embd,
        "n_head": n_head,
        "n_head_kv": n_head_kv,
        "head_k": head_k,
        "head_v": head_v,
        "n_ctx_train": int(_first(metadata.get(f"{arch}.context_length", 0)) or 0),
        "layer_bytes": layers,
        "output_bytes": output,
        "embedding_bytes": embedding,
        "weight_bytes": sum(layers) + output + embedding,
    }


def is_tied(tensors):
    """True when the model has no ``output.weight``: its output matrix is the token embedding."""
    return not any(tensor["name"] == "output.weight" for tensor in tensors)


def tensor_slot(name, n_layer, tied):
    """The layer slot whose device holds tensor ``name`` (``n_layer``: the output layer), or None for the input layer,
    which stays on the coordinator's CPU. Tied embeddings: llama.cpp duplicates token_embd (TENSOR_DUPLICATED) as the
    output matrix on the output layer's device, so its bytes go there too."""
    if name.startswith("blk."):
        index = int(name.split(".")[1])
        if index >= n_layer:
            raise PlanError(f"tensor {name} names a layer beyond block_count {n_layer}")
        return index
    if name.startswith("token_embd."):
        return n_layer if tied else None
    return n_layer


def kv_cells(ctx_size, parallel):
    """Cells of the KV cache for ``parallel`` slots of ``ctx_size`` tokens each (the value passed as ``-c``)."""
    if ctx_size <= 0:
        raise PlanError(f"the context size must be a positive number of tokens, not {ctx_size}")
    if parallel <= 0:
        raise PlanError(f"the number of parallel slots must be at least 1, not {parallel}")
    return ctx_size * parallel


def kv_bytes_per_layer(summary, ctx_size, parallel, cache_type_k="f16", cache_type_v="f16"):
    """Bytes of KV cache one repeating layer holds."""
    for kind in (cache_type_k, cache_type_v):
        if kind not in CACHE_TYPE_BYTES:
            raise PlanError(f"unknown KV cache type {kind!r}; choose one of {', '.join(sorted(CACHE_TYPE_BYTES))}")
    cells = math.ceil(kv_cells(ctx_size, parallel) / CELL_PAD) * CELL_PAD
    per_cell = summary["n_head_kv"] * (
        summary["head_k"] * CACHE_TYPE_BYTES[cache_type_k] + summary["head_v"] * CACHE_TYPE_BYTES[cache_type_v]
    )
    return int(math.ceil(cells * per_cell))


def _f32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def assign_layers(n_layer, split):
    """Device index of each of the ``n_layer + 1`` slots (last = output layer), as llama.cpp assigns them."""
    total = 0.0
    cumulative = []
    for value in split:
        total = _f32(total + _f32(value))
        cumulative.append(total)
    if total <= 0:
        raise PlanError("a tensor split needs at least one positive proportion")
    cumulative = [_f32(value / total) for value in cumulative]
    slots = n_layer + 1
    devices = []
    for il in range(slots):
        ratio = _f32(il / slots)
        device = next((index for index, value in enumerate(cumulative) if value > ratio), len(cumulative) - 1)
        devices.append(min(device, len(cumulative) - 1))
    return devices


def slot_counts(capacities, slots):
    """Split ``slots`` whole layer slots in proportion to ``capacities`` (largest remainder), at least one each."""
    total = sum(capacities)
    exact = [capacity * slots / total for capacity in capacities]
    counts = [max(int(value), 1) for value in exact]
    order = sorted(range(len(exact)), key=lambda index: (-(exact[index] - int(exact[index])), index))
    for index in order:
        if sum(counts) >= slots:
            break
        counts[index] += 1
    while sum(counts) > slots:
        largest = max(range(len(counts)), key=lambda index: (counts[index], -index))
        counts[largest] -= 1
    return counts


def _balance(summary, kv_layer, workers, overhead):
    """Whole-layer slot counts per worker that fit, if any: proportional first, then slots moved from a worker
    that is short to the one with the most headroom while that helps."""
    slots = summary["n_layer"] + 1
    if len(workers) > slots:
        return None, None
    counts = slot_counts([worker["capacity"] for worker in workers], slots)
    for _attempt in range(slots * len(workers)):
        rows = predict(summary, kv_layer, workers, counts, overhead)
        short = [index for index, row in enumerate(rows) if row["headroom"] < 0]
        if not short:
            return counts, rows
        worst = min(short, key=lambda index: rows[index]["headroom"])
        spare = max(range(len(rows)), key=lambda index: (rows[index]["headroom"], -index))
        if (
            spare == worst
            or counts[worst] <= 1
            or rows[spare]["headroom"] < max(summary["layer_bytes"] + [0]) + kv_layer
        ):
            return None, rows
        counts[worst] -= 1
        counts[spare] += 1
    return None, rows  # pragma: no cover - the moves above always end sooner


def predict(summary, kv_layer, workers, split, overhead):
    """Bytes each worker would hold under ``split``: weights and KV cache of its layers, plus the overhead."""
    slots = assign_layers(summary["n_layer"], split)
    rows = []
    for index, worker in enumerate(workers):
        layers = [il for il, device in enumerate(slots) if device == index]
        repeating = [il for il in layers if il < summary["n_layer"]]
        weights = sum(summary["layer_bytes"][il] for il in repeating)
        if summary["n_layer"] in layers:
            weights += summary["output_bytes"]
        kv = kv_layer * len(repeating)
        rows.append(
            {
                "name": worker["name"],
                "endpoint": worker["endpoint"],
                "layers": repeating,
                "output_layer": summary["n_layer"] in layers,
                "weight_bytes": weights,
                "kv_bytes": kv,
                "bytes": weights + kv + overhead,
                "capacity": worker["capacity"],
                "headroom": worker["capacity"] - (weights + kv + overhead),
            }
        )
    return rows


# What rpc_endpoint_facts reports for an endpoint nothing listens on yet (in check mode: a worker this run would start,
# or whose mesh address it would bring up).
NOT_STARTED = ("refused", "timeout", "unreachable")


def candidates(names, endpoints, memory, probe, serving=(), all_ready=False, check_mode=False):
    """The planner's input, one entry per worker (``names`` and ``endpoints`` in step): its ``state`` (``unreachable
    over SSH`` when ``memory`` has no figure for it; ``ready`` when it serves llama-server now (``serving``), when
    every worker counts (``all_ready``: the plan-only run), or in ``check_mode`` when nothing answers for it yet; else
    what ``probe`` (rpc_endpoint_facts' ``rpc_endpoints``) says), its memory and the probe's connect time."""
    probed = {entry.get("endpoint"): entry for entry in probe or ()}
    workers = []
    for name, endpoint in zip(names, endpoints, strict=True):
        figures = memory.get(name)
        answer = probed.get(endpoint, {})
        if figures is None:
            state = "unreachable over SSH"
        elif endpoint in serving or all_ready or (check_mode and answer.get("state") in NOT_STARTED):
            state = "ready"
        else:
            state = answer.get("state", "not probed")
        workers.append(
            {
                "name": name,
                "endpoint": endpoint,
                "state": state,
                "mem_available": (figures or {}).get("available", 0),
                "mem_total": (figures or {}).get("total", 0),
                "rtt_ms": answer.get("connect_rtt_ms"),
            }
        )
    return workers


def round_memory(workers, fraction=16):
    """Workers with ``mem_available`` rounded down to 1/``fraction`` of their ``mem_total`` (when given), so that
    a rerun does not re-plan, and restart llama-server, on memory noise. ``mem_total`` is dropped."""
    rounded = []
    for worker in workers:
        entry = {key: value for key, value in worker.items() if key != "mem_total"}
        total = int(worker.get("mem_total") or 0)
        if total > 0 and entry.get("mem_available") is not None:
            quantum = max(total // fraction, 1)
            entry["mem_available"] = int(entry["mem_available"]) // quantum * quantum
        rounded.append(entry)
    return rounded


def worker_capacity(worker, headroom, coordinator=None, coordinator_bytes=0):
    """Bytes a worker can give the model: its available memory minus the headroom (and llama-server's own share
    when the worker runs on the coordinator's host)."""
    available = worker.get("mem_available")
    if available is None:
        raise PlanError(f"worker {worker.get('name')}: no memory figure (mem_available) was gathered")
    capacity = int(available) - int(headroom)
    if coordinator is not None and worker.get("name") == coordinator:
        capacity -= int(coordinator_bytes)
    return capacity


def plan_args(rpc, devices, tensor_split):
    """llama-server's plan-dependent arguments as one line of words (no quoting needed: endpoints, device names and
    numbers): the workers' ``--rpc``, ``--device``, ``--tensor-split`` and ``--n-gpu-layers all``, or, without
    workers (a local plan), ``LOCAL_ARGS``."""
    if not rpc:
        return " ".join(LOCAL_ARGS)
    return f"--rpc {rpc} --device {devices} --tensor-split {tensor_split} --n-gpu-layers all"


def _setting(name, value):
    """A setting's value as its kind, within its range (``SPEC_SETTINGS``), or PlanError."""
    kind, low, high = SPEC_SETTINGS[name]
    if isinstance(value, bool):
        raise PlanError(f"speculative setting {name} takes a {kind.__name__}, not {value!r}")
    try:
        typed = kind(value)
    except (TypeError, ValueError):
        raise PlanError(f"speculative setting {name} takes a {kind.__name__}, not {value!r}") from None
    if kind is str:
        if typed not in CACHE_TYPE_BYTES:
            raise PlanError(f"speculative setting {name}: unknown KV cache type {typed!r}")
    elif typed < low or (high is not None and typed > high):
        bounds = f"from {low} to {high}" if high is not None else f"{low} or more"
        raise PlanError(f"speculative setting {name} must be {bounds} (llama-server refuses it), got {typed}")
    return typed


def check_speculative(spec):
    """The speculative decoding request in its normal form, or None when it is off (no type).

    ``spec``: ``types`` (``--spec-type``, a list of SPEC_TYPES), ``settings`` (``SPEC_SETTINGS`` name -> value), and for
    the type ``draft-simple`` the draft model: ``draft`` (its ``summarize`` summary), ``draft_path`` (where
    llama-server finds it on the coordinator) and ``draft_device`` (DRAFT_ON_CPU, or the name of the worker whose RPC
    device runs it). Raises PlanError with what to change."""
    if not spec or not spec.get("types"):
        if spec and (spec.get("draft") or spec.get("draft_path")):
            raise PlanError(f"a draft model is given but no speculative type: add {DRAFT_TYPE}, or remove the draft")
        return None
    types = []
    for kind in spec["types"]:
        if kind not in SPEC_TYPES:
            raise PlanError(f"unknown speculative type {kind!r}; choose among {', '.join(SPEC_TYPES)}")
        if kind not in types:
            types.append(kind)
    draft, path = spec.get("draft") or None, str(spec.get("draft_path") or "")
    if DRAFT_TYPE in types and not (draft and path):
        raise PlanError(f"the speculative type {DRAFT_TYPE} needs a draft model (its path and its GGUF header)")
    if DRAFT_TYPE not in types and (draft or path):
        raise PlanError(
            f"a draft model is given but the speculative types ({', '.join(types)}) do not use it: add "
            f"{DRAFT_TYPE}, or remove the draft"
        )
    if path and (path.split() != [path] or not path.startswith("/")):
        raise PlanError(
            f"the draft's path must be absolute and without white space (llama-server's arguments are "
            f"split into words): {path!r}"
        )
    settings = {}
    for name, value in sorted((spec.get("settings") or {}).items()):
        if name not in SPEC_SETTINGS:
            raise PlanError(f"unknown speculative setting {name!r}; choose among {', '.join(sorted(SPEC_SETTINGS))}")
        settings[name] = _setting(name, value)
    for low, high in (("draft-n-min", "draft-n-max"), ("ngram-mod-n-min", "ngram-mod-n-max")):
        least = settings.get(low, SPEC_DEFAULTS[low])
        most = settings.get(high, SPEC_DEFAULTS[high])
        if least > most:
            raise PlanError(f"speculative setting {low} ({least}) is more than {high} ({most})")
    device = str(spec.get("draft_device") or DRAFT_ON_CPU) if draft else None
    return {"types": types, "settings": settings, "draft": draft, "draft_path": path, "draft_device": device}


def draft_need(spec, ctx_size, parallel, overhead):
    """Bytes the draft model takes: ``{"weights", "kv", "device", "coordinator"}`` - ``device``: on the worker that
    runs it (its layers and output, its KV cache, one compute buffer; 0 on the coordinator's CPU), ``coordinator``: on
    the coordinator's host (the whole draft on its CPU, else its token embeddings, which llama.cpp keeps on the CPU).
    The draft's context is the target's (``-c`` and ``-np``), its cache types the ``draft-type-k``/``-v`` settings
    (llama.cpp's default f16). All zero without a draft (n-gram types)."""
    draft = (spec or {}).get("draft")
    if not draft:
        return {"weights": 0, "kv": 0, "device": 0, "coordinator": 0}
    settings = spec.get("settings") or {}
    per_layer = kv_bytes_per_layer(
        draft, ctx_size, parallel, settings.get("draft-type-k", "f16"), settings.get("draft-type-v", "f16")
    )
    kv = per_layer * int(draft["n_layer"])
    weights = int(draft["weight_bytes"])
    if spec.get("draft_device", DRAFT_ON_CPU) == DRAFT_ON_CPU:
        return {"weights": weights, "kv": kv, "device": 0, "coordinator": weights + kv + overhead}
    on_device = sum(draft["layer_bytes"]) + int(draft["output_bytes"]) + kv + overhead
    return {"weights": weights, "kv": kv, "device": on_device, "coordinator": int(draft["embedding_bytes"])}


def _value(value):
    return f"{value:g}" if isinstance(value, float) else str(value)


def speculative_args(spec, device):
    """llama-server's speculative arguments as words: ``--spec-type``, the draft (``--spec-draft-model``, on
    ``device``: ``none`` for the coordinator's CPU or an ``RPCn`` device with all its layers), each setting as
    ``--spec-<name> <value>``. Empty without speculation."""
    if not spec:
        return []
    words = ["--spec-type", ",".join(spec["types"])]
    if spec.get("draft"):
        words += ["--spec-draft-model", spec["draft_path"], "--spec-draft-device", device]
        if device != "none":
            words += ["--spec-draft-ngl", "all"]
    for name, value in sorted(spec["settings"].items()):
        words += [f"--spec-{name}", _value(value)]
    return words


def _speculative_plan(spec, device, host, need):
    """What the plan says of its speculation (None without): the types, settings, where the draft runs (``device``:
    ``none`` or ``RPCn``; ``host``) with its bytes there, and every flag its arguments use (for the binary's check)."""
    if not spec:
        return None
    words = speculative_args(spec, device)
    return {
        "types": list(spec["types"]),
        "settings": dict(spec["settings"]),
        "draft": bool(spec.get("draft")),
        "draft_path": spec.get("draft_path", ""),
        "draft_device": device if spec.get("draft") else "",
        "draft_host": host if spec.get("draft") else "",
        "draft_weight_bytes": need["weights"],
        "draft_kv_bytes": need["kv"],
        "draft_bytes": need["device"] or need["coordinator"],
        "flags": sorted({word for word in words if word.startswith("--")}),
    }


def _draft_line(speculative):
    """The plan table's line for the draft model, or None."""
    if not speculative or not speculative["draft"]:
        return None
    where = "CPU" if speculative["draft_device"] == "none" else speculative["draft_device"]
    weights, kv = human_bytes(speculative["draft_weight_bytes"]), human_bytes(speculative["draft_kv_bytes"])
    there = human_bytes(speculative["draft_bytes"])
    return f"draft model on {speculative['draft_host']} ({where}): weights {weights}, kv cache {kv}, {there} there"


def describe(plan):
    """One line for a person: where the plan serves the model."""
    if not plan.get("rpc"):
        return "local: llama-server computes the whole model on the coordinator's CPU, no RPC worker (fit first)"
    return f"--rpc {plan['rpc']} --tensor-split {plan['tensor_split']}"


def local_need(summary, kv_layer, overhead):
    """Bytes llama-server needs to serve the whole model on its own host: every weight (tied embeddings counted twice,
    as ``summarize`` counts them: a little too much, never too little), the KV cache of every layer, one compute
    buffer."""
    return summary["weight_bytes"] + kv_layer * summary["n_layer"] + overhead


def coordinator_memory(workers, coordinator, available=None):
    """MemAvailable of the coordinator's host: ``available`` when given, else the figure of the worker that shares
    its host (whatever that worker's RPC state: the memory is the host's), else None (unknown: no local plan)."""
    if available is not None:
        return int(available)
    for worker in workers:
        if coordinator is not None and worker.get("name") == coordinator and worker.get("mem_available"):
            return int(worker["mem_available"])
    return None


def _local_plan(
    summary, kv_layer, ctx_size, parallel, strategy, coordinator, available, headroom, need, kept, spec, draft
):
    """The plan that serves the model on the coordinator alone; ``need``: its bytes there (``local_need``, the prompt
    cache and ``draft``, the ``draft_need`` of the speculation ``spec``, on its CPU)."""
    row = {
        "name": coordinator or "coordinator",
        "endpoint": "local",
        "layers": list(range(summary["n_layer"])),
        "output_layer": True,
        "weight_bytes": summary["weight_bytes"],
        "kv_bytes": kv_layer * summary["n_layer"],
        "bytes": need,
        "capacity": available - headroom,
        "headroom": available - headroom - need,
        "share": 1.0,
    }
    result = {
        "strategy": strategy,
        "ctx_size": ctx_size,
        "parallel": parallel,
        "kv_bytes_per_layer": kv_layer,
        "need_bytes": need,
        "coordinator_bytes": need,
        "local": True,
        "workers": [],
        "excluded": [],
        "kept": kept,
        "rpc": "",
        "devices": "none",
        "tensor_split": "",
        "args": plan_args("", "none", ""),
        "table": table([row]),
    }
    return _with_speculation(result, spec, "none", coordinator or "coordinator", draft)


def _with_speculation(result, spec, device, host, need):
    """``result`` with its speculation ``spec`` (the draft on ``device`` of ``host``, taking ``need`` there): the
    arguments appended to ``args``, ``speculative`` and the draft's line in the table. Unchanged without speculation."""
    if not spec:
        return result
    result["speculative"] = _speculative_plan(spec, device, host, need)
    result["args"] = " ".join([result["args"], *speculative_args(spec, device)])
    line = _draft_line(result["speculative"])
    if line:
        result["table"] = [*result["table"], line]
    return result


def plan(
    summary,
    workers,
    ctx_size,
    parallel=1,
    cache_type_k="f16",
    cache_type_v="f16",
    headroom=512 << 20,
    overhead=128 << 20,
    strategy="fewest",
    coordinator=None,
    keep=None,
    fit_first=False,
    coordinator_available=None,
    cache_ram=0,
    speculative=None,
):
    """Plan the cluster.  ``workers``: dicts with name, endpoint, mem_available (bytes) and state (``ready`` to be
    usable), in inventory order.  Returns the plan dict; raises PlanError with an actionable message.

    ``keep``: the plan in force (``rpc`` and ``tensor_split`` as a plan returns them). It is returned again, with
    today's memory figures, when it uses as many workers as a new plan would, all of them usable, and every one of
    them still fits: memory that moves between runs (on a shared machine, by gigabytes) never re-plans, and so
    never restarts llama-server, while a worker that left or came back, or one that no longer fits, does.

    ``fit_first`` (strategy ``fewest`` only): a local plan when the model fits on the coordinator (see the module
    docstring). Off unless asked here; the module llama_cluster_plan asks by default.
    ``coordinator_available``: the coordinator host's MemAvailable when no worker shares its host.
    ``cache_ram``: bytes of llama-server's prompt cache (``--cache-ram``), kept in the coordinator host's memory: a
    local plan needs them, and a worker on that host gives them up.
    ``speculative``: speculative decoding (``check_speculative``); a draft model's bytes count on the host that runs it
    (``draft_need``), and a draft on a worker puts that worker in the plan."""
    if strategy not in STRATEGIES:
        raise PlanError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    names = [worker["name"] for worker in workers]
    if len(set(names)) != len(names):
        raise PlanError(f"a worker is listed twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    kv_layer = kv_bytes_per_layer(summary, ctx_size, parallel, cache_type_k, cache_type_v)
    spec = check_speculative(speculative)
    on_worker = spec["draft_device"] if spec and spec["draft"] and spec["draft_device"] != DRAFT_ON_CPU else None
    if on_worker is not None and on_worker not in names:
        raise PlanError(
            f"the draft model's device {on_worker!r} is no worker ({', '.join(names) or 'none'}): name a "
            f"worker, or {DRAFT_ON_CPU} for the coordinator's CPU"
        )
    draft = draft_need(spec, ctx_size, parallel, overhead)
    available = coordinator_memory(workers, coordinator, coordinator_available) if fit_first else None
    local = local_need(summary, kv_layer, overhead) + int(cache_ram) + draft["coordinator"]
    if strategy == "fewest" and on_worker is None and available is not None and local <= available - int(headroom):
        kept = bool(keep) and bool(keep.get("local"))
        return _local_plan(
            summary,
            kv_layer,
            ctx_size,
            parallel,
            strategy,
            coordinator,
            available,
            int(headroom),
            local,
            kept,
            spec,
            draft,
        )
    if not workers:
        raise PlanError("no RPC workers: put at least one host in the rpc_workers group")
    # llama-server itself keeps the token embeddings, a compute buffer and its prompt cache on the coordinator's CPU
    # (and the draft model, or its token embeddings when a worker runs it).
    coordinator_bytes = summary["embedding_bytes"] + overhead + int(cache_ram) + draft["coordinator"]
    # A draft's bytes on the coordinator must fit there; without one this stays as it was (not checked), so that a
    # plan without speculation is unchanged. A coordinator that is a worker gives them up from its capacity below.
    if draft["coordinator"] and coordinator not in names:
        room = coordinator_memory(workers, coordinator, coordinator_available)
        if room is not None and coordinator_bytes > room - int(headroom):
            raise PlanError(
                f"the coordinator cannot hold the draft model: llama-server needs {human_bytes(coordinator_bytes)} "
                f"there with it (the draft {human_bytes(draft['coordinator'])}), and {human_bytes(room)} is available "
                f"less {human_bytes(int(headroom))} of headroom: run the draft on a worker, or use a smaller draft"
            )
    usable, excluded = [], []
    for worker in workers:
        if worker.get("state", "ready") != "ready":
            excluded.append({"name": worker["name"], "reason": f"not reachable ({worker.get('state')})"})
            continue
        entry = dict(worker)
        entry["capacity"] = worker_capacity(worker, headroom, coordinator, coordinator_bytes)
        if worker["name"] == on_worker:
            entry["capacity"] -= draft["device"]
        if entry["capacity"] <= overhead:
            excluded.append(
                {"name": worker["name"], "reason": f"only {human_bytes(entry['capacity'])} free after the headroom"}
            )
            continue
        usable.append(entry)
    need_total = sum(summary["layer_bytes"]) + summary["output_bytes"] + kv_layer * summary["n_layer"]
    if not usable:
        raise PlanError(
            f"no usable RPC worker ({'; '.join(e['name'] + ': ' + e['reason'] for e in excluded)}); "
            f"the model needs {human_bytes(need_total)} on the workers"
        )
    if on_worker is not None and on_worker not in {worker["name"] for worker in usable}:
        why = next((entry["reason"] for entry in excluded if entry["name"] == on_worker), "")
        raise PlanError(
            f"the draft model's worker {on_worker} is not usable ({why}; the draft needs "
            f"{human_bytes(draft['device'])} there): name another worker, or {DRAFT_ON_CPU}"
        )
    # Largest first; the draft's worker, when there is one, is in every plan.
    by_size = sorted(
        usable, key=lambda worker: (worker["name"] != on_worker, -worker["capacity"], names.index(worker["name"]))
    )
    counts = range(1, len(by_size) + 1) if strategy == "fewest" else [len(by_size)]
    for count in counts:
        chosen = sorted(by_size[:count], key=lambda worker: names.index(worker["name"]))
        split, rows = _balance(summary, kv_layer, chosen, overhead)
        if split is not None:
            kept = _kept(keep, usable, count, summary, kv_layer, overhead, on_worker)
            if kept:
                split, rows = kept
            total = sum(row["bytes"] for row in rows)
            for row, slots_of_row in zip(rows, split, strict=True):
                row["share"] = slots_of_row / sum(split)
            rpc = ",".join(row["endpoint"] for row in rows)
            devices = ",".join(f"RPC{index}" for index in range(len(rows)))
            tensor_split = ",".join(str(count) for count in split)
            for row in rows:
                if row["name"] == on_worker:
                    row["draft_bytes"] = draft["device"]
            index = next((i for i, row in enumerate(rows) if row["name"] == on_worker), None)
            result = {
                "strategy": strategy,
                "ctx_size": ctx_size,
                "parallel": parallel,
                "kv_bytes_per_layer": kv_layer,
                "need_bytes": total,
                "coordinator_bytes": coordinator_bytes,
                "workers": rows,
                "excluded": excluded,
                "kept": bool(kept),
                "local": False,
                "rpc": rpc,
                "devices": devices,
                "tensor_split": tensor_split,
                "args": plan_args(rpc, devices, tensor_split),
                "table": table(rows),
            }
            device = "none" if index is None else f"RPC{index}"
            return _with_speculation(result, spec, device, on_worker or coordinator or "coordinator", draft)
    capacity = sum(worker["capacity"] for worker in usable)
    missing = need_total + overhead * len(usable) - capacity
    detail = "; ".join(f"{w['name']} can hold {human_bytes(w['capacity'])}" for w in by_size)
    if missing <= 0:
        # Enough in total, but the layer granularity leaves one worker short: say which.
        rows = _balance(summary, kv_layer, by_size, overhead)[1] or []
        short = min(rows, key=lambda row: row["headroom"]) if rows else {"name": by_size[0]["name"], "headroom": 0}
        missing = -short["headroom"]
        where = f"{short['name']} would be {human_bytes(missing)} short with whole layers"
    else:
        where = f"{len(usable)} reachable worker(s) offer {human_bytes(capacity)} ({detail})"
    raise PlanError(
        f"the model does not fit: it needs {human_bytes(missing)} more "
        f"({human_bytes(need_total)} of weights and KV cache for ctx_size {ctx_size} x parallel {parallel}, "
        f"plus {human_bytes(overhead)} per worker; {where}). "
        "Add a node, lower the context size or parallel slots, or choose a smaller quantisation."
    )


def _kept(keep, usable, count, summary, kv_layer, overhead, required=None):
    """(split, rows) of the plan in force when it can stay (see ``plan``; it holds the worker ``required``, the
    draft's, when there is one), else None."""
    if not keep or not keep.get("rpc") or not keep.get("tensor_split"):
        return None
    endpoints = str(keep["rpc"]).split(",")
    if required is not None and not any(w["name"] == required and w["endpoint"] in endpoints for w in usable):
        return None
    try:
        split = [int(value) for value in str(keep["tensor_split"]).split(",")]
    except ValueError:
        return None
    by_endpoint = {worker["endpoint"]: worker for worker in usable}
    if len(endpoints) != count or len(split) != count or not all(e in by_endpoint for e in endpoints):
        return None
    if min(split) < 1 or sum(split) != summary["n_layer"] + 1:  # another model: plan anew
        return None
    rows = predict(summary, kv_layer, [by_endpoint[e] for e in endpoints], split, overhead)
    return (split, rows) if all(row["headroom"] >= 0 for row in rows) else None


def table(rows):
    """The plan as text lines: node, endpoint, layers, bytes, share, predicted headroom."""
    header = ("node", "endpoint", "layers", "weights", "kv cache", "total", "share", "headroom")
    lines = [header]
    for row in rows:
        layers = row["layers"]
        span = f"{layers[0]}-{layers[-1]}" if layers else "-"
        if row["output_layer"]:
            span += "+out"
        lines.append(
            (
                row["name"],
                row["endpoint"],
                span,
                human_bytes(row["weight_bytes"]),
                human_bytes(row["kv_bytes"]),
                human_bytes(row["bytes"]),
                f"{row.get('share', 0):.2%}",
                human_bytes(row["headroom"]),
            )
        )
    widths = [max(len(str(line[column])) for line in lines) for column in range(len(header))]
    return [
        "  ".join(str(value).ljust(width) for value, width in zip(line, widths, strict=True)).rstrip() for line in lines
    ]
