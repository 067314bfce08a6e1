"""Every name a test takes from the collection's Python exists there.

The integration tests and the scenarios' verify steps run only on a machine with llama.cpp or a booted lab, so a
helper renamed or removed in ``plugins/`` breaks them only in CI's last phase. This reads those files' sources (no
import, no run) and checks each ``from <collection module> import name`` and each ``<module>.attribute`` of a
collection module bound by an import, against the module itself.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PREFIX = "ansible_collections.llamarpc.cluster."
SOURCES = sorted(
    [*ROOT.glob("tests/integration/*.py"), *ROOT.glob("molecule/*/tests/*.py"), *ROOT.glob("molecule/_shared/*.py")]
)


def collection_names(tree):
    """(line, module, attribute) for each collection name the source uses, and the unresolved module bindings."""
    bound = {}
    used = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if is_module(submodule):
                    bound[alias.asname or alias.name] = submodule
                else:
                    used.append((node.lineno, node.module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PREFIX) and alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            used.append((node.lineno, bound[node.value.id], node.attr))
    return used


def is_module(name):
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def test_the_sources_are_found():
    assert len(SOURCES) > 40, SOURCES


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_each_collection_name_a_test_uses_exists(source):
    missing = [
        f"{source.relative_to(ROOT)}:{line}: {module}.{name}"
        for line, module, name in collection_names(ast.parse(source.read_text(), str(source)))
        if not hasattr(importlib.import_module(module), name)
    ]
    assert not missing, "names the collection no longer has:\n" + "\n".join(missing)


def test_a_removed_name_is_found():
    """The check of the check: a use of a helper the module does not have is reported."""
    tree = ast.parse(
        f"from {PREFIX}plugins.module_utils.llama_cpp import _llama_smoke\n"
        "_llama_smoke.free_port()\n_llama_smoke._get('x', timeout=1)\n"
        f"from {PREFIX}plugins.module_utils.plan._coordinator_state import no_such_helper\n"
    )
    used = collection_names(tree)
    module = f"{PREFIX}plugins.module_utils.llama_cpp._llama_smoke"
    assert (2, module, "free_port") in used
    missing = sorted((line, name) for line, mod, name in used if not hasattr(importlib.import_module(mod), name))
    assert missing == [(3, "_get"), (4, "no_such_helper")]
