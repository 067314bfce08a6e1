"""Every package a role installs is named in a ``*_packages`` role variable, and the lab's apt repository can
install every one of them: a role that needs a package the lab does not serve fails here, not in a lab."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
LAB_ROLE = Path(__file__).resolve().parents[3] / "lab" / "roles" / "lab"
INSTALLERS = {"ansible.builtin.apt", "ansible.builtin.package", "llamarpc.cluster.apt_packages"}
# Modules that install packages as apt_packages does, beside what else they do: the option that names the packages.
PACKAGE_OPTIONS = {"llamarpc.cluster.llama_cpp_install": "packages"}


def defaults(role):
    path = (LAB_ROLE if role == "lab" else ROLES / role) / "defaults" / "main.yml"
    return yaml.safe_load(path.read_text()) or {} if path.exists() else {}


def tasks(node):
    """Every task of a tasks file, blocks included."""
    for task in node or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from tasks(task.get(key))


def install_tasks():
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in tasks(yaml.safe_load(path.read_text())):
            module = next((m for m in INSTALLERS | set(PACKAGE_OPTIONS) if m in task), None)
            if module:
                args = dict(task[module])
                if module in PACKAGE_OPTIONS and PACKAGE_OPTIONS[module] not in args:
                    continue  # a call that names no packages installs none (llama_cpp's rollback preflight)
                if module in PACKAGE_OPTIONS:
                    args["name"] = args.pop(PACKAGE_OPTIONS[module])
                yield path.relative_to(ROLES), task, args


def role_package_lists():
    for role_dir in sorted(ROLES.iterdir()):
        # The lab serves Debian's packages; Tailscale's come from Tailscale's repository (the lab fakes its service).
        if role_dir.name in {"lab", "tailscale"}:
            continue
        for name, value in defaults(role_dir.name).items():
            if name.endswith("_packages"):
                yield role_dir.name, name, value


def test_roles_install_only_their_package_variables():
    found = list(install_tasks())
    assert len(found) >= 8  # worker, model, export (server and clients), wireguard (2), open_webui, llama_cpp
    for path, task, args in found:
        name = str(args.get("name", "")).replace(" ", "")
        role = path.parts[0]
        assert name.startswith("{{") and name.endswith("_packages}}"), f"{path}: {task['name']} installs {name!r}"
        for variable in name[2:-2].split("+"):  # one variable, or a sum of them (llama.cpp's and its caller's)
            assert variable.endswith("_packages"), f"{path}: {task['name']} installs {name!r}"
            assert variable in defaults(role), f"{path}: {variable} is not a variable of role {role}"


@pytest.mark.parametrize(("role", "variable", "packages"), list(role_package_lists()))
def test_the_lab_repository_serves_every_role_package(role, variable, packages):
    lab = defaults("lab")
    served = set(lab["lab_packages"]) | set(lab["lab_repo_packages"])
    assert isinstance(packages, list), f"{role}: {variable} is not a list of names"
    # Empty only where a caller fills it (llama_cpp_extra_packages: the RPC worker role passes its own).
    assert packages or variable.endswith("_extra_packages"), f"{role}: {variable} is empty"
    assert set(packages) <= served, f"{role}: {variable} has {sorted(set(packages) - served)}, not in lab_repo_packages"


def test_roles_install_debian_packages_with_apt_packages():
    # ansible.builtin.apt fails in check mode on a host without python3-apt (a fresh cloud image);
    # llamarpc.cluster.apt_packages predicts from dpkg there and runs ansible.builtin.apt for real.
    direct = [f"{path}: {task['name']}" for path, task, _args in install_tasks() if "ansible.builtin.apt" in task]
    assert not direct, direct


def test_installs_are_explicit_about_recommends_and_refresh_the_package_lists():
    # A fresh cloud image has empty package lists, and recommended packages would make the lab and the field differ.
    for path, task, args in install_tasks():
        if "ansible.builtin.apt" in task or "llamarpc.cluster.apt_packages" in task or set(PACKAGE_OPTIONS) & set(task):
            assert args.get("update_cache") is True, f"{path}: {task['name']}"
            assert args.get("install_recommends") is False, f"{path}: {task['name']}"
