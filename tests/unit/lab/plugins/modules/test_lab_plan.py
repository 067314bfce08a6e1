"""lab_plan refuses bad requests and a controller that cannot boot the lab, with a clear message."""

from __future__ import annotations

import os

from ansible_collections.llamarpc.lab.plugins.modules import lab_plan


def test_plans_the_default_lab(run_module, monkeypatch):
    monkeypatch.setattr(lab_plan, "controller_problems", lambda module, planned: [])
    outcome = run_module(lab_plan, {"lab_name": "t"})
    assert not outcome.failed
    assert outcome.result["changed"] is False
    assert len(outcome.result["hosts"]) == 6


def test_zero_hosts_is_an_error(run_module):
    outcome = run_module(lab_plan, {"lab_name": "t", "host_count": 0, "check_controller": False})
    assert outcome.failed and "lab_host_count" in outcome.result["msg"]


def test_too_many_hosts_for_the_subnet(run_module):
    outcome = run_module(
        lab_plan, {"lab_name": "t", "host_count": 5, "subnet": "10.9.0.0/28", "check_controller": False}
    )
    assert outcome.failed and "do not fit" in outcome.result["msg"]


def test_invalid_name(run_module):
    outcome = run_module(lab_plan, {"lab_name": "t", "hosts": [{"name": "Bad_Name"}], "check_controller": False})
    assert outcome.failed and "invalid lab host name" in outcome.result["msg"]


def test_not_root_and_missing_kernel_features(run_module, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    real_exists = os.path.exists
    monkeypatch.setattr(
        os.path, "exists", lambda p: False if p in ("/dev/fuse", "/dev/loop-control") else real_exists(p)
    )
    outcome = run_module(lab_plan, {"lab_name": "t", "hosts": [{"name": "a", "data_size": "1G"}]})
    assert outcome.failed
    problems = " ".join(outcome.result["problems"])
    assert "root" in problems and "/dev/fuse" in problems and "/dev/loop-control" in problems
    assert "/dev/net/tun" not in problems


def test_missing_memory_cgroup_is_reported_only_when_a_cap_is_asked(run_module, monkeypatch):
    monkeypatch.setattr(lab_plan, "memory_cgroup_available", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    capped = run_module(lab_plan, {"lab_name": "t", "hosts": [{"name": "a", "memory_max": "1G"}]})
    assert capped.failed and "memory cgroup" in capped.result["msg"]
    uncapped = run_module(lab_plan, {"lab_name": "t", "hosts": [{"name": "a"}]})
    assert "memory cgroup" not in uncapped.result.get("msg", "")
