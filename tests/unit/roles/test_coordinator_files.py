"""llama_coordinator's files and what their changes call for: one managed_files call for the directories and files, a
label per kind of file, and handlers that act on the labels (configure.yml, handlers/main.yml, vars/main.yml) - only
what changed restarts. The role's own expressions are rendered by Ansible's templating with the results a run would
register."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[3] / "roles/llama_coordinator"
CONFIGURE = yaml.safe_load((ROLE / "tasks/configure.yml").read_text())
HANDLERS = {handler["name"]: handler for handler in yaml.safe_load((ROLE / "handlers/main.yml").read_text())}
VARS = yaml.safe_load((ROLE / "vars/main.yml").read_text())
FILES_TASK = next(task for task in CONFIGURE if "directories" in task.get("llamarpc.cluster.managed_files", {}))
KEY_TASK = next(task for task in CONFIGURE if task["name"].startswith("API key file"))


def render(expression, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


PATHS = {
    "llama_coordinator_lib_dir": "/lib",
    "llama_coordinator_service": "svc",
    "_llama_coordinator_env_file": "/etc/cluster.env",
    "_llama_coordinator_plan_file": "/etc/plan.json",
    "_llama_coordinator_hashes_file": "/etc/tensor-hashes.txt",
    "_llama_coordinator_gate": "/lib/llamarpc_gate.py",
    "_llama_coordinator_gate_unit": "svc-gate.service",
}


def labels():
    """Each file of the one call (its destination with PATHS) with its label (None: no label)."""
    entries = FILES_TASK["vars"]["_llama_coordinator_files"] + FILES_TASK["vars"]["_llama_coordinator_plan_record"]
    return {render(entry["dest"], **PATHS): entry.get("label") for entry in entries}


def test_each_kind_of_file_has_the_label_of_what_its_change_calls_for():
    assert labels() == {
        "/etc/cluster.env": "plan",
        "/lib/llamarpc_supervisor.py": "code",
        "/lib/_rpc_protocol.py": "code",
        "/lib/_textfile.py": "code",
        "/lib/_cluster_plan.py": "code",
        "/lib/_atomic.py": "code",
        "/etc/systemd/system/svc.service": "units",
        "/etc/systemd/system/svc-supervisor.service": "units",
        "/etc/systemd/system/svc-supervisor.timer": "units",
        # The gate's responder and unit: a daemon-reload, no restart of llama-server.
        "/lib/llamarpc_gate.py": "gate",
        "/etc/systemd/system/svc-gate.service": "gate",
        "/etc/plan.json": None,  # plan.json restarts nothing
        "/etc/tensor-hashes.txt": None,  # read at the next load; cluster.env's line for it restarts
    }
    assert all("label" not in directory for directory in FILES_TASK["llamarpc.cluster.managed_files"]["directories"])
    assert FILES_TASK["register"] == "_llama_coordinator_files"
    assert FILES_TASK["notify"] == "llama_coordinator files changed"


def test_the_tensor_hashes_file_is_what_tensor_cache_hashes_decided():
    hashes_task = next(task for task in CONFIGURE if "llamarpc.cluster.tensor_cache_hashes" in task)
    assert CONFIGURE.index(hashes_task) < CONFIGURE.index(FILES_TASK)  # decided before cluster.env is written
    assert hashes_task["register"] == "_llama_coordinator_hashes"
    entry = next(e for e in FILES_TASK["vars"]["_llama_coordinator_files"] if "hashes" in e["dest"])
    assert (entry["owner"], entry["group"], entry["mode"]) == ("root", "{{ llama_coordinator_user }}", "0640")
    kept = {"state": "present", "content": "0000000000000001 1 a\n"}
    assert render(entry["state"], _llama_coordinator_hashes=kept) == "present"
    assert render(entry["content"], _llama_coordinator_hashes=kept) == kept["content"]
    stale = {"state": "absent", "content": None}
    assert render(entry["state"], _llama_coordinator_hashes=stale) == "absent"
    assert render(entry["content"], _llama_coordinator_hashes=stale) == ""


@pytest.mark.parametrize(
    ("enabled", "model_path", "shards", "expected"),
    [
        (
            True,
            "",
            [{"name": "m-1.gguf", "sha256": "a" * 64}, {"name": "m-2.gguf", "sha256": None}],
            {"m-1.gguf": "a" * 64},
        ),
        (False, "", [{"name": "m-1.gguf", "sha256": "a" * 64}], {}),
        (True, "/data/m.gguf", [{"name": "m-1.gguf", "sha256": "a" * 64}], {}),
    ],
    ids=["the plan's sha256", "turned off", "a model given by path"],
)
def test_the_shards_in_force_come_from_the_model_roles_plan(enabled, model_path, shards, expected):
    got = render(
        VARS["_llama_coordinator_shard_sha256"],
        llama_coordinator_tensor_hashes=enabled,
        llama_coordinator_model_path=model_path,
        llama_model_shards=shards,
    )
    assert got == expected


def test_the_key_file_is_its_own_no_log_task_that_restarts():
    assert KEY_TASK["no_log"] is True and KEY_TASK["notify"] == "llama_coordinator restart"
    [entry] = KEY_TASK["llamarpc.cluster.managed_files"]["files"]
    assert (entry["owner"], entry["group"], entry["mode"]) == ("root", "{{ llama_coordinator_user }}", "0640")
    for key, state in (("s3cret", "present"), ("", "absent")):
        assert render(entry["state"], llama_coordinator_api_key=key) == state
    assert render(entry["content"], llama_coordinator_api_key="s3cret") == "s3cret\n"


@pytest.mark.parametrize(
    ("changed_labels", "reload", "drop"),
    [
        ({}, False, False),
        ({"units": ["/etc/systemd/system/llamarpc-server.service"]}, True, False),
        ({"plan": ["/etc/llamarpc/coordinator/cluster.env"]}, False, True),
        ({"code": ["/usr/local/lib/llamarpc/coordinator/_atomic.py"]}, False, False),
        ({"gate": ["/etc/systemd/system/llamarpc-server-gate.service"]}, True, False),
    ],
)
def test_a_daemon_reload_for_units_and_the_override_dropped_for_a_new_plan_only(changed_labels, reload, drop):
    files = {"changed_labels": changed_labels}
    for name, wanted in (("Reload systemd", reload), ("Drop the supervisor's override", drop)):
        handler = HANDLERS[name]
        assert handler["listen"] == "llama_coordinator files changed"
        assert render("{{ " + handler["when"] + " }}", _llama_coordinator_files=files) is wanted, name


@pytest.mark.parametrize(
    ("key_changed", "model_changed", "changed_labels", "restart"),
    [
        (False, False, {}, False),  # a directory's mode or plan.json alone
        (True, False, {}, True),  # a new or removed API key
        (False, True, {}, True),  # the model's files
        (False, False, {"plan": ["cluster.env"]}, True),
        (False, False, {"code": ["llamarpc_supervisor.py"]}, True),
        (False, False, {"units": ["llamarpc-server.service"]}, True),
        (False, False, {"gate": ["llamarpc-server-gate.service"]}, False),  # the gate's own files restart nothing
        (False, False, {"gate": ["llamarpc_gate.py"], "units": ["llamarpc-server.service"]}, True),
    ],
)
def test_only_what_changed_restarts(key_changed, model_changed, changed_labels, restart):
    variables = {
        "_llama_coordinator_key": {"changed": key_changed},
        "llama_model_changed": model_changed,
        "_llama_coordinator_files": {"changed_labels": changed_labels},
    }
    assert render(VARS["_llama_coordinator_restart_needed"], **variables) is restart
    restarts = (
        "Remember that llama-server restarts in this run",
        "Restart llama-server behind the gate until it serves",
        "Restart llama-server",
    )
    for name in restarts:
        assert HANDLERS[name]["listen"] == ["llama_coordinator restart", "llama_coordinator files changed"]
        when = HANDLERS[name]["when"]
        assert "_llama_coordinator_restart_needed" in ([when] if isinstance(when, str) else when), name
    # One of the two restarts runs: behind the gate or without it.
    gates = [HANDLERS[name]["when"][0] for name in restarts[1:]]
    assert gates == ["llama_coordinator_gate | bool", "not llama_coordinator_gate | bool"]


def test_with_only_the_model_step_skipped_the_restart_condition_still_renders():
    # --tags service: neither configure task ran; the model-change notification alone decides.
    assert render(VARS["_llama_coordinator_restart_needed"], llama_model_changed=True) is True
    assert render(VARS["_llama_coordinator_restart_needed"]) is False


@pytest.mark.parametrize(
    ("check_mode", "changed_labels", "pending"),
    [
        (True, {"units": ["/etc/systemd/system/llamarpc-server.service"], "plan": ["/etc/x/cluster.env"]},
         ["llamarpc-server.service"]),
        (True, {"plan": ["/etc/x/cluster.env"]}, []),
        (False, {"units": ["/etc/systemd/system/llamarpc-server.service"]}, []),
    ],
)  # fmt: skip
def test_in_check_mode_only_units_whose_files_would_change_are_pending(check_mode, changed_labels, pending):
    variables = {"ansible_check_mode": check_mode, "_llama_coordinator_files": {"changed_labels": changed_labels}}
    assert render(VARS["_llama_coordinator_units_pending"], **variables) == pending


@pytest.mark.parametrize(("supervisor", "run", "stopped"), [
    (True, ["llamarpc-server.service", "llamarpc-server-supervisor.timer"], []),
    (False, ["llamarpc-server.service"], ["llamarpc-server-supervisor.timer"]),
])  # fmt: skip
def test_the_supervisor_timer_runs_or_is_stopped_as_configured(supervisor, run, stopped):
    variables = {"llama_coordinator_service": "llamarpc-server", "llama_coordinator_supervisor": supervisor}
    assert render(VARS["_llama_coordinator_run_units"], **variables) == run
    assert render(VARS["_llama_coordinator_stopped_units"], **variables) == stopped


@pytest.mark.parametrize(("deploy_needed", "files"), [(True, ["env", "plan.json"]), (False, ["env"])])
def test_plan_json_is_written_only_when_a_new_plan_is_deployed(deploy_needed, files):
    # Its record holds the workers' memory, which moves between runs: rewriting it on every run would be a change.
    variables = {
        "_llama_coordinator_files": ["env"],
        "_llama_coordinator_plan_record": ["plan.json"],
        "_llama_coordinator_plan": {"deploy_needed": deploy_needed},
    }
    assert render(FILES_TASK["llamarpc.cluster.managed_files"]["files"], **variables) == files


@pytest.mark.parametrize(("timeout", "wait", "retries"), [(1800, 30, 60), (300, 30, 10), (10, 10, 1), (0, 1, 0)])
def test_the_health_wait_is_cut_in_runs_of_30_s_at_most(timeout, wait, retries):
    service = yaml.safe_load((ROLE / "tasks/service.yml").read_text())
    task = next(task for task in service if "llamarpc.cluster.llama_server_serving" in task)
    variables = {"llama_coordinator_health_timeout": timeout}
    got = render(VARS["_llama_coordinator_health_wait"], **variables)
    assert int(got) == wait
    assert int(render(task["retries"], _llama_coordinator_health_wait=got, **variables)) == retries


@pytest.mark.parametrize(
    ("restarted", "health_before", "tokens"),
    [
        (False, 200, 1),  # a rerun that changes nothing: llama-server served before and was not restarted
        (True, 200, 16),  # restarted in this run (a changed key, flag, binary, plan or model)
        (False, 503, 16),  # it was loading, or not serving, when the run began
        (False, 0, 16),
    ],
)
def test_the_smoke_is_one_token_on_a_rerun_and_the_full_completion_after_a_restart(restarted, health_before, tokens):
    """The README's rerun promise: one token when nothing restarted and llama-server served already."""
    variables = {
        "llama_coordinator_smoke_tokens": 16,
        "_llama_coordinator_plan": {"health_status": health_before},
    }
    if restarted:
        variables["_llama_coordinator_restarted"] = True
    assert int(render(VARS["_llama_coordinator_smoke_n"], **variables)) == tokens


def test_the_cutover_restarts_the_workers_left_waiting_for_it_and_llama_server_once():
    """The workers whose role left them running for the cutover (llama_rpc_worker_binaries.waits), by name and by
    endpoint in step; a worker that switched without waiting (its role restarted it), or that did not run the role,
    is not restarted again. Any such worker restarts llama-server."""
    hostvars = {
        "n1": {"llama_rpc_worker_binaries": {"waits": True, "switch": True}},
        "n2": {"llama_rpc_worker_binaries": {"waits": False, "switch": True}},
        "n3": {},
    }
    variables = {
        "hostvars": hostvars,
        "_llama_coordinator_workers": ["n1", "n2", "n3"],
        "_llama_coordinator_endpoints": ["10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.3:50052"],
    }
    variables["_llama_coordinator_switch_flags"] = render(VARS["_llama_coordinator_switch_flags"], **variables)
    assert variables["_llama_coordinator_switch_flags"] == [True, False, False]
    assert render(VARS["_llama_coordinator_switching"], **variables) == ["n1"]
    assert render(VARS["_llama_coordinator_switching_endpoints"], **variables) == ["10.0.0.1:50052"]
    assert render(VARS["_llama_coordinator_restart_needed"], _llama_coordinator_switching=["n1"]) is True
    assert render(VARS["_llama_coordinator_restart_needed"], _llama_coordinator_switching=[]) is False
