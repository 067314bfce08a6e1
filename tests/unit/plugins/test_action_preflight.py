"""The preflight action: its options match its documentation, and site.yml asks it about every role it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.llamarpc.cluster.plugins.action.preflight import ARGUMENT_SPEC, load_role_specs
from ansible_collections.llamarpc.cluster.plugins.modules import preflight as doc

REPO = Path(__file__).resolve().parents[3]
COLLECTION = "llamarpc.cluster."
BIN = Path(sys.executable).parent


def _normalised(options):
    return {
        name: {
            key: _normalised(value) if key in ("options", "suboptions") else value
            for key, value in spec.items()
            if key in ("type", "elements", "default", "required", "options", "suboptions", "choices", "no_log")
        }
        for name, spec in options.items()
    }


def test_the_argument_spec_is_the_documented_one():
    documented = _normalised(yaml.safe_load(doc.DOCUMENTATION)["options"])
    for spec in documented.values():
        if "suboptions" in spec:
            spec["options"] = spec.pop("suboptions")
    assert documented == _normalised(ARGUMENT_SPEC)


def test_every_role_has_a_readable_argument_spec():
    specs = load_role_specs(REPO / "roles")
    assert set(specs) == {path.name for path in (REPO / "roles").iterdir() if path.is_dir()}
    assert all(specs.values())


def site_plays():
    return yaml.safe_load((REPO / "playbooks/site.yml").read_text(encoding="utf-8"))


def test_site_and_plan_start_with_the_one_preflight():
    for playbook in ("site.yml", "plan.yml"):
        first = yaml.safe_load((REPO / "playbooks" / playbook).read_text(encoding="utf-8"))[0]
        assert first["ansible.builtin.import_playbook"] == "preflight.yml", playbook


def preflight_task():
    play = yaml.safe_load((REPO / "playbooks/preflight.yml").read_text(encoding="utf-8"))[0]
    tasks = [task for task in play["tasks"] if "llamarpc.cluster.preflight" in task]
    assert len(tasks) == 1
    return tasks[0]["llamarpc.cluster.preflight"]


def test_site_checks_every_role_of_its_plays_on_the_plays_hosts():
    wanted = {}
    for play in site_plays():
        if "ansible.builtin.import_playbook" in play:
            continue
        for role in play.get("roles", []):
            name = (role["role"] if isinstance(role, dict) else role).removeprefix(COLLECTION)
            wanted.setdefault(name, set()).add(play["hosts"])
    checked = {role: set(groups) for role, groups in preflight_task()["roles"].items()}
    for role, hosts in wanted.items():
        assert checked.get(role) == hosts, role
    # llama_cpp is included by the worker and coordinator roles, on their hosts.
    assert checked["llama_cpp"] == checked["llama_rpc_worker"] | checked["llama_coordinator"]


def test_every_port_variable_is_a_role_option():
    options = set().union(*load_role_specs(REPO / "roles").values())
    for entry in preflight_task()["ports"]:
        assert entry["variable"] in options
        assert entry.get("unit", entry["variable"]) in options


def test_the_services_with_a_unit_are_checked_for_foreign_listeners_right_after():
    play = yaml.safe_load((REPO / "playbooks/preflight.yml").read_text(encoding="utf-8"))[0]
    names = [next(iter(key for key in task if "." in key)) for task in play["tasks"]]
    index = names.index("llamarpc.cluster.preflight")
    assert names[index + 1] == "llamarpc.cluster.port_holders"
    checked = {entry["service"] for entry in preflight_task()["ports"] if entry.get("unit")}
    assert checked == {"llama-server", "llama-server's gate", "the RPC worker"}


def test_default_ports_of_the_services_differ():
    """Open WebUI may run on the coordinator's host, and a worker too: each service's default port is its own."""
    options = {}
    for role_options in load_role_specs(REPO / "roles").values():
        options.update(role_options)
    defaults = {entry["service"]: options[entry["variable"]]["default"] for entry in preflight_task()["ports"]}
    assert len(set(defaults.values())) == len(defaults), defaults
    assert defaults["Open WebUI"] != defaults["llama-server"]


def test_role_defaults_match_the_argument_spec_for_the_ports():
    for entry in preflight_task()["ports"]:
        variable = entry["variable"]
        role = next(role for role, options in load_role_specs(REPO / "roles").items() if variable in options)
        defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8"))
        assert defaults[variable] == load_role_specs(REPO / "roles")[role][variable]["default"], variable


def preflight_through_ansible(tmp_path, args, *extra):
    """The preflight action's result on localhost, run by ansible itself with ``args`` (a dict) and ``extra``
    arguments (``-e`` ...); one run costs seconds."""
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections")}
    env.pop("ANSIBLE_CONFIG", None)
    command = [str(BIN / "ansible"), "localhost", "-c", "local", "-o", "-m", "llamarpc.cluster.preflight"]
    done = subprocess.run(
        [*command, "-a", json.dumps(args), *extra],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.split(" => ", 1)[1])


def test_rollback_build_says_whether_the_run_rolls_the_build_back(tmp_path):
    """Through ansible itself (the action templates the host's variable): false when unset, true from a template of an
    extra variable (as playbooks/rollback.yml sets it)."""
    args = {"roles": {"llama_cpp": ["all"]}, "ports": [], "known": []}
    template = '{"x": "build", "llama_cpp_rollback": "{{ x in [\'build\', \'both\'] }}"}'
    assert not preflight_through_ansible(tmp_path, args)["rollback_build"]
    assert preflight_through_ansible(tmp_path, args, "-e", template)["rollback_build"]


def test_a_service_is_checked_in_its_own_unit_and_only_when_turned_on(tmp_path):
    """Through ansible: the gate's port is held by a unit named after llama-server's (unit_suffix), and is not checked
    when the variable that turns the gate on is false (enabled_by)."""
    port = {"service": "the gate", "variable": "x_port", "unit": "x_unit", "unit_suffix": "-gate",
            "enabled_by": "x_on", "groups": ["all", "ungrouped"]}  # fmt: skip
    args = {"roles": {}, "ports": [port], "known": [], "prefixes": []}
    found = {}
    for on in (True, False):
        extra = json.dumps({"x_port": 8081, "x_unit": "srv", "x_on": on})
        found[on] = preflight_through_ansible(tmp_path, args, "-e", extra)["listeners"]
    assert found == {True: [{"service": "the gate", "port": 8081, "unit": "srv-gate.service"}], False: []}
