"""managed_files, systemd_units, gguf_shard_check, llama_server_check, llama_server_serving, gguf_vocabulary_check,
llama_cluster_plan, rpc_worker_binaries, rpc_worker_cutover and tensor_cache_hashes:
DOCUMENTATION says what the argument spec takes (types, elements, required, defaults, suboptions), and EXAMPLES and
RETURN are YAML (what ansible-test sanity's validate-modules checks)."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _managed_files
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_server_check, _llama_serving
from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _vocabulary_check
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _plan_run
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _worker_binaries, _worker_cutover
from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_check
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd import _systemd_units
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_hashes
from ansible_collections.llamarpc.cluster.plugins.modules import (
    gguf_shard_check,
    gguf_vocabulary_check,
    llama_cluster_plan,
    llama_server_check,
    llama_server_serving,
    managed_files,
    rpc_worker_binaries,
    rpc_worker_cutover,
    systemd_units,
    tensor_cache_hashes,
)

MODULES = [
    (managed_files, _managed_files.ARGUMENT_SPEC),
    (systemd_units, _systemd_units.ARGUMENT_SPEC),
    (gguf_shard_check, _shard_check.ARGUMENT_SPEC),
    (llama_server_check, _llama_server_check.ARGUMENT_SPEC),
    (llama_server_serving, _llama_serving.ARGUMENT_SPEC),
    (gguf_vocabulary_check, _vocabulary_check.ARGUMENT_SPEC),
    (llama_cluster_plan, _plan_run.ARGUMENT_SPEC),
    (rpc_worker_binaries, _worker_binaries.ARGUMENT_SPEC),
    (rpc_worker_cutover, _worker_cutover.ARGUMENT_SPEC),
    (tensor_cache_hashes, _tensor_hashes.ARGUMENT_SPEC),
]


def same_options(documented, spec, where):
    assert set(documented) == set(spec), where
    for name, option in spec.items():
        doc = documented[name]
        assert doc["type"] == option["type"], f"{where}.{name}"
        assert doc.get("elements") == option.get("elements"), f"{where}.{name}"
        assert doc.get("required", False) == option.get("required", False), f"{where}.{name}"
        assert doc.get("default") == option.get("default"), f"{where}.{name}"
        assert doc.get("choices") == option.get("choices"), f"{where}.{name}"
        assert doc.get("description"), f"{where}.{name}"
        if "options" in option:
            same_options(doc["suboptions"], option["options"], f"{where}.{name}")
        else:
            assert "suboptions" not in doc, f"{where}.{name}"


@pytest.mark.parametrize(("module", "spec"), MODULES, ids=lambda value: getattr(value, "__name__", ""))
def test_documentation_matches_argument_spec(module, spec):
    documentation = yaml.safe_load(module.DOCUMENTATION)
    assert documentation["module"] == module.__name__.rsplit(".", 1)[1]
    same_options(documentation["options"], spec, documentation["module"])


@pytest.mark.parametrize(("module", "spec"), MODULES, ids=lambda value: getattr(value, "__name__", ""))
def test_examples_and_return_are_yaml(module, spec):
    del spec
    examples = yaml.safe_load(module.EXAMPLES)
    assert examples and all(f"llamarpc.cluster.{module.__name__.rsplit('.', 1)[1]}" in task for task in examples[:1])
    returned = yaml.safe_load(module.RETURN)
    assert all({"description", "returned", "type"} <= set(value) for value in returned.values())
