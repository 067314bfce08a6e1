"""wireguard_implementation: kernel when the module is loaded or modprobe loads it, else userspace; check mode only
asks modprobe (--dry-run)."""

from __future__ import annotations

import pytest
from ansible.module_utils import basic

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import _wireguard_interface
from ansible_collections.llamarpc.cluster.plugins.modules import wireguard_implementation


@pytest.fixture
def kernel(monkeypatch):
    """``kernel(loaded, modprobe_rc, modprobe=True)``: the host's kernel; returns the list of commands run."""

    def install(loaded, modprobe_rc=1, modprobe=True):
        calls = []

        def run(self, args, **kwargs):
            calls.append(list(args))
            return modprobe_rc, "", "" if modprobe_rc == 0 else "modprobe: FATAL: Module wireguard not found"

        monkeypatch.setattr(
            _wireguard_interface.os.path, "isdir", lambda path: loaded and path == "/sys/module/wireguard"
        )
        monkeypatch.setattr(basic.AnsibleModule, "run_command", run)
        monkeypatch.setattr(
            basic.AnsibleModule,
            "get_bin_path",
            lambda self, name, required=False: "/usr/sbin/modprobe" if modprobe and name == "modprobe" else None,
        )
        return calls

    return install


def fact(result):
    return result.result["ansible_facts"]["wireguard_implementation"]


def test_a_loaded_module_is_the_kernel_and_nothing_runs(run_module, kernel):
    calls = kernel(loaded=True)
    result = run_module(wireguard_implementation, {})
    assert fact(result) == "kernel" and not result.result["changed"] and calls == []


def test_a_module_modprobe_loads_is_the_kernel_and_a_change(run_module, kernel):
    calls = kernel(loaded=False, modprobe_rc=0)
    result = run_module(wireguard_implementation, {})
    assert fact(result) == "kernel" and result.result["changed"]
    assert calls == [["/usr/sbin/modprobe", "wireguard"]]


def test_check_mode_only_asks_modprobe(run_module, kernel):
    calls = kernel(loaded=False, modprobe_rc=0)
    result = run_module(wireguard_implementation, {}, check_mode=True)
    assert fact(result) == "kernel" and result.result["changed"]
    assert calls == [["/usr/sbin/modprobe", "--dry-run", "wireguard"]]


def test_no_module_in_the_kernel_is_userspace_and_no_change(run_module, kernel):
    kernel(loaded=False, modprobe_rc=1)
    result = run_module(wireguard_implementation, {})
    assert fact(result) == "userspace" and not result.result["changed"]
    assert "not found" in result.result["modprobe"]


def test_no_modprobe_is_userspace(run_module, kernel):
    calls = kernel(loaded=False, modprobe=False)
    result = run_module(wireguard_implementation, {}, check_mode=True)
    assert fact(result) == "userspace" and not result.result["changed"] and calls == []
