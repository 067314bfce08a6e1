"""The controller-side actions of the llama.cpp build: the build-host check and the controller's cache."""

from __future__ import annotations

import tarfile
from types import SimpleNamespace
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.action import llama_cpp_build_cache as cache_action
from ansible_collections.llamarpc.cluster.plugins.action import llama_cpp_build_check as check_action
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_platform as lp
from ansible_collections.llamarpc.cluster.plugins.modules import llama_cpp_build_cache as cache_doc
from ansible_collections.llamarpc.cluster.plugins.modules import llama_cpp_build_check as check_doc

DEBIAN12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nID=debian\n'
CHECKSUM = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"


def plat(arch="x86_64", glibc="2.36"):
    return lp.platform_from(arch, DEBIAN12, "glibc", glibc, ())


def _spec(options):
    return {
        name: {k: v for k, v in spec.items() if k in ("type", "elements", "default", "required", "choices")}
        for name, spec in options.items()
    }


@pytest.mark.parametrize(("action", "doc"), [(cache_action, cache_doc), (check_action, check_doc)])
def test_the_argument_spec_is_the_documented_one(action, doc):
    assert _spec(yaml.safe_load(doc.DOCUMENTATION)["options"]) == _spec(action.ARGUMENT_SPEC)


def run(module, args, task_vars, check_mode=False):
    task = SimpleNamespace(args=args, check_mode=check_mode, async_val=0, diff=False)
    action = module.ActionModule.__new__(module.ActionModule)
    action._task = task
    action._templar = SimpleNamespace(template=lambda value: value)

    def validate(self, argument_spec, **kwargs):
        outcome = ArgumentSpecValidator(argument_spec, **kwargs).validate(dict(task.args))
        if outcome.error_messages:
            raise AnsibleActionFail(outcome.error_messages[0])
        return outcome, outcome.validated_parameters

    with (
        mock.patch.object(ActionBase, "run", lambda self, tmp=None, task_vars=None: {}),
        mock.patch.object(module.ActionModule, "validate_argument_spec", validate),
    ):
        return action.run(task_vars=task_vars)


def test_check_passes_and_fails_naming_the_hosts():
    # A module's facts are read from hostvars[host].ansible_facts (2.20 deprecates them as top-level variables).
    hostvars = {
        "node1": {"ansible_facts": {"llamarpc_platform": plat()}},
        "node2": {"ansible_facts": {"llamarpc_platform": plat(glibc="2.31")}},
    }
    ok = run(check_action, {"build_host": "node1", "nodes": ["node1"]}, {"hostvars": hostvars})
    assert not ok.get("failed") and ok["problems"] == []
    bad = run(check_action, {"build_host": "node1", "nodes": ["node1", "node2"]}, {"hostvars": hostvars})
    assert bad["failed"] and "node2 (glibc 2.31)" in bad["msg"] and "nothing has been built" in bad["msg"]


def test_check_without_facts_says_what_to_run():
    with pytest.raises(AnsibleActionFail, match="llama_cpp_platform_facts"):
        hostvars = {"node1": {"ansible_facts": {}}}
        run(check_action, {"build_host": "localhost", "nodes": ["node1"]}, {"hostvars": hostvars})


def cache_args(tmp_path, **more):
    return {
        "cache_dir": str(tmp_path / "ctl"),
        "checksum": CHECKSUM,
        "targets": ["ggml-rpc-server", "llama-server"],
        "platform": plat(),
        **more,
    }


def test_cache_miss_then_store_then_hit(tmp_path):
    missed = run(cache_action, cache_args(tmp_path), {})
    assert missed["hit"] is False and missed["reason"] == "no entry" and not missed["changed"]
    archive = tmp_path / "bin.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(__file__, arcname="llama-server")
    build = {"key": "b" * 64, "rpc_server": "ggml-rpc-server", "rpc_protocol": {"version": "7.0.0"}, "manifest": {}}
    store = cache_args(tmp_path, state="store", build=build, build_host="node1", archive=str(archive))
    assert run(cache_action, store, {}, check_mode=True)["hit"] is False  # check mode stores nothing
    stored = run(cache_action, store, {})
    assert stored["changed"] and stored["hit"] and stored["key"] == "b" * 64
    assert stored["entry_dir"] == missed["entry_dir"] and stored["archive"].startswith(missed["entry_dir"])
    assert run(cache_action, store, {})["changed"] is False
    hit = run(cache_action, cache_args(tmp_path), {})
    assert hit["hit"] and hit["rpc_server"] == "ggml-rpc-server" and hit["rpc_protocol"] == {"version": "7.0.0"}
    assert hit["record"]["build_host"] == "node1"
    other = run(cache_action, cache_args(tmp_path, platform=plat(glibc="2.39")), {})
    assert other["hit"] is False


def test_a_stored_build_is_durable_archive_then_record(tmp_path, sync_trace):
    """The archive is fsynced before its rename and the entry's directory after; build.json (the entry is complete
    once it is there) the same, and after the archive."""
    archive = tmp_path / "bin.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(__file__, arcname="llama-server")
    build = {"key": "c" * 64, "rpc_server": "ggml-rpc-server", "rpc_protocol": {"version": "7.0.0"}, "manifest": {}}
    stored = run(
        cache_action, cache_args(tmp_path, state="store", build=build, build_host="n1", archive=str(archive)), {}
    )
    entry = tmp_path / stored["entry_dir"]
    sync_trace.assert_durable(entry / lp.ARCHIVE)
    sync_trace.assert_durable(entry / lp.RECORD)
    targets = [call[2] for call in sync_trace.calls if call[0] == "rename"]
    assert targets == [str(entry / lp.ARCHIVE), str(entry / lp.RECORD)]


def test_store_needs_the_archive_on_the_controller(tmp_path):
    store = cache_args(tmp_path, state="store", build={"key": "b" * 64}, build_host="node1", archive="/nonexistent")
    with pytest.raises(AnsibleActionFail, match="not on the controller"):
        run(cache_action, store, {})


def test_a_cached_build_without_the_helper_is_not_a_hit_for_a_request_with_it(tmp_path):
    """A build stored before helpers existed (or with another helper source) must not ship to a request for one."""
    archive = tmp_path / "bin.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(__file__, arcname="llama-server")
    store = cache_args(tmp_path, state="store", build={"key": "b" * 64}, build_host="node1", archive=str(archive))
    run(cache_action, store, {})
    plain = run(cache_action, cache_args(tmp_path), {})
    assert plain["hit"] is True
    source = tmp_path / "llamarpc_fnv1a.cpp"
    source.write_text("int main() { return 0; }\n")
    with_helper = run(cache_action, cache_args(tmp_path, helpers=[str(source)]), {})
    assert with_helper["hit"] is False and with_helper["controller_key"] != plain["controller_key"]
    # The program names the role installs from (llama_cpp_helper_names), named by the build's own rule, hit or not.
    assert (plain["helpers"], with_helper["helpers"]) == ([], ["llamarpc-fnv1a"])
    with pytest.raises(AnsibleActionFail, match="does not exist"):
        run(cache_action, cache_args(tmp_path, helpers=[str(tmp_path / "gone.cpp")]), {})


def test_a_build_without_a_patch_is_stored_with_one_warning_and_hits_with_its_outcome(tmp_path):
    archive = tmp_path / "bin.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(__file__, arcname="llama-server")
    patch = tmp_path / "rpc-tensor-hashes.patch"
    patch.write_text("--- a/x\n+++ b/x\n")
    outcome = [{"name": patch.name, "sha256": "d" * 64, "applied": False, "reason": "does not apply to this source: x"}]
    build = {"key": "b" * 64, "rpc_server": "ggml-rpc-server", "manifest": {"patches": outcome}}
    args = cache_args(tmp_path, patches=[str(patch)])
    plain = run(cache_action, cache_args(tmp_path), {})
    assert run(cache_action, args, {})["controller_key"] != plain["controller_key"]
    stored = run(cache_action, dict(args, state="store", build=build, build_host="node1", archive=str(archive)), {})
    assert stored["warnings"] == [f"llama.cpp was built without the patch {patch.name}: it {outcome[0]['reason']}"]
    assert stored["patches"] == outcome
    hit = run(cache_action, args, {})
    assert hit["hit"] and hit["patches"] == outcome and "warnings" not in hit
    # An applied patch is stored without a word.
    applied = [dict(outcome[0], applied=True, reason="")]
    build = dict(build, manifest={"patches": applied})
    again = run(cache_action, dict(args, state="store", build=build, build_host="node1", archive=str(archive)), {})
    assert again["changed"] and again["patches"] == applied and "warnings" not in again
