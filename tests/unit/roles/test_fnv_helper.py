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


def helper_blocks():
    """The two tasks of configure.yml that install the helper: (shipped block, compile fallback's include)."""
    tasks = load(WORKER / "tasks" / "configure.yml")
    shipped = next(t for t in tasks if t["name"] == "Install the verifier's hashing helper built with llama.cpp")
    fallback = next(t for t in tasks if t["name"] == "Build the verifier's hashing helper")
    return shipped, fallback


def fallback_tasks():
    """The compile fallback's tasks (the file configure.yml includes)."""
    _shipped, fallback = helper_blocks()
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
    shipped, _fallback = helper_blocks()
    copy = shipped["block"][0]["ansible.builtin.copy"]
    assert copy["src"] == "{{ llama_cpp_bin_dir }}/llamarpc-fnv1a"
    assert copy["remote_src"] is True and copy["mode"] == "0755" and copy["owner"] == "root"
    expression = load(WORKER / "vars" / "main.yml")["_llama_rpc_worker_hasher_shipped"]
    assert render(expression, llama_cpp_helper_names=names) is True


@pytest.mark.parametrize(("names", "shipped"), [(["llamarpc-fnv1a"], True), ([], False), (["other-tool"], False)])
def test_the_worker_compiles_only_when_llama_cpp_did_not_ship_the_helper(names, shipped):
    """Method source ships it; prebuilt and path (llama_cpp_helper_names empty) keep the compile fallback."""
    variables = {
        "llama_rpc_worker_cache": True,
        "llama_rpc_worker_cache_verify_fast": True,
        "_llama_rpc_worker_hasher_shipped": render(
            load(WORKER / "vars" / "main.yml")["_llama_rpc_worker_hasher_shipped"], llama_cpp_helper_names=names
        ),
    }
    shipped_block, fallback = helper_blocks()
    assert render(when(shipped_block), **variables) is shipped
    assert render(when(fallback), **variables) is not shipped
    compile_block = next(task for task in fallback_tasks() if "block" in task)["block"]
    assert compile_block[0]["llamarpc.cluster.apt_packages"]["name"] == "{{ llama_rpc_worker_build_packages }}"
    assert compile_block[1]["ansible.builtin.command"]["argv"][0] == "g++"


def proof_runs(check_mode, copy):
    shipped, _fallback = helper_blocks()
    proof = shipped["block"][1]
    assert proof["check_mode"] is False and "85944171f73967e8" in proof["failed_when"]
    return render(when(proof), ansible_check_mode=check_mode, _llama_rpc_worker_hasher_copy=copy)


def test_the_shipped_helper_is_proven_on_every_real_run():
    assert proof_runs(False, {"changed": True}) is True
    assert proof_runs(False, {"changed": False}) is True  # a rerun: a helper that failed the proof once fails again


def test_check_mode_proves_only_a_helper_that_is_in_place():
    assert proof_runs(True, {"changed": False}) is True
    assert proof_runs(True, {"changed": True}) is False  # not copied yet: the file there is the one a real run replaces
    # Before this build's first install (llama_cpp_installed false) the copy is skipped: nothing to ask yet.
    assert proof_runs(True, {"changed": False, "skipped": True}) is False
    shipped, _fallback = helper_blocks()
    assert shipped["block"][0]["when"] == "llama_cpp_installed"
