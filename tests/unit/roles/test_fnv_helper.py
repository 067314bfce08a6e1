"""The verifier's hashing helper, built with llama.cpp and shipped to the workers: one source for both roles, the name
the build gives it is the one the worker copies, and the worker's choice between the shipped helper and its compile
fallback, rendered by Ansible's own templating from the roles' files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_build as lb

REPO = Path(__file__).resolve().parents[3]
LLAMA_CPP = REPO / "roles" / "llama_cpp"
WORKER = REPO / "roles" / "llama_rpc_worker"
SOURCE = WORKER / "files" / "llamarpc_fnv1a.cpp"


def load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def render(expression, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def when(task):
    """A task's condition as an expression to render."""
    return "{{ " + task["when"] + " }}"


def helper_tasks():
    """The two tasks of configure.yml for the helper: (rpc_worker_binaries' task, the compile fallback's include)."""
    tasks = load(WORKER / "tasks" / "configure.yml")
    shipped = next(t for t in tasks if "llamarpc.cluster.rpc_worker_binaries" in t)
    fallback = next(t for t in tasks if t["name"] == "Build the verifier's hashing helper")
    return shipped, fallback


def worker_var(name, **variables):
    """One of the worker role's vars/main.yml, rendered with ``variables``."""
    return render(load(WORKER / "vars" / "main.yml")[name], **variables)


def fallback_tasks():
    """The compile fallback's tasks (the file configure.yml includes)."""
    _shipped, fallback = helper_tasks()
    return load(WORKER / "tasks" / fallback["ansible.builtin.include_tasks"])


def llama_cpp_helpers():
    """llama_cpp_helpers as the llama_cpp role's tasks see it (role_path is the role's directory)."""
    return [
        render(path, role_path=str(LLAMA_CPP))
        for path in load(LLAMA_CPP / "defaults" / "main.yml")["llama_cpp_helpers"]
    ]


def test_llama_cpp_builds_the_worker_roles_own_source():
    assert [Path(path).resolve() for path in llama_cpp_helpers()] == [SOURCE]
    spec = load(LLAMA_CPP / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]["llama_cpp_helpers"]
    assert spec["default"] == load(LLAMA_CPP / "defaults" / "main.yml")["llama_cpp_helpers"]
    tracked = subprocess.run(["git", "ls-files", "*fnv1a*.cpp"], cwd=REPO, capture_output=True, text=True, check=True)
    assert tracked.stdout.split() == [str(SOURCE.relative_to(REPO))], "one source of the helper, not copies"


def test_the_name_the_build_gives_is_the_one_the_worker_copies():
    helpers = llama_cpp_helpers()
    names = [helper["name"] for helper in lb.helper_sources(helpers)]  # what the build cache action returns
    assert names == ["llamarpc-fnv1a"]
    install = next(
        task for task in load(LLAMA_CPP / "tasks" / "source.yml") if "llamarpc.cluster.llama_cpp_install" in task
    )
    assert install["llamarpc.cluster.llama_cpp_install"]["helpers"] == "{{ _llama_cpp_cached.helpers }}"
    shipped, _fallback = helper_tasks()
    args = shipped["llamarpc.cluster.rpc_worker_binaries"]
    on = {"_llama_rpc_worker_hasher_ship": True, "_llama_rpc_worker_hasher": "/usr/local/lib/llamarpc/llamarpc-fnv1a"}
    assert render(args["helper_src"], llama_cpp_bin_dir="/opt/b/bin", **on) == "/opt/b/bin/llamarpc-fnv1a"
    assert render(args["helper"], **on) == "/usr/local/lib/llamarpc/llamarpc-fnv1a"
    assert worker_var("_llama_rpc_worker_hasher_shipped", llama_cpp_helper_names=names) is True


@pytest.mark.parametrize(("names", "shipped"), [(["llamarpc-fnv1a"], True), ([], False), (["other-tool"], False)])
def test_the_worker_compiles_only_when_llama_cpp_did_not_ship_the_helper(names, shipped):
    """Method source ships it; prebuilt and path (llama_cpp_helper_names empty) keep the compile fallback."""
    variables = {
        "llama_rpc_worker_cache": True,
        "llama_rpc_worker_cache_verify_fast": True,
    }
    variables["_llama_rpc_worker_hasher_shipped"] = worker_var(
        "_llama_rpc_worker_hasher_shipped", llama_cpp_helper_names=names
    )
    _shipped, fallback = helper_tasks()
    ship = worker_var("_llama_rpc_worker_hasher_ship", **variables)
    assert ship is shipped
    assert render(when(fallback), **variables) is not shipped
    compile_block = next(task for task in fallback_tasks() if "block" in task)["block"]
    assert compile_block[0]["llamarpc.cluster.apt_packages"]["name"] == "{{ llama_rpc_worker_build_packages }}"
    assert compile_block[1]["ansible.builtin.command"]["argv"][0] == "g++"


def test_without_the_shipped_helper_the_module_neither_copies_nor_proves_one():
    """rpc_worker_binaries proves the helper on every run, in check mode only one in place (its unit tests); here: the
    role hands it no helper when the compile fallback owns it."""
    shipped, _fallback = helper_tasks()
    args = shipped["llamarpc.cluster.rpc_worker_binaries"]
    off = {"_llama_rpc_worker_hasher_ship": False, "_llama_rpc_worker_hasher": "/h", "llama_cpp_bin_dir": "/b"}
    omit = "__omit_place_holder__"
    assert render(args["helper"], omit=omit, **off) == omit
    assert render(args["helper_src"], omit=omit, **off) == omit
