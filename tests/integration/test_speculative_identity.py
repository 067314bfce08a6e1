"""Speculative decoding changes how fast tokens come, never which (issue #36): on the real model, greedy token ids with
n-gram speculation and with a draft model are the ids without speculation.

Gemma 3 270M Q4_K_M (fetched by package name), one llama-server at a time on loopback (and one ggml-rpc-server for
the cluster's run), every speculative command line built by the collection's planner (``_cluster_plan.plan``: what the
coordinator's unit is given). The drafts: the model's first blocks cut by ``tools/draft_gguf.py`` (the lab's draft)
and the model itself (the ceiling: a draft that agrees with the model wherever their arithmetic does). Every run must
have drafted tokens accepted (llama-server's ``timings``), or the identity would prove nothing; the acceptance rates and
tokens/s are printed (``pytest -s``). The checks of the check: the same file with another RoPE base gives other ids,
and so does a speculation that accepts every drafted token (llama-server's synthetic verification) with the cut draft.

Verification batches: the runs here draft at most 4 tokens per pass (batches of 5; llama.cpp's default of 3 gives 4).
Batches of 8 tokens or more are computed by other CPU kernels than one token at a time, and a near tie can flip - the
ids are then no longer the plain run's (measured on this build with the model as its own draft and 8 drafted tokens: at
the second generated token with llama-server's flash attention on, its default; at the 39th with it off. After the
repetitive prompt's first token, one token at a time gives 584 at log-probability -0.73 before 2060 at -1.02, the same
position at the end of a batch 2060 at -0.80 before 584 at -0.87). Batches of up to 7 agreed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_real_model_identity import LOOPBACK, Process, post_json, server, wait_ready
from test_real_model_identity import bin_dir as identity_bin_dir

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_server_check, _llama_smoke
from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf_header
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as planner

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import draft_gguf  # noqa: E402 - tools/ is put on the path above

pytestmark = pytest.mark.needs_llama

PROMPTS = {
    # Repetitive: a code block to write out again with one change (what n-gram speculation is for).
    "repetitive": (
        "Here is a Python function:\n\n"
        "def area(width, height):\n"
        "    if width < 0 or height < 0:\n"
        "        raise ValueError('negative size')\n"
        "    return width * height\n\n"
        "The same function, renamed to surface:\n\n"
        "def surface(width, height):\n"
    ),
    "free": "The history of the city of Paris begins",
}
N_PREDICT = 64
#: Blocks of Gemma 3 270M's 18 that the lab's draft keeps. Its tied 178 MB embedding (the output head too) stays whole,
#: so no cut is much smaller than the model; measured acceptance with 4 drafted (repetitive / free prompt): 6 or 9
#: blocks 0-1%, 12 blocks 11% / 5%, 15 blocks 31% / 14%, 17 blocks 66% / 36%.
DRAFT_BLOCKS = 15
GIB = 1 << 30


bin_dir = identity_bin_dir  # its fixture: the llama.cpp build to run


def completions(port):
    """Per prompt: the greedy ids and llama-server's timings."""
    out = {}
    for name, prompt in PROMPTS.items():
        body = {
            "prompt": prompt,
            "n_predict": N_PREDICT,
            "temperature": 0,
            "cache_prompt": False,
            "return_tokens": True,
        }
        answer = post_json(f"http://{LOOPBACK}:{port}/completion", body, timeout=600)
        assert len(answer["tokens"]) == N_PREDICT, answer
        out[name] = {"tokens": answer["tokens"], "timings": answer["timings"]}
    return out


def plan_args(model, workers=(), **speculative):
    """llama-server's arguments as the coordinator's unit gets them from the planner: a local plan without workers,
    else every worker (strategy all)."""
    summary = planner.summarize(gguf_header.read_model(model))
    if speculative.get("draft_path"):
        speculative["draft"] = planner.summarize(gguf_header.read_model(speculative["draft_path"]))
    result = planner.plan(
        summary,
        [{"name": f"w{i}", "endpoint": endpoint, "mem_available": 4 * GIB} for i, endpoint in enumerate(workers)],
        ctx_size=1024,
        strategy="all" if workers else "fewest",
        coordinator="c",
        fit_first=not workers,
        coordinator_available=4 * GIB,
        speculative=speculative or None,
    )
    return result["args"].split()


@pytest.fixture(scope="module")
def drafts(real_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("drafts") / f"gemma-first-{DRAFT_BLOCKS}.gguf"
    return {"cut": draft_gguf.cut(real_model, DRAFT_BLOCKS, str(out)), "self": {"path": real_model}}


@pytest.fixture(scope="module")
def answers(bin_dir, real_model, drafts, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("speculative")
    (workdir / "cache" / "rpc").mkdir(parents=True)
    common = ("--no-repack", "--fit", "off", "--split-mode", "layer")

    def ngram(size_m):
        return {"types": ["ngram-simple"], "settings": {"ngram-simple-size-n": 3, "ngram-simple-size-m": size_m}}

    def draft(n_max, path):
        return {"types": ["draft-simple"], "settings": {"draft-n-max": n_max}, "draft_path": path}

    cut, itself = drafts["cut"]["path"], real_model
    runs = {
        # llama-server's own flash attention setting (auto), as the coordinator's unit runs it.
        "plain": plan_args(real_model),
        # The check of the check: another computation of the same weights.
        "detuned": [*plan_args(real_model), "--rope-freq-base", "100"],
        "ngram-simple": plan_args(real_model, **ngram(4)),
        f"draft first {DRAFT_BLOCKS} blocks": plan_args(real_model, **draft(4, cut)),
        "draft = model (ceiling)": plan_args(real_model, **draft(4, itself)),
        # The check of the check for speculation itself: llama-server's synthetic verification (for benchmarks)
        # accepts every drafted token whatever the model says, so the cut draft's mistakes reach the output.
        "every draft accepted": [*plan_args(real_model, **draft(4, cut)), "--spec-synth-rates", "1,1,1,1"],
    }
    got = {}
    for name, extra in runs.items():
        log_name = "".join(char if char.isalnum() else "-" for char in name)
        started, port = server(bin_dir, real_model, workdir, log_name, *extra, *common)
        try:
            got[name] = completions(port)
        finally:
            started.stop()
    # The cluster's shape: the model's layers and the draft (the model itself) on one RPC worker's device.
    worker_port = _llama_smoke.free_port()
    worker = Process(
        [str(bin_dir / "ggml-rpc-server"), "-H", LOOPBACK, "-p", str(worker_port), "-t", "1"], workdir, "worker"
    )
    try:
        wait_ready(worker, worker_port)
        endpoint = f"{LOOPBACK}:{worker_port}"
        extra = plan_args(real_model, [endpoint], **draft(4, itself), draft_device="w0")
        assert extra[extra.index("--spec-draft-device") + 1] == "RPC0"
        started, port = server(bin_dir, real_model, workdir, "cluster", *extra, *common, "--log-verbosity", "4")
        try:
            got["cluster, draft on the worker"] = completions(port)
        finally:
            started.stop()
        got["cluster log"] = started.log.read_text(errors="replace")
    finally:
        worker.stop()
    return got


def acceptance(run):
    drafted = sum(answer["timings"].get("draft_n", 0) for answer in run.values())
    accepted = sum(answer["timings"].get("draft_n_accepted", 0) for answer in run.values())
    return accepted, drafted


SPECULATIVE = (
    "ngram-simple",
    f"draft first {DRAFT_BLOCKS} blocks",
    "draft = model (ceiling)",
    "cluster, draft on the worker",
)


@pytest.mark.parametrize("name", SPECULATIVE)
def test_speculation_gives_the_same_token_ids_as_none(answers, name):
    run = answers[name]
    accepted, drafted = acceptance(run)
    # Drafts accepted and drafts refused, or the identity would prove less than it says.
    assert 0 < accepted < drafted or name.startswith(("draft = model", "cluster")), (name, accepted, drafted)
    assert accepted > 0, f"{name} accepted no drafted token: its identity would prove nothing"
    for prompt in PROMPTS:
        assert run[prompt]["tokens"] == answers["plain"][prompt]["tokens"], (name, prompt)


def test_the_comparison_can_fail(answers):
    for prompt in PROMPTS:
        assert answers["detuned"][prompt]["tokens"] != answers["plain"][prompt]["tokens"], prompt


def test_the_comparison_catches_a_speculation_that_accepts_what_the_model_would_not_say(answers):
    run = answers["every draft accepted"]
    accepted, drafted = acceptance(run)
    assert accepted == drafted > 0
    for prompt in PROMPTS:
        assert run[prompt]["tokens"] != answers["plain"][prompt]["tokens"], prompt


def test_the_draft_ran_on_the_worker(answers):
    """The draft's weights on the RPC device (its own model buffer there, beside the target's)."""
    buffers = [line for line in answers["cluster log"].splitlines() if "RPC0[" in line and "model buffer size" in line]
    assert len(buffers) >= 2, answers["cluster log"][-3000:]


def test_the_cut_draft_has_the_models_vocabulary(real_model, drafts):
    model, draft = (
        gguf_header.vocabulary(gguf_header.read_model(path)) for path in (real_model, drafts["cut"]["path"])
    )
    assert gguf_header.vocabulary_problem(model, draft) == "" and model["sha256"] == draft["sha256"]


def test_acceptance_rates_are_recorded(answers, drafts):
    """Printed for the report (pytest -s): per run and prompt, the acceptance (accepted / drafted, as llama-server
    reports it) and tokens/s. The ceiling accepts at least what the cut draft does."""
    print(f"\nlab draft: first {DRAFT_BLOCKS} of 18 blocks, {drafts['cut']['bytes'] / 1e6:.1f} MB of tensors")
    for name in ("plain", *SPECULATIVE):
        for prompt, answer in answers[name].items():
            timings = answer["timings"]
            drafted, accepted = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
            rate = f"{accepted}/{drafted} = {accepted / drafted:.3f}" if drafted else "-"
            print(f"{name:32} {prompt:10} acceptance {rate:18} {timings['predicted_per_second']:7.1f} tokens/s")
    ceiling, cut = (
        acceptance(answers[name]) for name in ("draft = model (ceiling)", f"draft first {DRAFT_BLOCKS} blocks")
    )
    assert ceiling[0] / ceiling[1] >= cut[0] / cut[1]


def test_every_speculative_flag_the_planner_can_give_is_in_the_pinned_llama_server(bin_dir):
    """llama_server_check asks the binary's --help before a restart; this is the pinned build's answer for every flag
    the planner may put in the plan's arguments."""
    help_text = subprocess.run(
        [str(bin_dir / "llama-server"), "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    flags = ["--spec-type", "--spec-draft-model", "--spec-draft-device", "--spec-draft-ngl"]
    flags += [f"--spec-{name}" for name in planner.SPEC_SETTINGS]
    assert _llama_server_check.missing_flags(help_text, flags) == []
    for kind in planner.SPEC_TYPES:
        assert kind in help_text
