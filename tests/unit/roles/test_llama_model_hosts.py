"""llama_model in site.yml: each host does its own share in plays over all of them at once (entry points report, place,
export) and the coordinator (entry points placement and mount, or main alone) does by delegation only what a host did
not do in this run. What the coordinator takes as done is read from each host's results of this run (hostvars): the
role's own expressions (vars/main.yml) rendered by Ansible's templating with the results a run registers - a result
that did not run, was skipped, failed or was unreachable never counts as done. Also the shape: site.yml's plays and
their order, and the coordinator's loops over the hosts not done."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "llama_model"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
EXPORT_VARS = yaml.safe_load((REPO / "roles/sshfs_shard_export/vars/main.yml").read_text(encoding="utf-8"))
DIR = "/data/models/model"


def render(expression, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def tasks(name, role=ROLE):
    return yaml.safe_load((role / "tasks" / name).read_text(encoding="utf-8"))


# What a run registers: a report (gguf_shard_facts), a place result (gguf_shard_place), and the other outcomes.
def report(model_dir=DIR):
    return {"changed": False, "ansible_facts": {"gguf_shard_dir": {"model_dir": model_dir, "free": 1}}}


OK = {"changed": False, "fetched": [], "actions": []}
CHANGED = {"changed": True, "fetched": [{"name": "m-2"}], "actions": ["fetch m-2"]}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
FAILED = {"changed": False, "failed": True, "msg": "sha256 mismatch"}
UNREACHABLE = {"changed": False, "unreachable": True, "msg": "ssh: connect to host"}
# failed_when: false and ignore_unreachable (entry point report): an error leaves no facts, and is not a failure.
REPORT_FAILED = {"changed": False, "failed": False, "failed_when_result": False, "msg": "cannot inspect"}


# --- entry point report -> the coordinator's plan -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "reported"),
    [
        (report(), True),
        (report("/elsewhere"), False),  # another model directory (the host's own llama_model_dir): read it again
        (REPORT_FAILED, False),
        ({**UNREACHABLE, "failed": False}, False),
        (None, False),  # did not run the entry point (the role alone, --limit, a host failed earlier)
    ],
    ids=["reported", "other directory", "module failed", "unreachable", "not run"],
)
def test_the_coordinator_takes_a_report_of_this_run_for_its_own_directory_only(result, reported):
    hostvars = {
        "node1": {"llama_model_report": report()},
        "node2": {} if result is None else {"llama_model_report": result},
    }
    got = render(
        VARS["_llama_model_reported"], _llama_model_hosts=["node1", "node2"], hostvars=hostvars, llama_model_dir=DIR
    )
    assert got == (["node1", "node2"] if reported else ["node1"])


def test_the_coordinator_reads_only_the_hosts_that_did_not_report():
    task = next(t for t in tasks("plan_shards.yml") if "llamarpc.cluster.gguf_shard_facts" in t)
    assert task["delegate_to"] == "{{ item }}" and task["delegate_facts"] is True
    loop = render(
        task["loop"], _llama_model_hosts=["node1", "node2", "node3"], _llama_model_reported=["node1", "node3"]
    )
    assert loop == ["node2"]


def test_the_report_is_the_plans_input_registered_never_fatal():
    (task,) = tasks("report.yml")
    args = task["llamarpc.cluster.gguf_shard_facts"]
    # The same module as the coordinator's read: its facts (gguf_shard_dir) are what gguf_shard_plan reads in hostvars.
    plan_read = next(t for t in tasks("plan_shards.yml") if "llamarpc.cluster.gguf_shard_facts" in t)
    assert args["model_dir"] == plan_read["llamarpc.cluster.gguf_shard_facts"]["model_dir"]
    assert task["register"] == "llama_model_report"
    assert task["failed_when"] is False and task["ignore_unreachable"] is True
    assert task["tags"] == ["llama_model", "place"]


# --- entry point place -> the coordinator's fetch loop ------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "done"),
    [(OK, True), (CHANGED, True), (SKIPPED, False), (FAILED, False), (UNREACHABLE, False), (None, False)],
    ids=["unchanged", "changed", "skipped", "failed", "unreachable", "not run"],
)
def test_a_host_counts_as_placed_only_when_its_place_ran_and_succeeded(result, done):
    hostvars = {"node1": {"llama_model_placed": OK}, "node2": {} if result is None else {"llama_model_placed": result}}
    place = {"_llama_model_place": {"place": {"node1": {}, "node2": {}}}}
    got = render(VARS["_llama_model_placed"], hostvars=hostvars, **place)
    assert got == (["node1", "node2"] if done else ["node1"])


def test_the_coordinator_fetches_only_for_the_hosts_not_placed():
    (task,) = tasks("fetch_others.yml")
    assert task["delegate_to"] == "{{ item }}"
    place = {"node1": {}, "node2": {}, "node3": {}}
    loop = render(task["loop"], _llama_model_place={"place": place}, _llama_model_placed=["node1", "node3"])
    assert loop == ["node2"]


@pytest.mark.parametrize(
    ("fetch", "placed", "fetched"),
    [
        ({"changed": False, "results": []}, {"node2": OK}, False),
        ({"changed": False, "results": []}, {"node2": CHANGED}, True),
        ({"changed": True, "results": [CHANGED]}, {"node2": OK}, True),
        ({"changed": False, "skipped": True, "results": []}, {}, False),
    ],
    ids=["nothing", "a host changed", "the coordinator's loop changed", "no host, empty loop"],
)
def test_fetched_is_the_coordinators_loop_or_any_host_that_placed_its_own(fetch, placed, fetched):
    hostvars = {name: {"llama_model_placed": result} for name, result in placed.items()}
    got = render(
        VARS["_llama_model_fetched"], _llama_model_fetch=fetch, _llama_model_placed=list(placed), hostvars=hostvars
    )
    assert got is fetched


# --- entry point export -> the coordinator's export loop ----------------------------------------------------------


def test_a_host_counts_as_exported_only_when_it_published_it():
    hostvars = {"node2": {"llama_model_exported": True}, "node3": {}, "node4": {"llama_model_exported": False}}
    got = render(
        VARS["_llama_model_exported"], _llama_model_remote_hosts=["node2", "node3", "node4"], hostvars=hostvars
    )
    assert got == ["node2"]
    task = next(t for t in tasks("mounts.yml") if "ansible.builtin.include_role" in t)
    loop = render(task["loop"], _llama_model_remote_hosts=["node2", "node3", "node4"], _llama_model_exported=got)
    assert loop == ["node3", "node4"]


# --- what each host reads from the coordinator --------------------------------------------------------------------


PLACEMENT = {
    "model_dir": DIR,
    "verify": "quick",
    "pending": False,
    "place": {"node1": {}, "node2": {}},
    "export": {"servers": ["node2", "node3"], "clients": ["node1", "node2", "node3", "node4"]},
}


def test_each_host_follows_the_coordinators_placement_or_nothing_before_it():
    hostvars = {"node1": {"llama_model_placement": PLACEMENT}, "node2": {}}
    assert render(VARS["_llama_model_placement"], llama_model_coordinator="node1", hostvars=hostvars) == PLACEMENT
    assert render(VARS["_llama_model_placement"], llama_model_coordinator="node2", hostvars=hostvars) == {}
    (task,) = tasks("fetch.yml")
    assert task["when"] == "inventory_hostname in _llama_model_placement.place | default({})"
    for host, runs in (("node2", True), ("node5", False)):
        assert render("{{ " + task["when"] + " }}", inventory_hostname=host, _llama_model_placement=PLACEMENT) is runs
    assert render("{{ " + task["when"] + " }}", inventory_hostname="node2", _llama_model_placement={}) is False


@pytest.mark.parametrize(
    ("pending", "placed", "expected"),
    [(False, {}, False), (True, {}, True), (False, {"node2": CHANGED}, True), (False, {"node2": SKIPPED}, False)],
    ids=["nothing", "the plan predicts changes", "a host changed", "a host skipped"],
)
def test_exports_wait_in_check_mode_while_anything_is_pending(pending, placed, expected):
    hostvars = {"node1": {}, "node2": {}} | {name: {"llama_model_placed": result} for name, result in placed.items()}
    got = render(
        VARS["_llama_model_pending"], _llama_model_placement={**PLACEMENT, "pending": pending}, hostvars=hostvars
    )
    assert got is expected


@pytest.mark.parametrize(
    ("host", "served"),
    [("node1", ["node2", "node3"]), ("node2", ["node3"]), ("node5", [])],
    ids=["the coordinator reads both", "a server reads the other", "no client"],
)
def test_a_client_reads_every_other_serving_host(host, served):
    got = render(VARS["_llama_model_export_served"], inventory_hostname=host, _llama_model_placement=PLACEMENT)
    assert got == served


# --- sshfs_shard_export: a client's own key and the serving hosts' keys -------------------------------------------


KEY = "/etc/llamarpc/sshfs/id_ed25519"


def keys_read(clients, hostvars, memo=None):
    variables = {"sshfs_shard_export_clients": clients, "sshfs_shard_export_client_key": KEY, "hostvars": hostvars}
    if memo is not None:
        variables["_sshfs_shard_export_read_keys"] = memo
    variables["_sshfs_shard_export_published_keys"] = render(
        EXPORT_VARS["_sshfs_shard_export_published_keys"], **variables
    )
    return render(EXPORT_VARS["_sshfs_shard_export_keys_read"], **variables)


def test_a_key_a_client_published_for_this_key_path_counts_as_read():
    hostvars = {
        "node1": {
            "sshfs_shard_export_client_pubkey": {"path": KEY, "public_key": "ssh-ed25519 AAA1", "changed": False}
        },
        "node2": {"sshfs_shard_export_client_pubkey": {"path": "/other/key", "public_key": "ssh-ed25519 AAA2"}},
        "node3": {"sshfs_shard_export_client_pubkey": {"path": KEY, "public_key": None}},  # check mode, no key yet
        "node4": {"sshfs_shard_export_client_pubkey": SKIPPED},
        "node5": {},
    }
    assert keys_read(list(hostvars), hostvars) == {"node1": "ssh-ed25519 AAA1"}
    # ... alongside the keys this run read by delegation (the role from one play host, once per serving host).
    memo = {KEY: {"node5": "ssh-ed25519 AAA5"}, "/other/key": {"node2": "x"}}
    assert keys_read(list(hostvars), hostvars, memo) == {"node5": "ssh-ed25519 AAA5", "node1": "ssh-ed25519 AAA1"}


def test_the_clients_that_published_a_key_are_not_reached_for_it_again():
    client_keys = tasks("client_keys.yml", REPO / "roles/sshfs_shard_export")
    for task in client_keys[:2]:
        assert task["when"] == "item not in _sshfs_shard_export_keys_read"


def test_a_client_pins_the_key_each_serving_host_read_on_itself_in_this_run():
    hostvars = {"node2": {"_sshfs_shard_export_host_key": {"content": "c3NoLWVkMjU1MTk="}}, "node3": {}}
    got = render(
        EXPORT_VARS["_sshfs_shard_export_server_keys"], sshfs_shard_export_servers=["node2", "node3"], hostvars=hostvars
    )
    assert got == {"node2": "c3NoLWVkMjU1MTk="}
    trust = tasks("client_trust.yml", REPO / "roles/sshfs_shard_export")
    slurp = next(t for t in trust if "ansible.builtin.slurp" in t)
    assert slurp["register"] == "_sshfs_shard_export_host_key"
    pin = next(t for t in trust if "ansible.builtin.known_hosts" in t)
    assert pin["when"] == "sshfs_shard_export_pin_on_clients"


# --- site.yml -----------------------------------------------------------------------------------------------------


def test_site_runs_each_hosts_share_at_once_between_the_coordinators_plan_and_mounts():
    site = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text(encoding="utf-8"))
    steps = []
    for play in site:
        for task in play.get("tasks", []):
            args = task.get("ansible.builtin.import_role") or {}
            if args.get("name") == "llamarpc.cluster.llama_model":
                steps.append((play["hosts"], args["tasks_from"], task["tags"]))
    assert steps == [
        ("coordinator:rpc_workers", "report", ["llama_model", "place"]),
        ("coordinator", "placement", ["llama_model"]),
        ("coordinator:rpc_workers", "fetch", ["llama_model", "place"]),
        ("coordinator:rpc_workers", "export", ["llama_model", "mount"]),
        ("coordinator", "mount", ["llama_model"]),
    ]
    assert not any(
        role.get("role") == "llamarpc.cluster.llama_model" for play in site for role in play.get("roles", [])
    )


def test_main_alone_still_does_every_step_in_order():
    main = [task["ansible.builtin.import_tasks"] for task in tasks("main.yml")]
    assert main == ["preflight.yml", "place.yml", "mounts.yml", "facts.yml"]
    assert [task["ansible.builtin.import_tasks"] for task in tasks("place.yml")] == [
        "plan_shards.yml",
        "fetch_others.yml",
    ]
    mount = [task["ansible.builtin.import_tasks"] for task in tasks("mount.yml")]
    assert mount == ["fetch_others.yml", "mounts.yml", "facts.yml"]
    placement = [task.get("ansible.builtin.import_tasks") for task in tasks("placement.yml")]
    assert placement[:2] == ["preflight.yml", "plan_shards.yml"]


@pytest.mark.parametrize(
    ("host", "play_hosts", "itself"),
    [
        ("node2", ["node1", "node2", "node3", "node4"], True),
        ("node2", ["node1", "node2", "node3"], False),  # node4 reads the export and is not here (failed, --limit)
        ("node1", ["node1", "node2", "node3", "node4"], False),  # the coordinator serves no export
        ("node4", ["node1", "node2", "node3", "node4"], False),  # a client only
    ],
    ids=["every client here", "a client missing", "the coordinator", "no shards"],
)
def test_a_host_exports_itself_only_when_every_client_of_its_export_is_in_the_play(host, play_hosts, itself):
    got = render(
        VARS["_llama_model_export_self"],
        inventory_hostname=host,
        ansible_play_hosts=play_hosts,
        _llama_model_placement=PLACEMENT,
    )
    assert got is itself
    export = yaml.safe_load((ROLE / "tasks" / "export.yml").read_text(encoding="utf-8"))[0]["block"]
    main = next(
        task for task in export if "tasks_from" not in task.get("ansible.builtin.include_role", {"tasks_from": 1})
    )
    assert main["when"] == "_llama_model_export_self"
    assert main["vars"]["sshfs_shard_export_pin_on_clients"] is False
    assert "when" not in export[-1]
    assert export[-1]["ansible.builtin.set_fact"] == {"llama_model_exported": "{{ _llama_model_export_self }}"}


# --- the same expressions over Ansible's own hostvars (HostVars: a host's missing variable raises, not None) --------


@pytest.fixture
def real_hostvars(tmp_path):
    inventory_file = tmp_path / "hosts.yml"
    hosts = {"node1": None, "node2": None, "node3": None}
    inventory_file.write_text(
        yaml.safe_dump(
            {"all": {"children": {"coordinator": {"hosts": {"node1": None}}, "rpc_workers": {"hosts": hosts}}}}
        )
    )
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(inventory_file)])
    variables = VariableManager(loader=loader, inventory=inventory)
    # What a run leaves: node1 reported, placed and published the placement; node2's report failed (failed_when:
    # false), its fetch was skipped; node3 ran nothing.
    variables.set_nonpersistent_facts(
        "node1",
        {"llama_model_report": report(), "llama_model_placed": CHANGED, "llama_model_placement": PLACEMENT},
    )
    variables.set_nonpersistent_facts("node2", {"llama_model_report": REPORT_FAILED, "llama_model_placed": SKIPPED})
    return HostVars(inventory=inventory, variable_manager=variables, loader=loader)


def test_over_real_hostvars_only_what_a_host_did_counts(real_hostvars):
    hosts = ["node1", "node2", "node3"]
    reported = render(
        VARS["_llama_model_reported"], _llama_model_hosts=hosts, hostvars=real_hostvars, llama_model_dir=DIR
    )
    assert reported == ["node1"]
    place = {"place": dict.fromkeys(hosts, {})}
    assert render(VARS["_llama_model_placed"], _llama_model_place=place, hostvars=real_hostvars) == ["node1"]
    fetched = render(
        VARS["_llama_model_fetched"],
        _llama_model_fetch={"changed": False, "skipped": True, "results": []},
        _llama_model_placed=["node1"],
        hostvars=real_hostvars,
    )
    assert fetched is True
    assert render(VARS["_llama_model_exported"], _llama_model_remote_hosts=hosts, hostvars=real_hostvars) == []
    for coordinator, placement in (("node1", PLACEMENT), ("node3", {}), ("", {}), ("node9", {})):
        got = render(VARS["_llama_model_placement"], llama_model_coordinator=coordinator, hostvars=real_hostvars)
        assert got == placement, coordinator
