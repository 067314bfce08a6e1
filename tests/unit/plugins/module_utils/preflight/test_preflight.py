"""The site preflight's checks: unknown names with a suggestion, port clashes, the model source, the mesh settings;
and the names the collection itself uses (inventories, scenarios, benchmarks, facts) are all known to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.llamarpc.cluster.plugins.action.preflight import load_role_specs
from ansible_collections.llamarpc.cluster.plugins.module_utils.preflight import _preflight as pf

REPO = Path(__file__).resolve().parents[5]
SHA = "a" * 64


# -- unknown variables ---------------------------------------------------------------------------------------------


def test_a_typo_is_reported_with_the_closest_known_name():
    known = {"llamarpc_mesh_provider", "llamarpc_mesh_subnet", "llama_model_files"}
    assert pf.unknown_variables(["llamarpc_mesh_provder"], known) == [
        "`llamarpc_mesh_provder`: did you mean `llamarpc_mesh_provider`?"
    ]


def test_a_name_close_to_nothing_is_reported_without_a_suggestion():
    assert pf.unknown_variables(["open_webui_zzz_qqq"], {"llamarpc_mesh_provider"}) == [
        "`open_webui_zzz_qqq`: no variable of the collection has this name or one close to it"
    ]


def test_known_unprefixed_and_private_names_pass():
    names = ["llamarpc_mesh_provider", "ansible_host", "inventory_hostname", "_llama_model_sources", "my_var", 3]
    assert pf.unknown_variables(names, {"llamarpc_mesh_provider"}) == []


@pytest.mark.parametrize("prefix", pf.PREFIXES)
def test_every_prefix_is_checked(prefix):
    assert pf.unknown_variables([f"{prefix}nonexistent_thing"], set()) != []


def test_messages_are_sorted_and_unique():
    messages = pf.unknown_variables(["sshfs_b", "mesh_a", "sshfs_b"], set())
    assert [m.split("`")[1] for m in messages] == ["mesh_a", "sshfs_b"]


def test_other_prefixes_can_be_asked_for():
    assert pf.unknown_variables(["llama_x", "foo_y"], set(), prefixes=["foo_"]) == [
        "`foo_y`: no variable of the collection has this name or one close to it"
    ]


# -- ports ---------------------------------------------------------------------------------------------------------


def service(name, variable, port):
    return {"service": name, "variable": variable, "port": port}


def test_a_vault_variable_that_is_not_loaded_is_a_problem():
    problem = pf.undefined_reference("llama_coordinator_api_key", "'vault_api_key' is undefined", known=())
    assert problem.startswith("`llama_coordinator_api_key` uses `vault_api_key`, which is not defined")
    assert "--ask-vault-pass" in problem


@pytest.mark.parametrize(
    "message",
    [
        "'ansible_default_ipv4' is undefined",  # a fact, gathered later
        "'llama_model_path' is undefined",  # known: set by a role later in the run
        "'llama_modle_path' is undefined",  # prefixed: reported as an unknown variable if set, else a later error
        "object of type 'dict' has no attribute 'node9'",  # another kind of error: left to the task that uses it
        "",
    ],
)
def test_names_the_run_defines_later_and_other_errors_are_left_for_later(message):
    assert pf.undefined_reference("llama_coordinator_address", message, known={"llama_model_path"}) is None


def test_two_services_on_one_port_of_one_host_clash():
    hosts = {
        "node1": [
            service("llama-server", "llama_coordinator_port", 8080),
            service("the RPC worker", "llama_rpc_worker_port", 50052),
            service("Open WebUI", "open_webui_port", "8080"),
        ],
        "node2": [service("the RPC worker", "llama_rpc_worker_port", 8080)],
    }
    assert pf.port_clashes(hosts) == [
        "node1: port 8080 is used by llama-server (llama_coordinator_port) and Open WebUI (open_webui_port): "
        "each needs a port of its own"
    ]


def test_distinct_ports_and_values_that_are_not_ports_do_not_clash():
    hosts = {
        "node1": [
            service("llama-server", "llama_coordinator_port", 8080),
            service("the RPC worker", "llama_rpc_worker_port", 50052),
            service("Open WebUI", "open_webui_port", "eighty"),
            service("other", "x_port", None),
            service("flag", "y_port", True),
        ]
    }
    assert pf.port_clashes(hosts) == []


def test_three_services_on_one_port():
    hosts = {"h": [service("a", "a_port", 1), service("b", "b_port", 1), service("c", "c_port", 1)]}
    assert pf.port_clashes(hosts) == [
        "h: port 1 is used by a (a_port) and b (b_port) and c (c_port): each needs a port of its own"
    ]


# -- model source --------------------------------------------------------------------------------------------------

EMPTY_MODEL = {"llama_model_hf_repo": "", "llama_model_hf_pattern": "", "llama_model_urls": [], "llama_model_files": []}


@pytest.mark.parametrize(
    "source",
    [
        {"llama_model_files": ["/srv/m-00001-of-00002.gguf", "/srv/m-00002-of-00002.gguf"]},
        {"llama_model_urls": [{"url": "https://example.org/m.gguf", "sha256": SHA}]},
        {"llama_model_hf_repo": "Qwen/Qwen2.5-32B-Instruct-GGUF", "llama_model_hf_pattern": "*q4_k_m*.gguf"},
    ],
)
def test_exactly_one_source_passes(source):
    assert pf.model_source_errors({**EMPTY_MODEL, **source}) == []


def test_no_source():
    assert pf.model_source_errors(EMPTY_MODEL) == [
        "no model source: set one of llama_model_hf_repo (with llama_model_hf_pattern), llama_model_urls or "
        "llama_model_files"
    ]


def test_two_sources():
    errors = pf.model_source_errors(
        {**EMPTY_MODEL, "llama_model_files": ["/m.gguf"], "llama_model_urls": [{"url": "u"}]}
    )
    assert errors == [
        "llama_model_urls and llama_model_files are both set: set exactly one model source (llama_model_hf_repo "
        "with llama_model_hf_pattern, llama_model_urls or llama_model_files)"
    ]


def test_three_sources():
    variables = {
        "llama_model_hf_repo": "o/r",
        "llama_model_hf_pattern": "*",
        "llama_model_urls": [1],
        "llama_model_files": [2],
    }
    assert pf.model_source_errors(variables)[0].startswith(
        "llama_model_hf_repo and llama_model_urls and llama_model_files are all set"
    )


def test_a_hugging_face_repo_needs_a_pattern():
    errors = pf.model_source_errors({**EMPTY_MODEL, "llama_model_hf_repo": "Qwen/Qwen2.5-32B-Instruct-GGUF"})
    assert errors == [
        "llama_model_hf_repo 'Qwen/Qwen2.5-32B-Instruct-GGUF' needs llama_model_hf_pattern: the shell pattern "
        "selecting one GGUF file or one split set in the repository, for example '*q4_k_m*.gguf'"
    ]


def test_a_source_not_known_yet_counts_as_set():
    assert pf.model_source_errors({}, unknown={"llama_model_files"}) == []
    assert pf.model_source_errors({"llama_model_hf_repo": "o/r"}, unknown={"llama_model_hf_pattern"}) == []
    assert "both set" in pf.model_source_errors({"llama_model_files": ["/m"]}, unknown={"llama_model_urls"})[0]


# -- mesh ----------------------------------------------------------------------------------------------------------

WIREGUARD_DEFAULTS = {
    "wireguard_interface": "wg-llamarpc",
    "wireguard_port": 51820,
    "wireguard_mtu": 1420,
    "wireguard_persistent_keepalive": 25,
    "wireguard_config_dir": "/etc/wireguard",
}


def mesh(provider="none", **more):
    return {"llamarpc_mesh_provider": provider, "llamarpc_mesh_subnet": "10.99.0.0/24", **more}


def test_provider_none_with_an_ipv4_ansible_host_passes():
    assert pf.mesh_errors("node1", mesh(ansible_host="10.213.0.11")) == []


def test_an_unknown_provider():
    errors = pf.mesh_errors("node1", mesh("zerotier", ansible_host="10.213.0.11"))
    assert errors == [
        "unknown mesh provider 'zerotier': llamarpc_mesh_provider must be one of none, wireguard, tailscale"
    ]


def test_a_host_name_is_no_mesh_address():
    errors = pf.mesh_errors("node1", mesh(ansible_host="node1.example"))
    assert errors[0].startswith("node1: mesh address 'node1.example' (from ansible_host) is not a numeric IPv4")


def test_a_duplicate_address_among_the_play_hosts():
    peers = {"node2": {"ansible_host": "10.213.0.12"}, "node3": {"ansible_host": "10.213.0.11"}}
    errors = pf.mesh_errors("node1", mesh(ansible_host="10.213.0.11"), peers)
    assert errors == [
        "duplicate mesh address 10.213.0.11: node1 (ansible_host), node3 (ansible_host); give all but one of them "
        "their own llamarpc_mesh_address"
    ]


def test_an_address_not_known_yet_is_not_checked():
    assert pf.mesh_errors("node1", mesh(ansible_host="node1.example"), unknown={"ansible_host"}) == []
    assert pf.mesh_errors("node1", mesh("zerotier"), unknown={"llamarpc_mesh_address"}) != []


def test_wireguard_settings():
    ok = mesh("wireguard", ansible_host="10.213.0.11", **WIREGUARD_DEFAULTS)
    assert pf.mesh_errors("node1", ok) == []
    bad = {
        **ok,
        "wireguard_interface": "a-very-long-interface-name",
        "wireguard_port": 0,
        "wireguard_mtu": "100",
        "wireguard_persistent_keepalive": 70000,
        "wireguard_config_dir": "etc/wireguard",
    }
    assert pf.mesh_errors("node1", bad) == [
        "wireguard_interface 'a-very-long-interface-name' must be at most 15 letters, digits or _=+.- (a Linux "
        "interface name)",
        "wireguard_port 0 must be in 1-65535",
        "wireguard_mtu 100 must be in 1280-9000",
        "wireguard_persistent_keepalive 70000 must be in 0-65535",
        "wireguard_config_dir 'etc/wireguard' must be an absolute path",
    ]


def test_wireguard_address_outside_the_subnet_and_a_bad_subnet():
    errors = pf.mesh_errors("node1", mesh("wireguard", llamarpc_mesh_address="10.1.0.5", **WIREGUARD_DEFAULTS))
    assert errors == [
        "node1: llamarpc_mesh_address 10.1.0.5 is not a host address of the mesh subnet 10.99.0.0/24 "
        "(llamarpc_mesh_subnet)"
    ]
    errors = pf.mesh_errors(
        "node1", {**mesh("wireguard", **WIREGUARD_DEFAULTS), "llamarpc_mesh_subnet": "10.99.0.1/24"}
    )
    assert errors[0].startswith("llamarpc_mesh_subnet '10.99.0.1/24' is not an IPv4 network")


def test_tailscale_settings_never_show_the_key():
    variables = mesh(
        "tailscale", tailscale_auth_key="tskey-oops hunter2", tailscale_tags=["tag:ok", "bad"], tailscale_hostname="a_b"
    )
    errors = pf.mesh_errors("node1", variables)
    assert len(errors) == 3
    assert all(error.startswith("Tailscale settings - ") for error in errors)
    assert not any("hunter2" in error for error in errors)
    assert "hostname 'a_b' must be a DNS label" in errors[1]
    assert "tag 'bad' must look like tag:name" in errors[2]


def test_tailscale_without_a_key_passes():
    # The key is needed only while the host is not logged in (the tailscale role's rule): that needs the host.
    assert pf.mesh_errors("node1.example.org", mesh("tailscale", tailscale_tags="tag:llm")) == []


# -- helpers -------------------------------------------------------------------------------------------------------


def test_role_options_joins_every_entry_point():
    specs = {"argument_specs": {"main": {"options": {"a": {}, "b": {}}}, "down": {"options": {"c": {}}}, "x": None}}
    assert set(pf.role_options(specs)) == {"a", "b", "c"}
    assert pf.role_options(None) == {}


def test_format_problems():
    assert pf.format_problems("node1", ["one"]) == (
        "node1: the preflight found 1 problem; nothing has changed anywhere:\n- one"
    )
    assert pf.format_problems("node1", ["a", "b"]).startswith("node1: the preflight found 2 problems;")


@pytest.mark.parametrize(
    ("value", "expected"), [(8080, 8080), ("8080", 8080), (" 7 ", 7), ("x", None), (True, None), (1.5, None)]
)
def test_as_int(value, expected):
    assert pf.as_int(value) == expected


# -- the collection's own names are known ---------------------------------------------------------------------------


class _AnyTagLoader(yaml.SafeLoader):
    """Loads YAML with Ansible's tags (!unsafe, !vault) as their plain values."""


def _any_tag(loader, _suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_AnyTagLoader.add_multi_constructor("!", _any_tag)

PREFIXED = re.compile(rf"(?<![A-Za-z0-9_])((?:{'|'.join(pf.PREFIXES)})[a-z0-9_]*[a-z0-9])")


def _walk(node, found, origin, parent=None):
    """Every prefixed mapping key (variables in inventories, vars, set_fact) and register name under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and PREFIXED.fullmatch(key) and parent not in ("argument_specs", "roles"):
                found.setdefault(key, origin)
            if key == "register" and isinstance(value, str) and PREFIXED.fullmatch(value):
                found.setdefault(value, origin)
            _walk(value, found, origin, key)
    elif isinstance(node, list):
        for item in node:
            _walk(item, found, origin, parent)


def _yaml_files():
    patterns = [
        "molecule/*/molecule.yml",
        "molecule/*/*.yml",
        "molecule/*/tests/*.yml",
        "molecule/*/vars/*.yml",
        "inventories/**/*.yml",
        "benchmarks/*.yml",
        "playbooks/*.yml",
        "playbooks/tasks/*.yml",
        "roles/*/tasks/*.yml",
        "roles/*/handlers/*.yml",
        "roles/*/defaults/*.yml",
        "roles/*/vars/*.yml",
        # The lab collection's: its inventory and playbooks set names that site.yml's preflight must know.
        "lab/benchmarks/*.yml",
        "lab/playbooks/*.yml",
        "lab/roles/*/tasks/*.yml",
        "lab/roles/*/defaults/*.yml",
    ]
    return sorted({path for pattern in patterns for path in REPO.glob(pattern)})


def collection_names():
    """Prefixed variable names the collection sets, reads from inventories or passes around, with where from."""
    found = {}
    for path in _yaml_files():
        origin = str(path.relative_to(REPO))
        for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_AnyTagLoader):
            _walk(document, found, origin)
    # Inventory variables written by the lab role's template.
    template = REPO / "lab/roles/lab/templates/hosts.yml.j2"
    for name in re.findall(r"^\s+([a-z0-9_]+):", template.read_text(encoding="utf-8"), re.MULTILINE):
        if PREFIXED.fullmatch(name):
            found.setdefault(name, str(template.relative_to(REPO)))
    # Facts returned by the collection's modules (ansible_facts={"name": ...}).
    for path in sorted((REPO / "plugins/modules").glob("*.py")):
        for name in re.findall(r"ansible_facts\s*=\s*\{\s*\"([a-z0-9_]+)\"", path.read_text(encoding="utf-8")):
            if PREFIXED.fullmatch(name):
                found.setdefault(name, str(path.relative_to(REPO)))
    # Extra variables the scenarios, the integration tests, the Makefile and the README pass: -e name=value,
    # "name=value", {"name": value} (inventories built in Python).
    sources = [
        *REPO.glob("molecule/**/*.py"),
        *REPO.glob("tests/integration/*.py"),
        REPO / "Makefile",
        REPO / "README.md",
    ]
    names = "|".join(pf.PREFIXES)
    pattern = re.compile(rf"(?:-e\s+|--extra-vars[= ]|[\"'])((?:{names})[a-z0-9_]*)(?:=|[\"']\s*:)")
    for path in sources:
        if path.name in {"test_preflight_site.py", "test_packaging.py"}:
            continue  # their typos are on purpose
        for name in pattern.findall(path.read_text(encoding="utf-8")):
            if PREFIXED.fullmatch(name):
                found.setdefault(name, str(path.relative_to(REPO)))
    return found


def site_known():
    return yaml.safe_load((REPO / "playbooks/vars/preflight.yml").read_text(encoding="utf-8"))["_site_preflight_known"]


def known_names():
    return set(site_known()).union(*load_role_specs(REPO / "roles").values())


def test_every_name_the_collection_uses_is_known_to_the_preflight():
    known = known_names()
    found = collection_names()
    assert "llamarpc_lab_controller_address" in found  # the scan sees the lab inventory
    assert "llama_cpp_server_bin" in found  # ... the facts the roles set
    assert "llamarpc_memory" in found  # ... the modules' facts
    assert "llama_model_reserve" in found  # ... the scenarios' inventory settings
    unknown = {name: origin for name, origin in found.items() if name not in known}
    assert unknown == {}, f"add these to playbooks/vars/preflight.yml or a role's argument_specs: {unknown}"


def test_the_known_list_holds_no_role_option_twice_and_no_stale_name():
    names = site_known()
    options = set().union(*load_role_specs(REPO / "roles").values())
    assert len(names) == len(set(names))
    assert not set(names) & options
    texts = "\n".join(
        path.read_text(encoding="utf-8")
        for pattern in (
            "roles/**/*",
            "playbooks/*.yml",
            "playbooks/tasks/*.yml",
            "plugins/modules/*.py",
            "README.md",
            "lab/roles/**/*",
            "lab/playbooks/*.yml",
        )
        for path in REPO.glob(pattern)
        if path.is_file() and (path.name != "preflight.yml" or path == REPO / "playbooks/preflight.yml")
    )
    stale = [name for name in names if not re.search(rf"(?<![A-Za-z0-9_]){name}(?![A-Za-z0-9_])", texts)]
    assert stale == []
