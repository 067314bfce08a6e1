"""The open_webui role's glue, rendered by Ansible's own templating: the coordinator's endpoint, key and model as the
fallback of the role's variables, the readiness answer that only Open WebUI gives, and pip downloads that add an index
or a wheel directory to PyPI, never replace it; and site.yml's last play that runs the role on group webui."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llamarpc.cluster.plugins.module_utils.preflight import _preflight as pf

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "open_webui"
ENDPOINT = {"url": "http://10.0.0.1:8080/v1", "model": "qwen2.5-32b-instruct-q4_k_m", "api_key": "coordinator-key"}


def trusted(value):
    """YAML data as Ansible trusts a role's own files (its strings may be templates)."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def load(relative):
    return yaml.safe_load((ROLE / relative).read_text(encoding="utf-8"))


def render(expression, **variables):
    """``expression`` rendered with the role's defaults and vars, a coordinator node1 and ``variables`` on top."""
    context = {
        **trusted(load("defaults/main.yml")),
        **trusted(load("vars/main.yml")),
        "inventory_hostname": "node1",
        "open_webui_listen_address": "10.0.0.1",
        "groups": {"coordinator": ["node1"], "webui": ["node1"]},
        "hostvars": {"node1": {"ansible_host": "10.0.0.1"}},
        **variables,
    }
    return Templar(loader=DataLoader(), variables=context).template(trust_as_template(expression))


def published():
    return {"hostvars": {"node1": {"ansible_host": "10.0.0.1", "llama_coordinator_endpoint": dict(ENDPOINT)}}}


# -- endpoint, key and model from the coordinator ------------------------------------------------------------------


def test_endpoint_key_and_model_are_the_coordinators_when_unset():
    assert render("{{ _open_webui_base_url }}", **published()) == ENDPOINT["url"]
    assert render("{{ _open_webui_api_key }}", **published()) == ENDPOINT["api_key"]
    assert render("{{ _open_webui_default_model }}", **published()) == ENDPOINT["model"]


def test_a_set_variable_wins_over_the_coordinator():
    variables = {
        **published(),
        "open_webui_openai_base_url": "https://llm.example.org/v1",
        "open_webui_openai_api_key": "own-key",
        "open_webui_default_model": "other",
    }
    assert render("{{ _open_webui_base_url }}", **variables) == "https://llm.example.org/v1"
    assert render("{{ _open_webui_api_key }}", **variables) == "own-key"
    assert render("{{ _open_webui_default_model }}", **variables) == "other"


@pytest.mark.parametrize(
    "variables",
    [
        {},  # the coordinator's play has not run (a run limited by tags or hosts)
        {"groups": {"webui": ["node1"]}},  # no coordinator group at all
        {**published(), "open_webui_coordinator_group": "elsewhere"},
    ],
    ids=["not-published", "no-group", "other-group"],
)
def test_nothing_published_leaves_the_endpoint_empty(variables):
    """An empty endpoint is what the role's preflight refuses, with a message naming the coordinator's group."""
    assert render("{{ _open_webui_base_url }}", **variables) == ""
    assert render("{{ _open_webui_default_model }}", **variables) == ""


def test_the_endpoint_of_the_coordinator_group_is_read():
    variables = {
        "open_webui_coordinator_group": "head",
        "groups": {"head": ["node9"], "coordinator": ["node1"]},
        "hostvars": {"node9": {"llama_coordinator_endpoint": ENDPOINT}, "node1": {}},
    }
    assert render("{{ _open_webui_base_url }}", **variables) == ENDPOINT["url"]


# -- readiness ---------------------------------------------------------------------------------------------------


def ready(answer):
    return render("{{ _open_webui_answers }}", _open_webui_config=answer)


def test_ready_means_open_webui_of_the_installed_release():
    version = load("defaults/main.yml")["open_webui_version"]
    assert ready({"status": 200, "json": {"status": True, "name": "Open WebUI", "version": version}}) is True
    # WEBUI_NAME set: Open WebUI appends its own name.
    assert ready({"status": 200, "json": {"name": "Lab Chat (Open WebUI)", "version": version}}) is True


@pytest.mark.parametrize(
    "answer",
    [
        # llama-server on the port: /health answers 200, /api/config is not found.
        {"status": 404, "json": {"error": {"code": 404, "message": "File Not Found"}}},
        # any server answering 200 with something else
        {"status": 200, "json": {"status": "ok"}},
        {"status": 200, "content": "<html>hello</html>"},
        {"status": 200, "json": ["Open WebUI"]},
        # an Open WebUI of another release (the old one still running, or a different install)
        {"status": 200, "json": {"name": "Open WebUI", "version": "0.6.0"}},
        # nothing listening yet
        {"status": -1, "msg": "Connection refused"},
        {},
    ],
    ids=["llama-server", "other-json", "html", "list", "other-release", "refused", "no-answer"],
)
def test_anything_else_is_not_ready(answer):
    assert ready(answer) is False


def test_the_readiness_check_asks_open_webuis_config_not_health():
    tasks = yaml.safe_load((ROLE / "tasks" / "ready.yml").read_text(encoding="utf-8"))
    wait = tasks[0]["ansible.builtin.uri"]
    assert wait["url"].endswith("/api/config")
    assert tasks[0]["until"] == "_open_webui_answers"
    assert tasks[1]["ansible.builtin.assert"]["that"] == "_open_webui_answers"
    service = yaml.safe_load((ROLE / "tasks" / "service.yml").read_text(encoding="utf-8"))
    assert any(task.get("ansible.builtin.import_tasks") == "ready.yml" for task in service)
    assert "/health" not in (ROLE / "tasks" / "service.yml").read_text(encoding="utf-8")


# -- pip on the controller: PyPI stays ---------------------------------------------------------------------------


def download_argv(**variables):
    install = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text(encoding="utf-8"))
    block = next(task for task in install if task.get("delegate_to") == "localhost")
    task = next(task for task in block["block"] if "pip" in str(task.get("ansible.builtin.command", {}).get("argv")))
    facts = {"python": {"version": {"major": 3, "minor": 11, "micro": 2}}, "architecture": "x86_64"}
    return render(
        task["ansible.builtin.command"]["argv"],
        ansible_facts=facts,
        ansible_playbook_python="/usr/bin/python3",
        _open_webui_glibc={"stdout": "glibc 2.36\n"},
        **variables,
    )


def test_extra_indexes_and_wheel_directories_are_added_to_pypi():
    argv = download_argv(
        open_webui_pip_extra_index_urls=["https://torch.example.org/whl/cpu"], open_webui_pip_find_links=["/srv/wheels"]
    )
    assert "--extra-index-url=https://torch.example.org/whl/cpu" in argv
    assert "--find-links=/srv/wheels" in argv
    assert not [arg for arg in argv if arg.startswith(("--index-url", "-i")) or arg == "--no-index"], argv
    assert argv[-2:] == ["open-webui==0.12.4", "torch==2.13.0+cpu"]
    assert "--platform=manylinux_2_36_x86_64" in argv
    assert "--platform=manylinux_2_17_x86_64" in argv


def download_report():
    install = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text(encoding="utf-8"))
    block = next(task for task in install if task.get("delegate_to") == "localhost")["block"]
    return next(task for task in block if "ansible.builtin.fail" in task)


@pytest.mark.parametrize(
    ("download", "reported"),
    [
        ({"rc": 0, "stdout": ""}, False),  # downloaded
        ({"rc": 0, "msg": "Did not run command since '/x/wheels.tar' exists"}, False),  # the wheel set is cached
        ({"rc": 0, "msg": "Command would have run if not in check mode"}, False),  # check mode
        ({"rc": 1, "stderr": "ERROR: No matching distribution found for torch==2.13.0+cpu"}, True),
        # async past open_webui_download_timeout: no rc, and failed_when: false hides the failure
        ({"failed": False, "finished": True, "msg": "Timeout exceeded", "ansible_job_id": "j1"}, True),
    ],
    ids=["downloaded", "cached", "check-mode", "pip-failed", "timed-out"],
)
def test_a_download_that_did_not_complete_stops_before_the_archive(download, reported):
    """A partial wheel set must never become the cached archive (it would be reused by every later run)."""
    task = download_report()
    when = render("{{ " + task["when"] + " }}", _open_webui_download=download)
    assert when is reported
    if reported:
        message = render(task["ansible.builtin.fail"]["msg"], _open_webui_download=download)
        assert ("No matching distribution" in message) if "stderr" in download else ("did not finish" in message)


def test_without_options_pip_uses_its_own_configuration():
    argv = download_argv()
    assert not [arg for arg in argv if "index" in arg or "find-links" in arg], argv


def test_no_option_replaces_the_index():
    """open_webui_pip_index_url pointed at PyTorch's CPU index hid PyPI (issue 18): it is gone, not just unused."""
    options = load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert "open_webui_pip_index_url" not in options
    assert "open_webui_pip_index_url" not in load("defaults/main.yml")
    assert {"open_webui_pip_extra_index_urls", "open_webui_pip_find_links"} <= set(options)


def test_the_wheel_set_key_follows_the_extra_indexes():
    facts = {"python": {"version": {"major": 3, "minor": 11, "micro": 2}}, "architecture": "x86_64"}
    variables = {"ansible_facts": facts, "_open_webui_glibc": {"stdout": "glibc 2.36"}}
    plain = render("{{ _open_webui_key }}", **variables)
    extra = render("{{ _open_webui_key }}", open_webui_pip_extra_index_urls=["https://x.example.org/cpu"], **variables)
    assert plain != extra


# -- site.yml ----------------------------------------------------------------------------------------------------


def test_site_ends_with_open_webui_on_group_webui_after_the_coordinator():
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text(encoding="utf-8"))
    last = plays[-1]
    assert last["hosts"] == "webui"
    assert [role["role"] for role in last["roles"]] == ["llamarpc.cluster.open_webui"]
    assert "vars" not in last["roles"][0], "the endpoint comes from the coordinator's fact, not from play vars"
    coordinator = [play for play in plays if "llamarpc.cluster.llama_coordinator" in str(play.get("roles"))]
    assert plays.index(coordinator[-1]) < len(plays) - 1


def test_the_coordinator_publishes_what_open_webui_reads():
    tasks = yaml.safe_load((REPO / "roles" / "llama_coordinator" / "tasks" / "main.yml").read_text(encoding="utf-8"))
    publish = [task for task in tasks if "llama_coordinator_endpoint" in task.get("ansible.builtin.set_fact", {})]
    assert len(publish) == 1
    assert set(publish[0]["ansible.builtin.set_fact"]["llama_coordinator_endpoint"]) == set(ENDPOINT)
    assert publish[0]["no_log"] is True
    assert "cacheable" not in publish[0]["ansible.builtin.set_fact"]  # it holds the API key


def test_the_removed_index_option_is_a_typo_with_the_new_name_suggested():
    """An inventory that still sets open_webui_pip_index_url stops in site.yml's preflight, pointed at the option."""
    known = set(load("meta/argument_specs.yml")["argument_specs"]["main"]["options"])
    assert pf.unknown_variables(["open_webui_pip_index_url"], known) == [
        "`open_webui_pip_index_url`: did you mean `open_webui_pip_extra_index_urls`?"
    ]
