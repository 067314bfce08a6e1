"""Playbooks use roles only through entry points that the role's meta/argument_specs.yml declares, and give them public
options only (issue 39 item 2): no undeclared ``tasks_from`` (``plan.yml`` instead of ``plan``), no private
``_role_*`` variables reaching into a role."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOKS = sorted((REPO / "playbooks").rglob("*.yml"))
ROLES = sorted(path.name for path in (REPO / "roles").iterdir() if (path / "tasks").is_dir())


def role_includes(node):
    """Every include_role / import_role task (its arguments and vars) anywhere in a loaded playbook or task file."""
    if isinstance(node, list):
        for item in node:
            yield from role_includes(item)
    elif isinstance(node, dict):
        for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
            if isinstance(node.get(key), dict):
                yield node[key], node.get("vars") or {}
        for value in node.values():
            yield from role_includes(value)


def entry_points(role):
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    return set((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("argument_specs") or {})


def collection_role(name):
    return name.removeprefix("llamarpc.cluster.") if name.startswith("llamarpc.cluster.") else None


CASES = [
    (path.relative_to(REPO).as_posix(), args, variables)
    for path in PLAYBOOKS
    for args, variables in role_includes(yaml.safe_load(path.read_text(encoding="utf-8")))
    if collection_role(args.get("name", "")) in ROLES
]


def test_the_playbooks_use_roles_through_entry_points():
    assert any("tasks_from" in args for _path, args, _vars in CASES), "no tasks_from found: the walk is broken"


@pytest.mark.parametrize(
    ("path", "args", "variables"), CASES, ids=[f"{c[0]}:{c[1].get('tasks_from', 'main')}" for c in CASES]
)
def test_every_tasks_from_is_a_declared_entry_point(path, args, variables):
    role = collection_role(args["name"])
    entry = args.get("tasks_from", "main")
    assert entry in entry_points(role), f"{path}: {role} has no entry point {entry!r} in meta/argument_specs.yml"
    private = sorted(name for name in variables if name.startswith(f"_{role}_"))
    assert not private, f"{path}: private variables of {role} passed to its entry point {entry}: {private}"


def test_role_includes_finds_nested_tasks_and_their_vars():
    play = [
        {"tasks": [{"block": [{"ansible.builtin.include_role": {"name": "x", "tasks_from": "y"}, "vars": {"a": 1}}]}]}
    ]
    assert list(role_includes(play)) == [({"name": "x", "tasks_from": "y"}, {"a": 1})]
