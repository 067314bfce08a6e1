"""The open_webui role's glue, rendered by Ansible's own templating: the coordinator's endpoint, key and model as the
fallback of the role's variables, the readiness answer that only Open WebUI gives, the wheel set resolved for the
host's Python with indexes added to PyPI, never replacing it, an install switched to only on success; and site.yml's
last play that runs the role on group webui."""

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


# -- the wheel set: resolved on the controller for the host, PyPI stays ---------------------------------------------

# As the setup module gathers them on a Debian 12 host (python.type is sys.implementation.name).
FACTS = {"python": {"version_info": [3, 11, 2, "final", 0], "type": "cpython"}, "architecture": "x86_64"}
GLIBC = {"stdout": "glibc 2.36\n"}


def install_tasks():
    return yaml.safe_load((ROLE / "tasks" / "install.yml").read_text(encoding="utf-8"))


def controller_block():
    return next(task for task in install_tasks() if task.get("delegate_to") == "localhost")["block"]


def wheel_set_args(**variables):
    task = next(task for task in controller_block() if "llamarpc.cluster.wheel_set" in task)
    context = {"ansible_facts": FACTS, "ansible_playbook_python": "/usr/bin/python3", "_open_webui_glibc": GLIBC}
    return {key: render(value, **context, **variables) for key, value in task["llamarpc.cluster.wheel_set"].items()}


def test_the_set_is_resolved_for_the_hosts_python_machine_and_c_library():
    args = wheel_set_args()
    assert (args["python_version"], args["machine"], args["glibc"].strip()) == ("3.11.2", "x86_64", "glibc 2.36")
    assert args["requirements"] == ["open-webui==0.12.4", "torch==2.13.0+cpu"]
    assert args["uv"].endswith("/uv-0.13.8/bin/uv") and args["python"] == "/usr/bin/python3"
    assert render("{{ _open_webui_cache }}", ansible_facts=FACTS, _open_webui_glibc=GLIBC).startswith(
        "/var/cache/llamarpc/wheels/open-webui-"
    )


def test_pytorchs_cpu_index_is_added_to_pypi_by_default_and_can_be_replaced():
    args = wheel_set_args()
    assert args["extra_index_urls"] == ["https://download.pytorch.org/whl/cpu"]
    assert "index_url" not in args and "no_index" not in args  # PyPI stays the index
    mirror = wheel_set_args(
        open_webui_pip_extra_index_urls=["https://torch.example.org/whl/cpu"], open_webui_pip_find_links=["/srv/wheels"]
    )
    assert mirror["extra_index_urls"] == ["https://torch.example.org/whl/cpu"]
    assert mirror["find_links"] == ["/srv/wheels"]
    assert wheel_set_args(open_webui_uv="/usr/local/bin/uv")["uv"] == "/usr/local/bin/uv"


@pytest.mark.parametrize(
    ("python_type", "architecture", "glibc", "passes"),
    [
        ("cpython", "x86_64", "glibc 2.36\n", True),  # Debian 12, as gathered
        ("cpython", "aarch64", "glibc 2.36\n", True),
        ("pypy", "x86_64", "glibc 2.36\n", False),
        ("cpython", "armv7l", "glibc 2.36\n", False),
        ("cpython", "x86_64", "", False),  # musl: getconf has no GNU_LIBC_VERSION
    ],
)
def test_the_preflight_accepts_the_hosts_the_set_is_resolved_for(python_type, architecture, glibc, passes):
    preflight = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text(encoding="utf-8"))
    check = next(task for task in preflight if "machine" in task["name"])["ansible.builtin.assert"]["that"]
    facts = {"python": {**FACTS["python"], "type": python_type}, "architecture": architecture}
    results = [render("{{ " + line + " }}", ansible_facts=facts, _open_webui_glibc={"stdout": glibc}) for line in check]
    assert all(results) is passes, results


def download_report():
    return next(task for task in controller_block() if "ansible.builtin.fail" in task)


@pytest.mark.parametrize(
    ("download", "reported"),
    [
        ({"changed": True, "lock": "/x/requirements.lock", "packages": [{"name": "open-webui"}]}, False),  # downloaded
        ({"changed": False, "lock": "/x/requirements.lock", "packages": [{"name": "open-webui"}]}, False),  # cached
        ({"changed": True, "lock": "/x/requirements.lock", "packages": []}, False),  # check mode
        ({"changed": False, "lock": "/x/requirements.lock", "msg": "resolving with uv failed (rc 1): torch"}, True),
        # async past open_webui_download_timeout: no result of the module, and failed_when: false hides the failure
        ({"failed": False, "finished": True, "msg": "Timeout exceeded", "ansible_job_id": "j1"}, True),
    ],
    ids=["downloaded", "cached", "check-mode", "resolve-failed", "timed-out"],
)
def test_a_download_that_did_not_complete_is_reported(download, reported):
    task = download_report()
    variables = {"_open_webui_download": download, "ansible_facts": FACTS}
    assert render("{{ " + task["when"] + " }}", **variables) is reported
    if reported:
        message = render(task["ansible.builtin.fail"]["msg"], **variables)
        assert ("resolving with uv failed" in message) if "lock" in download else ("did not finish" in message)
        assert "PyTorch's CPU wheel index" in message


def test_the_wheel_set_key_follows_the_hosts_python_and_the_indexes():
    variables = {"ansible_facts": FACTS, "_open_webui_glibc": GLIBC}
    plain = render("{{ _open_webui_key }}", **variables)
    extra = render("{{ _open_webui_key }}", open_webui_pip_extra_index_urls=["https://x.example.org/cpu"], **variables)
    newer = {**FACTS, "python": {"version_info": [3, 11, 4, "final", 0]}}
    micro = render("{{ _open_webui_key }}", ansible_facts=newer, _open_webui_glibc=GLIBC)
    assert len({plain, extra, micro}) == 3


@pytest.mark.parametrize(
    ("stat", "needed"),
    [
        ({"exists": False}, True),
        ({"exists": True, "isdir": True, "islnk": False}, True),  # an older layout's plain virtualenv
        ({"exists": True, "islnk": True, "lnk_target": "/opt/llamarpc/open-webui/releases/0000000000000000"}, True),
        ({"exists": True, "islnk": True, "lnk_target": "/opt/llamarpc/open-webui/releases/RELEASE"}, False),
    ],
    ids=["none", "plain-venv", "other-release", "this-release"],
)
def test_an_install_is_needed_unless_the_link_points_at_this_wheel_set(stat, needed):
    task = next(
        task for task in install_tasks() if "_open_webui_needs_install" in task.get("ansible.builtin.set_fact", {})
    )
    release = render("{{ _open_webui_release }}", ansible_facts=FACTS, _open_webui_glibc=GLIBC)
    if "lnk_target" in stat:
        stat = {**stat, "lnk_target": stat["lnk_target"].replace("RELEASE", release)}
    value = render(
        task["ansible.builtin.set_fact"]["_open_webui_needs_install"],
        ansible_facts=FACTS,
        _open_webui_glibc=GLIBC,
        _open_webui_installed={"stat": stat},
    )
    assert value is needed


def test_a_failed_install_says_the_previous_release_keeps_running():
    block = next(task for task in install_tasks() if "rescue" in task)
    assert "llamarpc.cluster.wheel_set_install" in str(block["block"])
    message = render(
        block["rescue"][0]["ansible.builtin.fail"]["msg"],
        ansible_failed_result={"msg": "installing 0123 into /opt/x/releases/0123 failed, the previous install"},
        _open_webui_installed={"stat": {"islnk": True, "lnk_target": "/opt/llamarpc/open-webui/releases/abcd"}},
    )
    assert "could not be installed on node1" in message
    assert "keeps running the previous release, /opt/llamarpc/open-webui/releases/abcd" in message
    assert block["always"][0]["ansible.builtin.file"]["state"] == "absent"


def test_no_option_replaces_the_index():
    """open_webui_pip_index_url pointed at PyTorch's CPU index hid PyPI (issue 18): it is gone, not just unused."""
    options = load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert "open_webui_pip_index_url" not in options
    assert "open_webui_pip_index_url" not in load("defaults/main.yml")
    assert {"open_webui_pip_extra_index_urls", "open_webui_pip_find_links"} <= set(options)


# -- site.yml ----------------------------------------------------------------------------------------------------


def test_site_runs_open_webui_on_group_webui_after_the_coordinator():
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text(encoding="utf-8"))
    last = next(play for play in plays if play.get("hosts") == "webui")
    assert last["hosts"] == "webui"
    assert [role["role"] for role in last["roles"]] == ["llamarpc.cluster.open_webui"]
    assert "vars" not in last["roles"][0], "the endpoint comes from the coordinator's fact, not from play vars"
    coordinator = [play for play in plays if "llamarpc.cluster.llama_coordinator" in str(play.get("roles"))]
    assert plays.index(coordinator[-1]) < plays.index(last)


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
