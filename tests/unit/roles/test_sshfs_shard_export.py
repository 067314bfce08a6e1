"""The sshfs_shard_export role: its mount task (the README promises that a view which shows another directory than the
export directory is mounted anew, and that a second run with an unchanged unit and a current view restarts nothing -
decided by sshfs_export_view, tested in tests/unit/plugins/modules/test_sshfs_export_view.py), its unit, and its
preflight's rules rendered by Ansible's own templating from the role's task."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "sshfs_shard_export"


def test_the_mount_task_passes_the_view_the_directory_and_the_unit_change():
    tasks = yaml.safe_load((ROLE / "tasks" / "server.yml").read_text(encoding="utf-8"))
    block = next(task for task in tasks if "block" in task)["block"]
    template = next(task for task in block if task.get("ansible.builtin.template", {}).get("src") == "bind.mount.j2")
    mount = next(task for task in block if "llamarpc.cluster.sshfs_export_view" in task)
    args = mount["llamarpc.cluster.sshfs_export_view"]
    assert args["path"] == "{{ _sshfs_shard_export_view }}"
    assert args["src"] == "{{ sshfs_shard_export_dir }}"
    assert args["unit_changed"] == f"{{{{ {template['register']} is changed }}}}"
    assert block.index(template) < block.index(mount)


def test_the_unit_is_a_read_only_bind_of_the_directory_named_after_its_mount_point():
    unit = (ROLE / "templates" / "bind.mount.j2").read_text(encoding="utf-8")
    assert "Options=bind,ro\n" in unit
    assert "What={{ sshfs_shard_export_dir }}\n" in unit
    assert "Where={{ _sshfs_shard_export_view }}\n" in unit
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    assert "llamarpc.cluster.systemd_escape_path" in variables["_sshfs_shard_export_unit"]


# The preflight: one rule per item of one assert's loop, each failing with its own message.

GOOD = {
    "inventory_hostname": "node2",
    "groups": {"all": ["node1", "node2", "node3"]},
    "sshfs_shard_export_server": "node2",
    "sshfs_shard_export_dir": "/data/home/pool/work",
    "sshfs_shard_export_root": "/srv/llamarpc/export",
    "sshfs_shard_export_name": "shards",
    "sshfs_shard_export_user": "llamarpc-shards",
    "sshfs_shard_export_clients": ["node1"],
    "sshfs_shard_export_client_key": "/etc/llamarpc/sshfs/id_ed25519",
    "sshfs_shard_export_client_known_hosts": "/etc/llamarpc/sshfs/known_hosts",
}


def preflight_rules(**overrides):
    """Each rule of the variables' check, rendered as Ansible renders its loop: ``{rule: (ok, fail message)}``."""
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text(encoding="utf-8"))
    task = next(task for task in tasks if task["name"] == "Check the variables")
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    context = {**GOOD, **overrides}

    def render(expression):
        return Templar(loader=DataLoader(), variables=context).template(trust_as_template(expression))

    context["_sshfs_shard_export_root_parts"] = render(role_vars["_sshfs_shard_export_root_parts"])
    for name, expression in task["vars"].items():
        context[name] = render(expression)
    rules = {}
    for item in task["loop"]:
        ok = render(item["ok"])
        assert isinstance(ok, bool), f"rule {item['rule']}: {ok!r} is not a boolean"
        context["item"] = {"msg": render(item["msg"])}
        rules[item["rule"]] = (ok, render(task["ansible.builtin.assert"]["fail_msg"]))
    assert task["ansible.builtin.assert"]["that"] == "item.ok"
    assert task["loop_control"]["label"] == "{{ item.rule }}"
    return rules


def test_good_variables_pass_every_rule():
    rules = preflight_rules()
    assert len(rules) == 15
    assert [rule for rule, (ok, _msg) in rules.items() if not ok] == []


@pytest.mark.parametrize(
    ("overrides", "rule", "message"),
    [
        ({"sshfs_shard_export_server": "node9"}, "server", "node9 is not a host of the inventory"),
        ({"sshfs_shard_export_dir": "data/shards"}, "dir absolute", "sshfs_shard_export_dir must be an absolute"),
        ({"sshfs_shard_export_dir": "/"}, "dir not /", "sshfs_shard_export_dir must not be /"),
        ({"sshfs_shard_export_root": "srv/export"}, "root absolute", "sshfs_shard_export_root must be an absolute"),
        ({"sshfs_shard_export_root": "//"}, "root not /", "sshfs_shard_export_root must not be /"),
        ({"sshfs_shard_export_root": "/srv/../export"}, "root without . or ..", "must not contain . or .."),
        (
            {"sshfs_shard_export_root": "/data/home/pool/work/"},
            "root is not dir",
            "must differ (both /data/home/pool/work)",
        ),
        (
            {"sshfs_shard_export_dir": "/srv/llamarpc/export/x"},
            "dir not below root",
            "must not be below sshfs_shard_export_root",
        ),
        (
            {"sshfs_shard_export_root": "/data/home/pool/work/x"},
            "root not below dir",
            "must not be below sshfs_shard_export_dir",
        ),
        ({"sshfs_shard_export_name": "../up"}, "name", "sshfs_shard_export_name must be a plain name"),
        ({"sshfs_shard_export_user": "Pool"}, "user", "sshfs_shard_export_user must be a user name"),
        ({"sshfs_shard_export_clients": []}, "clients given", "must name at least one client"),
        ({"sshfs_shard_export_clients": ["node1", "ghost"]}, "clients in inventory", "(unknown: ghost)"),
        ({"sshfs_shard_export_client_key": "id_ed25519"}, "client key absolute", "client_key must be an absolute"),
        ({"sshfs_shard_export_client_known_hosts": "kh"}, "known_hosts absolute", "known_hosts must be an absolute"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_each_rule_fails_alone_with_its_own_message(overrides, rule, message):
    rules = preflight_rules(**overrides)
    failed = {name: msg for name, (ok, msg) in rules.items() if not ok}
    assert list(failed) == [rule]
    server = overrides.get("sshfs_shard_export_server", "node2")
    assert failed[rule].startswith(f"{server}: ") and message in failed[rule]
    # No other rule's message says the same.
    assert all(message not in msg for name, (_ok, msg) in rules.items() if name != rule)
