"""Playbooks carry no copies of role defaults: a role option with ``| default(...)`` in a playbook repeats the role's
default, which then has two places to change. Day-2 work goes through the roles' entry points (tasks_from), which read
the role's own defaults and argument specs.
"""

from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.llamarpc.cluster.plugins.action.preflight import load_role_specs

REPO = Path(__file__).resolve().parents[3]
#: Copies still in place (issue 21 item 3), each file: option. Nothing may be added here.
KNOWN = {
    ("benchmark.yml", "llama_coordinator_service"),
    ("demo.yml", "llama_coordinator_port"),
    ("demo.yml", "llama_coordinator_api_key"),
    ("preflight.yml", "llama_cpp_install_method"),
    ("benchmark_sshfs.yml", "llama_model_dir"),
}


def role_defaults_in(text, options):
    """The role options that ``text`` reads with a ``default(...)`` filter of its own."""
    found = re.findall(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(", text)
    return {name for name in found if name in options}


def test_role_defaults_in_finds_an_option_read_with_a_default():
    options = {"llama_rpc_worker_service", "llama_coordinator_port"}
    text = "name: \"{{ llama_rpc_worker_service | default('llamarpc-rpc-worker') }}.service\"\nn: {{ x | default(1) }}"
    assert role_defaults_in(text, options) == {"llama_rpc_worker_service"}
    assert role_defaults_in('name: "{{ llama_rpc_worker_service }}.service"', options) == set()


def test_no_playbook_repeats_a_role_default():
    options = set().union(*load_role_specs(REPO / "roles").values())
    found = {
        (path.name, name)
        for path in sorted([*(REPO / "playbooks").rglob("*.yml"), *(REPO / "lab" / "playbooks").rglob("*.yml")])
        for name in role_defaults_in(path.read_text(encoding="utf-8"), options)
    }
    assert found - KNOWN == set(), "use the role's entry point (tasks_from) or its defaults instead"
    assert KNOWN - found == set(), "a copy went away: take it off KNOWN"
