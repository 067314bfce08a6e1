"""The llama_cpp role's build rollback and kept builds, as Ansible renders them: the preflight rules for
llama_cpp_keep_previous and llama_cpp_rollback (each fails alone), the role's switch to rollback.yml, the rollback
preflight's message naming each host, and playbooks/rollback.yml's llamarpc_rollback (an invalid value fails first,
model stays the default, build and both set llama_cpp_rollback)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from test_preflight_rules import only_failure, render_rules

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "llama_cpp"


def render(expression, context):
    return Templar(loader=DataLoader(), variables=dict(context)).template(trust_as_template(expression))


def defaults(**overrides):
    """The role's defaults (the ones that need a lookup or role_path given plainly), with ``overrides``."""
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    values.update(
        llama_cpp_controller_cache_dir="/home/u/.cache/llamarpc/llama-cpp",
        llama_cpp_helpers=["/c/llamarpc_fnv1a.cpp"],
        llama_cpp_patches=["/c/rpc-tensor-hashes.patch"],
        inventory_hostname="w1",
        ansible_play_hosts_all=["w1", "w2"],
        groups={"all": ["w1", "w2"], "rpc_workers": ["w1", "w2"]},
    )
    values.update(overrides)
    return values


ROLE_VARS = ("_llama_cpp_sha256_re", "_llama_cpp_nodes", "_llama_cpp_build_host", "_llama_cpp_build_local")


def rules(**overrides):
    return render_rules(
        "roles/llama_cpp/tasks/preflight.yml", "Check the install request", defaults(**overrides), ROLE_VARS
    )


def test_the_defaults_pass_the_preflight():
    assert only_failure(rules()) == (None, None)


@pytest.mark.parametrize(
    ("overrides", "rule", "text"),
    [
        ({"llama_cpp_keep_previous": -1}, "keep previous", "llama_cpp_keep_previous is 0 or more (got -1)"),
        (
            {"llama_cpp_rollback": True, "llama_cpp_install_method": "path", "llama_cpp_path": "/usr/local/bin"},
            "rollback",
            "llama_cpp_rollback needs the method source or prebuilt",
        ),
    ],
    ids=["keep-previous", "rollback-path"],
)
def test_each_new_rule_fails_alone(overrides, rule, text):
    failed, message = only_failure(rules(**overrides))
    assert failed == rule and text in message


@pytest.mark.parametrize("keep", [0, 3])
def test_keep_previous_0_and_more_pass(keep):
    assert only_failure(rules(llama_cpp_keep_previous=keep)) == (None, None)


def test_a_rollback_with_the_methods_that_install_passes():
    for method in ("source", "prebuilt"):
        extra = {"llama_cpp_prebuilt_archive": "/a.tgz", "llama_cpp_prebuilt_checksum": "0" * 64}
        assert only_failure(rules(llama_cpp_rollback=True, llama_cpp_install_method=method, **extra)) == (None, None)


def test_the_role_rolls_back_instead_of_installing_and_skips_the_build_host_check():
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text(encoding="utf-8"))
    include = next(task for task in tasks if "ansible.builtin.include_tasks" in task)["ansible.builtin.include_tasks"]
    assert render(include, defaults(llama_cpp_rollback=True)) == "rollback.yml"
    assert render(include, defaults(llama_cpp_rollback=False)) == "source.yml"
    assert render(include, defaults(llama_cpp_install_method="prebuilt")) == "prebuilt.yml"
    preflight = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text(encoding="utf-8"))
    check = next(task for task in preflight if task.get("ansible.builtin.import_tasks") == "build_host_check.yml")
    assert render("{{ " + check["when"] + " }}", defaults(llama_cpp_rollback=True)) is False
    assert render("{{ " + check["when"] + " }}", defaults()) is True


def test_the_rollback_acts_only_with_state_previous_after_the_check():
    tasks = yaml.safe_load((ROLE / "tasks" / "rollback.yml").read_text(encoding="utf-8"))
    assert tasks[0]["ansible.builtin.include_tasks"] == "preflight_rollback.yml"
    act = tasks[1]["llamarpc.cluster.llama_cpp_install"]
    assert act["state"] == "previous" and "key" not in act and "archive" not in act
    assert tasks[1]["register"] == "_llama_cpp_install", "main.yml publishes the facts from it"


def test_the_rollback_preflight_gathers_in_check_mode_then_names_each_host_without_a_build():
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight_rollback.yml").read_text(encoding="utf-8"))
    gather, decide = tasks[0], tasks[1]
    assert gather["check_mode"] is True and gather["failed_when"] is False
    assert gather["llamarpc.cluster.llama_cpp_install"]["state"] == "previous"
    assert decide["run_once"] is True
    hostvars = {
        "w1": {"_llama_cpp_rollback_check": {"rollback_to": "k1", "msg": "would make"}},
        "w2": {"_llama_cpp_rollback_check": {"rollback_to": None, "msg": "records no build before the current one"}},
        "w3": {},  # no answer (the module did not run there)
    }
    context = defaults(hostvars=hostvars, ansible_play_hosts=["w1", "w2", "w3"], ansible_play_hosts_all=["w1", "w2"])
    context["_llama_cpp_nodes"] = render(
        yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))["_llama_cpp_nodes"], context
    )
    assert render(decide["loop"], context) == ["w1", "w2"]
    outcome = {}
    for host in ["w1", "w2", "w3"]:
        context["item"] = host
        assertion = decide["ansible.builtin.assert"]
        outcome[host] = (render("{{ " + assertion["that"] + " }}", context), render(assertion["fail_msg"], context))
    assert outcome["w1"][0] is True
    assert outcome["w2"] == (False, "w2: no llama.cpp build to roll back to - records no build before the current one")
    assert outcome["w3"][0] is False and "w3: no llama.cpp build to roll back to" in outcome["w3"][1]


# playbooks/rollback.yml


def rollback_playbook():
    return yaml.safe_load((REPO / "playbooks" / "rollback.yml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("value", ["model", "build", "both", None])
def test_llamarpc_rollback_accepts_model_build_both(value):
    assertion = rollback_playbook()[0]["tasks"][0]["ansible.builtin.assert"]
    context = {} if value is None else {"llamarpc_rollback": value}
    assert render("{{ " + assertion["that"] + " }}", context) is True


def test_an_invalid_llamarpc_rollback_fails_first_with_its_value():
    plays = rollback_playbook()
    assert plays[0]["hosts"] == "localhost" and "tasks" in plays[0], "the check is the first play"
    assertion = plays[0]["tasks"][0]["ansible.builtin.assert"]
    context = {"llamarpc_rollback": "builds"}
    assert render("{{ " + assertion["that"] + " }}", context) is False
    assert "not builds" in render(assertion["fail_msg"], context)


@pytest.mark.parametrize(
    ("value", "model", "build"),
    [(None, "rolled", False), ("model", "rolled", False), ("build", "inventory", True), ("both", "rolled", True)],
)
def test_what_each_value_rolls_back(value, model, build):
    plays = rollback_playbook()
    finders = plays[1]["tasks"]
    site = plays[2]
    assert site["ansible.builtin.import_playbook"] == "site.yml"
    coordinator = {
        "llama_model_rollback": {"source": {"hf_repo": "old/model", "hf_revision": "r1"}},
        "llama_model_source": {"hf_repo": "inventory/model", "hf_revision": "main", "urls": [], "files": []},
    }
    context = {"groups": {"coordinator": ["c1"]}, "hostvars": {"c1": coordinator}, "inventory_hostname": "w1"}
    if value is not None:
        context["llamarpc_rollback"] = value
    ran = {
        task["ansible.builtin.include_role"]["tasks_from"]
        for task in finders
        if render("{{ " + task["when"] + " }}", context)
    }
    assert ran == ({"rollback"} if model == "rolled" else {"source"})
    for name, expression in site["vars"].items():
        context[name] = render(expression, context)
    assert context["llama_model_hf_repo"] == ("old/model" if model == "rolled" else "inventory/model")
    assert context["llama_cpp_rollback"] is build
