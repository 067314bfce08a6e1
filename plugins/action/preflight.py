# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of preflight: one host's variables checked before anything changes (documented in
plugins/modules/preflight.py; the checks themselves are module_utils/preflight/_preflight.py).

Runs on the controller only, with public interfaces: the task's own variables (exact for this host: inventory, play
and extra vars), ``hostvars`` and ``ansible_play_hosts_all`` for the other hosts' mesh addresses, and the roles'
``meta/argument_specs.yml`` files beside this plugin in the collection.
"""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleActionFail, AnsibleError, AnsibleUndefinedVariable
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils.preflight import _preflight as pf

ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")
MESH_ROLES = ("tailscale", "wireguard")  # llamarpc_mesh_provider values that include a role of that name

ARGUMENT_SPEC = {
    "roles": {"type": "dict", "default": {}},
    "ports": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "service": {"type": "str", "required": True},
            "variable": {"type": "str", "required": True},
            "unit": {"type": "str"},
            "unit_suffix": {"type": "str", "default": ""},
            "enabled_by": {"type": "str"},
            "groups": {"type": "list", "elements": "str", "required": True},
        },
    },
    "known": {"type": "list", "elements": "str", "default": []},
    "prefixes": {"type": "list", "elements": "str", "default": list(pf.PREFIXES)},
}


def load_role_specs(roles_dir=ROLES_DIR):
    """Role name -> its options (every entry point) for every role of the collection."""
    specs = {}
    for role in sorted(os.listdir(roles_dir)):
        path = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                specs[role] = pf.role_options(yaml.safe_load(handle))
    return specs


def _template(value):
    """True for a role default that is a Jinja template (evaluated only when the role runs)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = task_vars["inventory_hostname"]
        groups = {"all", *(task_vars.get("group_names") or [])}
        specs = load_role_specs()
        roles = {role: [where] if isinstance(where, str) else list(where) for role, where in args["roles"].items()}
        missing = sorted(set(roles) - set(specs))
        if missing:
            raise AnsibleActionFail(f"roles without an argument spec in the collection: {', '.join(missing)}")

        self._vars = task_vars
        self._deferred = set()
        self._secrets = set()
        self._known = set(args["known"]).union(*specs.values())
        self._prefixes = args["prefixes"]
        self._undefined = []
        values = {}
        problems = []
        validated = []
        for role, where in roles.items():
            if groups & set(where):
                problems.extend(self._validate(role, specs[role], values))
                validated.append(role)
        if "mesh" in validated:
            provider = values.get("llamarpc_mesh_provider")
            if provider in MESH_ROLES and provider in specs:
                problems.extend(self._validate(provider, specs[provider], values))
                validated.append(provider)
            problems.extend(pf.mesh_errors(host, self._mesh_vars(values), self._peers(host), self._deferred))
        if "llama_model" in validated:
            problems.extend(pf.model_source_errors(values, self._deferred))
        services = self._services(args["ports"], groups, specs, values)
        problems.extend(pf.port_clashes({host: services}))
        unknown = pf.unknown_variables(task_vars, self._known, self._prefixes)
        problems.extend(f"unknown variable {message}" for message in unknown)
        problems.extend(sorted(set(self._undefined)))

        problems = [self._redact(problem) for problem in problems]
        result.update(
            changed=False,
            problems=problems,
            roles=validated,
            ports={entry["service"]: entry["port"] for entry in services},
            listeners=[
                {"service": entry["service"], "port": entry["port"], "unit": entry["unit"]}
                for entry in services
                if entry.get("unit")
            ],
            deferred=sorted(self._deferred),
            rollback_build=boolean(self._value("llama_cpp_rollback", False), strict=False),
        )
        if problems:
            result.update(failed=True, msg=pf.format_problems(host, problems))
        else:
            result["msg"] = f"{host}: the variables of {', '.join(validated) or 'no role'} make sense"
        return result

    def _value(self, name, default=None):
        """The templated value of variable ``name`` for this host, ``default`` when unset or not known yet."""
        if name not in self._vars:
            return default
        try:
            return self._templar.template(self._vars[name])
        except AnsibleUndefinedVariable as exc:
            self._defer(name, exc)
            return default

    def _defer(self, name, exc):
        """``name``'s value refers to something undefined: a problem when nothing will define it, else checked later.

        Something set later in the run (a fact, a role's output) is checked where it is used; a name nothing defines
        (a vault that was not loaded) is reported now.
        """
        self._deferred.add(name)
        problem = pf.undefined_reference(name, getattr(exc, "message", str(exc)), self._known, self._prefixes)
        if problem:
            self._undefined.append(problem)

    def _validate(self, role, options, values):
        """The role's argument spec against this host's variables; ``values`` gets the validated ones."""
        provided = {}
        for name in options:
            if name in self._vars:
                try:
                    provided[name] = self._templar.template(self._vars[name])
                except AnsibleUndefinedVariable as exc:
                    self._defer(name, exc)
                except AnsibleError as exc:
                    return [f"{role}: {name} cannot be evaluated: {exc}"]
                if options[name].get("no_log") and isinstance(provided.get(name), str) and provided[name]:
                    self._secrets.add(provided[name])
        # Only what the host sets is validated: a default is the role's own (and may be a template of run-time facts).
        spec = {
            name: {key: value for key, value in option.items() if key != "default"} for name, option in options.items()
        }
        outcome = ArgumentSpecValidator(spec).validate(provided, validate_role_argument_spec=True)
        values.update({name: value for name, value in outcome.validated_parameters.items() if name in provided})
        for name, option in options.items():
            if name not in provided and name not in self._deferred and not _template(option.get("default")):
                values[name] = option.get("default")
        return [f"{role}: {message}" for message in outcome.error_messages]

    def _mesh_vars(self, values):
        mesh = dict(values)
        for name in ("llamarpc_mesh_address", "ansible_host"):
            mesh[name] = self._value(name)
        return mesh

    def _peers(self, host):
        """The other play hosts' mesh address and ansible_host (a value not known yet leaves the host out)."""
        hostvars = self._vars.get("hostvars") or {}
        peers = {}
        for name in self._vars.get("ansible_play_hosts_all") or []:
            if name == host or name not in hostvars:
                continue
            try:
                peers[name] = {key: hostvars[name].get(key) for key in ("llamarpc_mesh_address", "ansible_host")}
            except AnsibleError:
                continue
        return peers

    def _services(self, ports, groups, specs, values):
        """The TCP services this host runs and their ports (from its variables, else the role's default)."""
        defaults = {
            name: option.get("default")
            for options in specs.values()
            for name, option in options.items()
            if not _template(option.get("default"))
        }
        services = []
        for entry in ports:
            if not groups & set(entry["groups"]):
                continue
            known = {}
            for key in ("variable", "unit", "enabled_by"):
                name = entry.get(key)
                if name:
                    known[key] = values[name] if name in values else self._value(name, defaults.get(name))
                    if name in self._deferred:
                        known[key] = None
            if "enabled_by" in known and not boolean(known["enabled_by"], strict=False):
                continue
            name, port = entry["variable"], known["variable"]
            if port is None:
                continue
            unit = known.get("unit")
            unit = f"{unit}{entry.get('unit_suffix') or ''}.service" if unit else None
            services.append({"service": entry["service"], "variable": name, "port": port, "unit": unit})
        return services

    def _redact(self, message):
        for secret in self._secrets:
            message = message.replace(secret, "********")
        return message
