# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A command run as a service of the system manager would run it: ``systemd-run --wait --pipe`` in a transient unit
with the user and the unit properties given (its sandbox: ProtectSystem, ProtectHome, BindReadOnlyPaths, ...), so that
what the command sees is what that service sees, bounded in time by the unit's own RuntimeMaxSec."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import ENVIRONMENT


def transient_argv(systemd_run, argv, *, user, properties=(), timeout=None):
    """The argv of ``systemd-run`` running ``argv`` as ``user`` with unit ``properties`` (``Key=value`` strings),
    stopped by systemd after ``timeout`` seconds when given."""
    command = [systemd_run, "--wait", "--pipe", "--quiet", "--collect", f"--property=User={user}"]
    if timeout is not None:
        command.append(f"--property=RuntimeMaxSec={timeout}")
    command += [f"--property={prop}" for prop in properties]
    return [*command, "--", *argv]


def run_as_unit(module, argv, *, user, properties=(), timeout=None):
    """``(rc, stdout, stderr)`` of ``argv`` run by ``module`` in a transient unit as ``user`` with ``properties``; the
    module fails when systemd-run is not installed."""
    systemd_run = module.get_bin_path("systemd-run", required=True)
    command = transient_argv(systemd_run, argv, user=user, properties=properties, timeout=timeout)
    return module.run_command(command, environ_update=dict(ENVIRONMENT))
