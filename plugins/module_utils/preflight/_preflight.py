# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The site preflight's checks: what is wrong with the variables of one host before anything changes.

Standard library only (and the mesh and Tailscale helpers), side-effect free; used by the ``preflight`` action
plugin and unit-tested. Every function takes plain values (already templated) and returns messages a user can act on;
an empty list means nothing is wrong.
"""

from __future__ import annotations

import difflib
import posixpath
import re

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import _mesh, _tailscale

# Variable name prefixes of the collection: a variable with one of them that the collection does not know is a typo.
PREFIXES = (
    "llama_",
    "llamarpc_",
    "tailscale_",
    "wireguard_",
    "open_webui_",
    "lsyncd_",
    "sshfs_",
    "mesh_",
    "monitoring_",
)

# The three model sources of the llama_model role, exactly one of which must be set.
MODEL_SOURCES = ("llama_model_hf_repo", "llama_model_urls", "llama_model_files")

_WIREGUARD_INTERFACE_RE = re.compile(r"^[A-Za-z0-9_=+.-]{1,15}$")


def role_options(argument_specs):
    """Option name -> option spec of every entry point of one role's ``meta/argument_specs.yml`` (loaded)."""
    options = {}
    for entry_point in ((argument_specs or {}).get("argument_specs") or {}).values():
        options.update((entry_point or {}).get("options") or {})
    return options


def unknown_variables(names, known, prefixes=PREFIXES):
    """One message per name in ``names`` that has one of ``prefixes`` but is not in ``known``, sorted.

    A close known name is suggested: "`llamarpc_mesh_provder`: did you mean `llamarpc_mesh_provider`?".
    """
    known = set(known)
    prefixes = tuple(prefixes)
    candidates = sorted(known)
    messages = []
    for name in sorted({name for name in names if isinstance(name, str)}):
        if not name.startswith(prefixes) or name in known:
            continue
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
        if close:
            messages.append(f"`{name}`: did you mean `{close[0]}`?")
        else:
            messages.append(f"`{name}`: no variable of the collection has this name or one close to it")
    return messages


_UNDEFINED = re.compile(r"^'([A-Za-z_][A-Za-z0-9_]*)' is undefined")


def undefined_reference(variable, message, known, prefixes=PREFIXES):
    """A problem when ``variable``'s value uses a name that nothing will ever define, else None.

    ``message`` is the templating error ("'vault_api_key' is undefined"). A name the run defines later - a fact
    (``ansible_*``), a known variable of the collection (``known``, with role outputs) or a name with one of its
    prefixes (reported as unknown on its own) - and an error of another kind are left to the task that uses the
    value. What is left is typically a vault variable whose vault was not loaded.
    """
    match = _UNDEFINED.match(message or "")
    if not match:
        return None
    name = match.group(1)
    if name.startswith("ansible_") or name in set(known) or name.startswith(tuple(prefixes)):
        return None
    return (
        f"`{variable}` uses `{name}`, which is not defined: load the vault or variable file that defines it "
        f"(ansible-playbook --ask-vault-pass or --vault-password-file) or define it in the inventory"
    )


def port_clashes(hosts):
    """Messages about TCP ports that two services would listen on, on one host.

    ``hosts`` maps a host name to the services it runs: ``[{"service": ..., "variable": ..., "port": ...}]``.
    Ports that are not whole numbers are left to the argument validation.
    """
    messages = []
    for host in sorted(hosts):
        users = {}
        for entry in hosts[host]:
            port = as_int(entry.get("port"))
            if port is not None:
                users.setdefault(port, []).append(entry)
        for port in sorted(users):
            if len(users[port]) > 1:
                who = " and ".join(f"{entry['service']} ({entry['variable']})" for entry in users[port])
                messages.append(f"{host}: port {port} is used by {who}: each needs a port of its own")
    return messages


def model_source_errors(variables, unknown=()):
    """Messages about the llama_model role's model source: exactly one, and a pattern with a Hugging Face repo.

    ``unknown`` names variables whose value is not known yet (they refer to something set later in the run): such a
    source counts as set, such a pattern as given.
    """
    given = [name for name in MODEL_SOURCES if name in unknown or variables.get(name)]
    errors = []
    if not given:
        errors.append(
            "no model source: set one of llama_model_hf_repo (with llama_model_hf_pattern), llama_model_urls or "
            "llama_model_files"
        )
    elif len(given) > 1:
        errors.append(
            f"{' and '.join(given)} are {'both' if len(given) == 2 else 'all'} set: set exactly one model source "
            "(llama_model_hf_repo with llama_model_hf_pattern, llama_model_urls or llama_model_files)"
        )
    repo = variables.get("llama_model_hf_repo")
    if repo and not variables.get("llama_model_hf_pattern") and "llama_model_hf_pattern" not in unknown:
        errors.append(
            f"llama_model_hf_repo {repo!r} needs llama_model_hf_pattern: the shell pattern selecting one GGUF file "
            "or one split set in the repository, for example '*q4_k_m*.gguf'"
        )
    return errors


def mesh_errors(host, variables, peers=None, unknown=()):
    """Messages about one host's mesh settings.

    ``variables`` are the host's (llamarpc_mesh_provider, llamarpc_mesh_subnet, llamarpc_mesh_address,
    ansible_host, and the tailscale_* or wireguard_* options of its provider with their defaults); ``peers`` maps
    the play's other hosts to their llamarpc_mesh_address and ansible_host, for duplicate addresses. When
    llamarpc_mesh_address or ansible_host is in ``unknown`` (not known yet), the host's address is not checked.
    """
    provider = str(variables.get("llamarpc_mesh_provider") or "none")
    subnet = str(variables.get("llamarpc_mesh_subnet") or "")
    addressed = not {"llamarpc_mesh_address", "ansible_host"} & set(unknown)
    own = _mesh.plan([host] if addressed else [], {host: variables}, provider, subnet)
    errors = list(own["errors"])
    if provider == "tailscale":
        errors.extend(tailscale_errors(host, variables))
    elif provider == "wireguard":
        errors.extend(wireguard_errors(variables))
    address = own["addresses"].get(host)
    if address and peers:
        names = [name for name in peers if name != host]
        plan = _mesh.plan([host, *names], {**peers, host: variables}, provider, subnet)
        twins = [name for name in names if plan["addresses"].get(name) == address]
        if twins:
            how = ", ".join(f"{name} ({plan['sources'][name]})" for name in [host, *twins])
            errors.append(
                f"duplicate mesh address {address}: {how}; give all but one of them their own llamarpc_mesh_address"
            )
    return errors


def tailscale_errors(host, variables):
    """What Tailscale would refuse in the tailscale role's settings (the auth key never appears in a message)."""
    hostname = str(variables.get("tailscale_hostname") or str(host).split(".", maxsplit=1)[0])
    problems = [
        _tailscale.auth_key_problem(variables.get("tailscale_auth_key") or "", variables.get("tailscale_login_server")),
        _tailscale.hostname_problem(hostname),
    ]
    tags = variables.get("tailscale_tags") or []
    if isinstance(tags, str):
        tags = [tags]
    problems.extend(_tailscale.tag_problems([str(tag) for tag in tags]))
    return [f"Tailscale settings - {problem}" for problem in problems if problem]


def wireguard_errors(variables):
    """The wireguard role's checks that need no host: interface name, port, MTU, keepalive, configuration dir.

    A variable missing from ``variables`` (not known yet) is not checked.
    """
    errors = []
    interface = variables.get("wireguard_interface")
    if interface is not None and not _WIREGUARD_INTERFACE_RE.match(str(interface)):
        errors.append(
            f"wireguard_interface {interface!r} must be at most 15 letters, digits or _=+.- (a Linux interface name)"
        )
    for name, low, high in (
        ("wireguard_port", 1, 65535),
        ("wireguard_mtu", 1280, 9000),
        ("wireguard_persistent_keepalive", 0, 65535),
    ):
        value = as_int(variables.get(name))
        if value is not None and not low <= value <= high:
            errors.append(f"{name} {value} must be in {low}-{high}")
    config_dir = variables.get("wireguard_config_dir")
    if config_dir is not None and not posixpath.isabs(str(config_dir)):
        errors.append(f"wireguard_config_dir {config_dir!r} must be an absolute path")
    return errors


def format_problems(host, problems):
    """The one failure message of a host."""
    count = f"{len(problems)} problem" if len(problems) == 1 else f"{len(problems)} problems"
    lines = [f"{host}: the preflight found {count}; nothing has changed anywhere:"]
    lines.extend(f"- {problem}" for problem in problems)
    return "\n".join(lines)


def as_int(value):
    """``value`` as an int when it is a whole number (an int or a string of digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None
