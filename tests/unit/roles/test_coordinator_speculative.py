"""llama_coordinator's speculative decoding (issue #36): the preflight's rules (one per item, each failing alone with
its own message, before anything changes) and the role's expressions around the draft model (where it is, what the
unit binds and checks, what restarts), rendered by Ansible's templating from the role's own files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from test_preflight_rules import only_failure, render_rules

ROLE = Path(__file__).resolve().parents[3] / "roles/llama_coordinator"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
VARS = yaml.safe_load((ROLE / "vars/main.yml").read_text())
SPEC = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]

CONTEXT = {
    **DEFAULTS,
    "inventory_hostname": "node1",
    "groups": {"rpc_workers": ["node1", "node2"], "coordinator": ["node1"]},
    "llama_model_dir": "/data/models/model",
    "_llama_coordinator_flags": VARS["_llama_coordinator_flags"],
}


def rules(**changes):
    return render_rules(
        "roles/llama_coordinator/tasks/preflight.yml",
        "Speculative decoding and the draft model make sense",
        {**CONTEXT, **changes},
        role_vars=("_llama_coordinator_workers", "_llama_coordinator_draft_sources"),
    )


def render(expression, **variables):
    """An expression of the role (a dict of them: each value) rendered with CONTEXT and ``variables``."""
    if isinstance(expression, dict):
        return {key: render(value, **variables) for key, value in expression.items()}
    return Templar(loader=DataLoader(), variables={**CONTEXT, **variables}).template(trust_as_template(expression))


@pytest.mark.parametrize(
    ("changes", "rule", "message"),
    [
        ({}, None, None),  # off by default
        ({"llama_coordinator_spec_types": ["ngram-mod"]}, None, None),
        (
            {"llama_coordinator_spec_types": ["draft-simple"], "llama_coordinator_draft_files": ["d.gguf"]},
            None,
            None,
        ),
        (
            {
                "llama_coordinator_spec_types": ["draft-simple"],
                "llama_coordinator_draft_files": ["d.gguf"],
                "llama_coordinator_draft_path": "/d.gguf",
            },
            "one draft source",
            "at most one source of",
        ),
        ({"llama_coordinator_spec_types": ["draft-simple"]}, "a draft with draft-simple", "add a draft model"),
        ({"llama_coordinator_draft_path": "/d.gguf"}, "a draft with draft-simple", "add draft-simple"),
        (
            {
                "llama_coordinator_spec_types": ["draft-simple"],
                "llama_coordinator_draft_hf_repo": "org/draft",
            },
            "draft hub pattern",
            "needs llama_coordinator_draft_hf_pattern",
        ),
        ({"llama_coordinator_draft_dir": "/data/models/model/"}, "draft directory", "not the model's own directory"),
        ({"llama_coordinator_draft_dir": "drafts"}, "draft directory", "must be absolute"),
        ({"llama_coordinator_draft_device": "node3"}, "draft device", "cpu or a host of the group 'rpc_workers'"),
        ({"llama_coordinator_spec_draft_min": 4}, "draft lengths", "no more than llama_coordinator_spec_draft_max (3)"),
        ({"llama_coordinator_spec_acceptance": 1.5}, "assumed acceptance", "a rate from 0 to 1 (got 1.5)"),
    ],
)
def test_each_rule_fails_alone_with_its_message(changes, rule, message):
    failed, text = only_failure(rules(**changes))
    assert failed == rule
    if message:
        assert text.startswith("node1: ") and message in text, text


def test_the_draft_device_may_be_a_worker():
    assert only_failure(rules(llama_coordinator_draft_device="node2")) == (None, None)


def test_the_preflight_before_any_change_checks_the_speculative_options_too():
    """site.yml's preflight runs the entry point preflight_cluster (it imports preflight.yml): its options cover every
    variable the rules read."""
    read = {"llama_coordinator_spec_types", "llama_coordinator_draft_dir", "llama_coordinator_draft_device",
            "llama_coordinator_spec_draft_min", "llama_coordinator_spec_draft_max", "llama_coordinator_spec_acceptance",
            "llama_coordinator_draft_hf_repo", "llama_coordinator_draft_hf_pattern", "llama_coordinator_draft_urls",
            "llama_coordinator_draft_files", "llama_coordinator_draft_path"}  # fmt: skip
    for entry in ("main", "plan", "preflight_cluster"):
        assert read <= set(SPEC[entry]["options"]), entry
        for name in read:
            assert SPEC[entry]["options"][name]["default"] == DEFAULTS[name], (entry, name)


def test_without_a_draft_the_unit_binds_and_checks_what_it_did():
    draft = render(VARS["_llama_coordinator_draft"])
    assert draft == ""
    sandbox = render(
        VARS["_llama_coordinator_model_sandbox"], _llama_coordinator_model="/m/x.gguf", _llama_coordinator_draft=draft
    )
    assert sandbox == ["ProtectSystem=strict", "ProtectHome=tmpfs", "BindReadOnlyPaths=/m"]
    assert render(VARS["_llama_coordinator_draft_files"]) == []
    flags = render(VARS["_llama_coordinator_check_flags"], _llama_coordinator_plan={"plan": {"args": "x"}})
    assert flags == VARS["_llama_coordinator_flags"]


def test_a_placed_draft_is_bound_read_only_checked_and_given_to_the_planner():
    placed = {"model_path": "/data/models/draft/d-00001-of-00002.gguf", "plan": [
        {"name": "d-00001-of-00002.gguf", "path": "/data/models/draft/d-00001-of-00002.gguf"},
        {"name": "d-00002-of-00002.gguf", "path": "/data/models/draft/d-00002-of-00002.gguf"},
    ]}  # fmt: skip
    variables = {
        "_llama_coordinator_model": "/m/x.gguf",
        "_llama_coordinator_draft_place": placed,
        "llama_coordinator_spec_types": ["draft-simple"],
        "llama_coordinator_draft_device": "node2",
    }
    variables["_llama_coordinator_draft"] = render(VARS["_llama_coordinator_draft"], **variables)
    assert variables["_llama_coordinator_draft"] == placed["model_path"]
    sandbox = render(VARS["_llama_coordinator_model_sandbox"], **variables)
    assert sandbox[-1] == "BindReadOnlyPaths=/data/models/draft"
    assert render(VARS["_llama_coordinator_draft_files"], **variables) == [row["path"] for row in placed["plan"]]
    given = render(VARS["_llama_coordinator_speculative"], **variables)
    assert given == {"types": ["draft-simple"], "settings": {}, "draft_max": 3, "draft_min": 0,
                     "draft_device": "node2", "draft_path": placed["model_path"], "draft_model": None}  # fmt: skip
    # The plan-only run gives the draft as read from its headers.
    read = {
        **variables,
        "_llama_coordinator_plan_only": True,
        "_llama_coordinator_draft_place": {**placed, "model": {"n_layer": 2}},
    }
    plan_only = render(VARS["_llama_coordinator_speculative"], **read)
    assert plan_only["draft_model"] == {"n_layer": 2}
    # A draft already on the coordinator is taken as given, shard 1 alone.
    there = {"llama_coordinator_draft_path": "/opt/d.gguf"}
    assert render(VARS["_llama_coordinator_draft"], **there) == "/opt/d.gguf"
    assert render(VARS["_llama_coordinator_draft_files"], **there) == ["/opt/d.gguf"]


def test_the_plans_speculative_flags_are_checked_against_the_binary():
    plan = {"plan": {"speculative": {"flags": ["--spec-draft-model", "--spec-type"]}}}
    flags = render(VARS["_llama_coordinator_check_flags"], _llama_coordinator_plan=plan)
    assert flags[-2:] == ["--spec-draft-model", "--spec-type"] and "--rpc" in flags


def test_a_draft_the_placement_rewrote_restarts_llama_server():
    assert render(VARS["_llama_coordinator_restart_needed"], _llama_coordinator_draft_fetch={"changed": True}) is True
    assert render(VARS["_llama_coordinator_restart_needed"], _llama_coordinator_draft_fetch={"changed": False}) is False
    draft = yaml.safe_load((ROLE / "tasks/draft.yml").read_text())
    fetch = next(task for task in draft if "llamarpc.cluster.gguf_shard_place" in task)
    assert fetch["register"] == "_llama_coordinator_draft_fetch" and fetch["notify"] == "llama_coordinator restart"


PREFLIGHT_DRAFT = yaml.safe_load((ROLE / "tasks/preflight_draft.yml").read_text())[0]


@pytest.mark.parametrize(
    ("changes", "runs"),
    [
        ({}, False),  # speculation off
        ({"llama_coordinator_spec_types": ["ngram-mod"]}, False),
        ({"llama_coordinator_spec_types": ["draft-simple"], "llama_coordinator_draft_files": ["d.gguf"]}, True),
        ({"llama_coordinator_spec_types": ["draft-simple"], "llama_coordinator_draft_path": "/d.gguf"}, False),
        (
            {
                "llama_coordinator_spec_types": ["draft-simple"],
                "llama_coordinator_draft_files": ["d.gguf"],
                "llama_coordinator_model_path": "/m.gguf",
            },
            False,
        ),
    ],
)
def test_the_preflight_reads_both_headers_only_when_both_come_from_sources(changes, runs):
    variables = {**changes}
    variables["_llama_coordinator_draft_sources"] = render(VARS["_llama_coordinator_draft_sources"], **variables)
    variables["_llama_coordinator_draft_to_place"] = render(VARS["_llama_coordinator_draft_to_place"], **variables)
    assert all(render("{{ " + rule + " }}", **variables) for rule in PREFLIGHT_DRAFT["when"]) is runs


def test_the_preflight_compares_llama_models_source_with_the_draft():
    check = PREFLIGHT_DRAFT["llamarpc.cluster.gguf_vocabulary_check"]
    variables = {"llama_model_hf_repo": "org/big", "llama_model_hf_pattern": "*q4*.gguf",
                 "llama_coordinator_draft_urls": [{"url": "http://x/d.gguf", "sha256": "0" * 64}]}  # fmt: skip
    model, draft = (render(check[role], **variables) for role in ("model", "draft"))
    assert model == {"hf_repo": "org/big", "hf_pattern": "*q4*.gguf", "hf_revision": "main", "hf_token": "",
                     "hf_endpoint": "", "urls": [], "files": []}  # fmt: skip
    assert draft["urls"] == variables["llama_coordinator_draft_urls"] and draft["hf_repo"] == ""
    preflight = yaml.safe_load((ROLE.parents[1] / "playbooks/preflight.yml").read_text())[0]["tasks"]
    include = next(
        task
        for task in preflight
        if task.get("ansible.builtin.include_role", {}).get("tasks_from") == "preflight_draft"
    )
    assert include["when"] == "inventory_hostname in groups['coordinator'] | default([])"
