"""The controller side of llama_cpp_install: a node that has the build costs one module run (no temporary directory, no
copy, no apt); only a difference brings apt (with apt_packages' arguments) or the archive's copy and a second run."""

from __future__ import annotations

import pytest
import yaml
from action_harness import run_action

from ansible_collections.llamarpc.cluster.plugins.action import llama_cpp_install as action_module
from ansible_collections.llamarpc.cluster.plugins.doc_fragments.apt_install import ModuleDocFragment as AptDoc
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_install import ARGUMENT_SPEC
from ansible_collections.llamarpc.cluster.plugins.modules import llama_cpp_install as doc

ARGS = {
    "install_dir": "/opt/llamarpc/llama.cpp",
    "key": "k" * 32,
    "archive": "/ctl/cache/bin.tar.gz",
    "packages": ["libgomp1"],
    "update_cache": True,
    "cache_valid_time": 3600,
    "install_recommends": False,
}
FACTS = {"bin_dir": "/opt/llamarpc/llama.cpp/" + "k" * 32 + "/bin", "installed": True}


def _spec(options):
    keys = ("type", "elements", "default", "required", "choices")
    return {name: {k: v for k, v in spec.items() if k in keys} for name, spec in options.items()}


def test_the_argument_spec_is_the_documented_one():
    documented = {**yaml.safe_load(doc.DOCUMENTATION)["options"], **yaml.safe_load(AptDoc.DOCUMENTATION)["options"]}
    assert _spec(documented) == _spec(ARGUMENT_SPEC)
    assert yaml.safe_load(doc.EXAMPLES)[0]["llamarpc.cluster.llama_cpp_install"]["key"]
    assert all({"description", "returned", "type"} <= set(v) for v in yaml.safe_load(doc.RETURN).values())


def run(answers, check_mode=False, args=None):
    """The action with the node's answers (one per module run, in order); returns (result, calls made)."""
    return run_action(action_module.ActionModule, ARGS if args is None else args, answers, check_mode=check_mode)


def test_a_node_that_has_everything_costs_one_module_run():
    result, calls = run([{"changed": False, "packages_missing": [], "need_archive": False, "msg": "ok", **FACTS}])
    assert [call[:2] for call in calls] == [("module", "llamarpc.cluster.llama_cpp_install")]
    assert calls[0][2].get("src") is None
    assert result["changed"] is False and result["bin_dir"] == FACTS["bin_dir"]


def test_check_mode_is_the_one_module_run_whatever_it_finds():
    reply = {"changed": True, "packages_missing": ["libgomp1"], "msg": "would unpack", "installed": False}
    result, calls = run([reply], check_mode=True)
    assert len(calls) == 1 and result["changed"] and result["installed"] is False


def test_missing_packages_are_installed_with_apt_packages_arguments():
    first = {"changed": False, "packages_missing": ["libgomp1"], "need_archive": False, "msg": "ok", **FACTS}
    result, calls = run([first, {"changed": True, "diff": {"prepared": "libgomp1"}}])
    assert calls[1] == (
        "module",
        "ansible.builtin.apt",
        {
            "name": ["libgomp1"],
            "state": "present",
            "update_cache": True,
            "cache_valid_time": 3600,
            "install_recommends": False,
        },
    )
    assert result["changed"] and result["diff"] == [{"prepared": "libgomp1"}] and "installed libgomp1" in result["msg"]


def test_a_failed_package_install_stops_before_the_unpack():
    first = {"changed": False, "packages_missing": ["libgomp1"], "need_archive": True, "msg": "ok", **FACTS}
    result, calls = run([first, {"failed": True, "msg": "No package matching 'libgomp1'"}])
    assert result["failed"] and "libgomp1" in result["msg"] and len(calls) == 2


def test_a_node_without_the_build_gets_the_archive_copied_then_unpacked():
    first = {"changed": False, "packages_missing": [], "need_archive": True, "msg": "", **FACTS}
    second = {"changed": True, "unpacked": True, "msg": "unpacked", "diff": [{"before": "", "after": "k\n"}], **FACTS}
    result, calls = run([first, second])
    kinds = [call[0] for call in calls]
    assert kinds == ["module", "tmp", "transfer", "perms", "module"]
    assert calls[2][1] == ARGS["archive"] and calls[4][2]["src"] == calls[2][2]
    assert result["changed"] and result["unpacked"] and result["diff"] == [{"before": "", "after": "k\n"}]


def test_without_an_archive_a_missing_build_is_an_error_not_a_guess():
    first = {"changed": False, "packages_missing": [], "need_archive": True, "msg": "", **FACTS}
    result, calls = run([first], args={**ARGS, "archive": None})
    assert result["failed"] and "no archive was given" in result["msg"] and len(calls) == 1


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_module_failure_is_returned_as_is(check_mode):
    result, calls = run([{"failed": True, "msg": "dpkg-query failed: x"}], check_mode=check_mode)
    assert result["failed"] and result["msg"] == "dpkg-query failed: x" and len(calls) == 1


def test_a_rollback_is_one_module_run_and_copies_nothing():
    args = {**ARGS, "state": "previous", "key": "", "archive": None}
    reply = {"changed": True, "packages_missing": [], "need_archive": False, "rollback_to": "k" * 32, "msg": "made"}
    result, calls = run([{**reply, **FACTS}], args=args)
    assert [call[0] for call in calls] == ["module"] and calls[0][2]["state"] == "previous"
    assert result["changed"] and result["rollback_to"] == "k" * 32
