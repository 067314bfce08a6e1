"""The preflights of the mesh roles (wireguard, tailscale, mesh's check): one rule per item of one assert's loop,
rendered by Ansible's own templating from the role's task; each rule fails alone, with its own message."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[3]


def render_rules(path, name, context, role_vars=()):
    """``{rule: (ok, fail message)}`` of the assert task ``name`` in ``path`` under ``context``."""
    tasks = yaml.safe_load((REPO / path).read_text(encoding="utf-8"))
    task = next(task for task in tasks if task["name"] == name)
    context = dict(context)

    def render(expression):
        return Templar(loader=DataLoader(), variables=context).template(trust_as_template(expression))

    variables = yaml.safe_load((REPO / path).parents[1].joinpath("vars", "main.yml").read_text(encoding="utf-8"))
    for var in role_vars:
        context[var] = render(variables[var])
    for var, expression in (task.get("vars") or {}).items():
        context[var] = render(expression)
    assert task["ansible.builtin.assert"]["that"] == "item.ok"
    assert task["loop_control"]["label"] == "{{ item.rule }}"
    rules = {}
    for item in task["loop"]:
        ok = render(item["ok"])
        assert isinstance(ok, bool), f"rule {item['rule']}: {ok!r} is not a boolean"
        context["item"] = {"msg": render(item["msg"])}
        rules[item["rule"]] = (ok, render(task["ansible.builtin.assert"]["fail_msg"]))
    return rules


def only_failure(rules):
    failed = {name: msg for name, (ok, msg) in rules.items() if not ok}
    assert len(failed) <= 1, f"more than one rule failed: {failed}"
    return next(iter(failed.items()), (None, None))


WIREGUARD = {
    "inventory_hostname": "node1",
    "ansible_host": "10.213.0.11",
    "wireguard_address": "10.99.0.11",
    "wireguard_subnet": "10.99.0.0/24",
    "wireguard_endpoint": "",
    "wireguard_interface": "wg-llamarpc",
    "wireguard_port": 51820,
    "wireguard_mtu": 1420,
    "wireguard_persistent_keepalive": 25,
    "wireguard_config_dir": "/etc/wireguard",
}


def wireguard(**overrides):
    return render_rules(
        "roles/wireguard/tasks/preflight.yml",
        "Check the WireGuard settings",
        {**WIREGUARD, **overrides},
        ["_wireguard_ipv4_pattern", "_wireguard_endpoint"],
    )


def test_wireguard_good_settings_pass():
    assert only_failure(wireguard()) == (None, None)


@pytest.mark.parametrize(
    ("overrides", "rule", "message"),
    [
        ({"wireguard_address": "10.99.0.300"}, "address", "numeric IPv4 mesh address (wireguard_address, got '10.99"),
        ({"wireguard_subnet": "10.99.0.0/33"}, "subnet", "wireguard_subnet must be an IPv4 subnet"),
        ({"wireguard_subnet": "10.99.0/24"}, "subnet", "wireguard_subnet must be an IPv4 subnet"),
        ({"ansible_host": ""}, "endpoint", "an endpoint the other hosts can reach"),
        ({"wireguard_interface": "wg-llamarpc-far-too-long"}, "interface", "wireguard_interface must be at most 15"),
        ({"wireguard_port": 0}, "port", "wireguard_port must be in 1-65535 (got 0)"),
        ({"wireguard_mtu": 1279}, "mtu", "wireguard_mtu must be in 1280-9000 (got 1279)"),
        ({"wireguard_mtu": 9001}, "mtu", "wireguard_mtu must be in 1280-9000 (got 9001)"),
        ({"wireguard_port": 65536}, "port", "wireguard_port must be in 1-65535 (got 65536)"),
        ({"wireguard_persistent_keepalive": -1}, "keepalive", "wireguard_persistent_keepalive must be in 0-65535"),
        ({"wireguard_config_dir": "etc/wireguard"}, "config dir", "wireguard_config_dir must be an absolute path"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_wireguard_each_rule_fails_alone_with_its_own_message(overrides, rule, message):
    failed, msg = only_failure(wireguard(**overrides))
    assert failed == rule and msg.startswith("node1: ") and message in msg


def tailscale(exists, install, repo):
    return render_rules(
        "roles/tailscale/tasks/preflight.yml",
        "Check that the package can be installed",
        {
            "inventory_hostname": "node1",
            "_tailscale_bin": {"stat": {"exists": exists}},
            "tailscale_install": install,
            "tailscale_repo_url": repo,
        },
    )


@pytest.mark.parametrize(
    ("exists", "install", "repo", "rule", "message"),
    [
        (True, True, "", None, None),
        (True, False, "", None, None),
        (False, True, "https://mirror.invalid/stable", None, None),
        (False, True, "", "repository", "tailscale is not installed and tailscale_repo_url is empty"),
        (False, False, "https://mirror.invalid/stable", "installed", "tailscale_install is false"),
    ],
    ids=["installed", "installed-by-hand", "from-repository", "no-repository", "not-installed-not-installing"],
)
def test_tailscale_install_rules(exists, install, repo, rule, message):
    failed, msg = only_failure(tailscale(exists, install, repo))
    assert failed == rule
    if rule:
        assert msg.startswith("node1: ") and message in msg


MESH = {
    "inventory_hostname": "node1",
    "llamarpc_mesh_provider": "wireguard",
    "ansible_play_hosts": ["node1", "node2"],
}


def mesh(mine, theirs="10.99.0.12"):
    hostvars = {"node1": {}, "node2": {"llamarpc_mesh_address": theirs}}
    context = dict(MESH, hostvars=hostvars)
    if mine is not None:
        context["llamarpc_mesh_address"] = mine
        hostvars["node1"]["llamarpc_mesh_address"] = mine
    return render_rules(
        "roles/mesh/tasks/check.yml",
        "Every host has one IPv4 mesh address, no two the same",
        context,
        ["_mesh_ipv4_pattern"],
    )


@pytest.mark.parametrize(
    ("mine", "theirs", "rule", "message"),
    [
        ("10.99.0.11", "10.99.0.12", None, None),
        (None, "10.99.0.12", "set", "left no llamarpc_mesh_address on this host"),
        ("10.99.0", "10.99.0.12", "IPv4", "left llamarpc_mesh_address 10.99.0, which is not an IPv4 address"),
        ("10.99.0.11", "10.99.0.11", "unique", "which another host of the play has too"),
    ],
    ids=["good", "unset", "not-ipv4", "shared"],
)
def test_mesh_address_rules(mine, theirs, rule, message):
    failed, msg = only_failure(mesh(mine, theirs))
    assert failed == rule
    if rule:
        assert msg.startswith("node1: the wireguard provider ") and message in msg
