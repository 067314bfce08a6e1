# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Packages installed the way apt_packages installs them, for every module and action that installs some.

On the host (through the ``AnsibleModule`` it is given): which names are not installed (``dpkg-query``) and, in check
mode, what apt would install with them (``apt-get --simulate``): the parsing is ``_dpkg``. On the controller: the
arguments of the real run, ``ansible.builtin.apt`` with ``state=present`` (``apt_module_args``).

Standard library only: shipped to the managed host with the modules that use it.
"""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.packages import _dpkg

#: The options of an install (apt_packages' own, and those of the modules that install packages the same way).
OPTIONS = {
    "update_cache": {"type": "bool", "default": False},
    "cache_valid_time": {"type": "int", "default": 0},
    "install_recommends": {"type": "bool"},
}


def absent(module, names):
    """The names (in the order given, once each) that dpkg does not have installed; none asked, none run."""
    if not names:
        return []
    argv = [module.get_bin_path("dpkg-query", required=True), *_dpkg.DPKG_QUERY[1:], *names]
    rc, out, err = module.run_command(argv)
    if rc > 1:  # 1: some name is unknown to dpkg, which only means it is not installed
        module.fail_json(msg=f"dpkg-query failed: {err.strip()}", rc=rc)
    return _dpkg.missing(names, _dpkg.installed_states(out))


def check(module, names, install_recommends=None, missing=None):
    """What installing ``names`` would do, changing nothing: apt_packages' check-mode result (changed, installed,
    missing, would_install, simulation_error when the simulation failed, msg). ``missing``: absent(names), when the
    caller has it already."""
    missing = absent(module, names) if missing is None else missing
    result = {"changed": bool(missing), "installed": [n for n in names if n not in missing], "missing": missing}
    would_install, error = [], None
    if missing:
        argv = _dpkg.simulate_command(missing, install_recommends)
        rc, out, err = module.run_command([module.get_bin_path("apt-get", required=True), *argv[1:]])
        if rc == 0:
            would_install = _dpkg.simulated(out)
        else:
            error = ((err or out).strip().splitlines() or [f"exit {rc}"])[-1]
            result["simulation_error"] = error
    result["would_install"] = would_install
    result["msg"] = _dpkg.summary(names, missing, would_install, error)
    return result


def apt_module_args(names, update_cache=False, cache_valid_time=0, install_recommends=None):
    """The arguments of ansible.builtin.apt for a real install of ``names`` (state present)."""
    args = {"name": list(names), "state": "present", "update_cache": update_cache}
    if cache_valid_time:
        args["cache_valid_time"] = cache_valid_time
    if install_recommends is not None:
        args["install_recommends"] = install_recommends
    return args
