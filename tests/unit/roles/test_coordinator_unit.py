"""The llama-server unit and its env file as the template module renders them: the plan's arguments reach llama-server
through one unbraced variable, which systemd splits into words (zero for an empty value), so a local plan (fit first)
starts llama-server with no --rpc at all. What systemd does with it is shown on a lab host (tests/test_plan.py of the
default scenario reads the running process's argv)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import worker_unit
import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles/llama_coordinator"
LOCAL = {"rpc": "", "args": "--device none --n-gpu-layers 0"}
SPREAD = {"rpc": "10.0.0.2:50052", "args": "--rpc 10.0.0.2:50052 --device RPC0 --tensor-split 9 --n-gpu-layers all"}
VARIABLES = {
    "ansible_managed": "Ansible managed",
    "llama_coordinator_user": "llamarpc-server",
    "llama_coordinator_worker_wait": 60,
    "llama_coordinator_ctx_size": 4096,
    "llama_coordinator_parallel": 1,
    "llama_coordinator_cache_type_k": "f16",
    "llama_coordinator_cache_type_v": "f16",
    "llama_coordinator_cache_ram": 0,
    "llama_coordinator_port": 8080,
    "llama_coordinator_metrics": True,
    "llama_coordinator_api_key": "",
    "llama_coordinator_log_verbosity": 3,
    "llama_coordinator_extra_args": [],
    "llama_cpp_server_bin": "/opt/llamarpc/llama.cpp/KEY/bin/llama-server",
    "_llama_coordinator_env_file": "/etc/llamarpc/coordinator/cluster.env",
    "_llama_coordinator_supervisor": "/usr/local/lib/llamarpc/coordinator/llamarpc_supervisor.py",
    "_llama_coordinator_model": "/data/models/m-00001-of-00002.gguf",
    "_llama_coordinator_load_mode": "auto",
    "_llama_coordinator_threads": 2,
    "_llama_coordinator_bind": "10.0.0.1",
    "_llama_coordinator_alias": "m",
    "_llama_coordinator_key_file": "/etc/llamarpc/coordinator/api-keys",
    "_llama_coordinator_model_sandbox": ["ProtectSystem=strict"],
}


def render(template, plan=None, **more):
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    text = (ROLE / "templates" / template).read_text()
    return env.from_string(text).render({**VARIABLES, "_llama_coordinator_plan": {"plan": plan or LOCAL}, **more})


def test_the_plan_arguments_are_one_unbraced_word_of_exec_start():
    [argv] = worker_unit.commands(render("server.service.j2"), "ExecStart")
    assert argv[:4] == [
        VARIABLES["llama_cpp_server_bin"],
        "--model",
        VARIABLES["_llama_coordinator_model"],
        "$LLAMARPC_PLAN_ARGS",
    ]
    # No other plan flag in the unit, and nothing braced: "${X}" is always exactly one argument, even when empty.
    assert not {"--rpc", "--device", "--tensor-split", "--n-gpu-layers"} & set(argv), argv
    assert not [word for word in argv if "${" in word], argv
    # No prompt cache by default: over RPC it reads each request's context back from the workers.
    assert argv[argv.index("--cache-ram") + 1] == "0"
    [pre] = worker_unit.commands(render("server.service.j2"), "ExecStartPre")
    # Before each start the supervisor waits for $LLAMARPC_RPC's workers (none on a local plan: it returns at once),
    # asking every 0.05 s (in a llama.cpp cutover the workers restart meanwhile).
    assert pre == [
        "/usr/bin/python3", VARIABLES["_llama_coordinator_supervisor"], "wait", "--timeout", "60", "--interval", "0.05"
    ]  # fmt: skip


def test_the_env_file_holds_the_workers_to_wait_for_and_the_plan_arguments():
    local = dict(worker_unit.directives(render("cluster.env.j2", LOCAL)))
    assert local == {"LLAMARPC_RPC": "", "LLAMARPC_PLAN_ARGS": "--device none --n-gpu-layers 0"}
    spread = dict(worker_unit.directives(render("cluster.env.j2", SPREAD)))
    assert spread == {"LLAMARPC_RPC": SPREAD["rpc"], "LLAMARPC_PLAN_ARGS": SPREAD["args"]}


def test_the_env_file_gives_llama_server_the_tensor_hashes_only_when_decided():
    path = "/etc/llamarpc/coordinator/tensor-hashes.txt"
    used = {"environment": {"LLAMA_ARG_RPC_TENSOR_HASHES": path}}
    spread = dict(worker_unit.directives(render("cluster.env.j2", SPREAD, _llama_coordinator_hashes=used)))
    assert spread == {
        "LLAMARPC_RPC": SPREAD["rpc"],
        "LLAMARPC_PLAN_ARGS": SPREAD["args"],
        "LLAMA_ARG_RPC_TENSOR_HASHES": path,
    }
    unused = dict(
        worker_unit.directives(render("cluster.env.j2", SPREAD, _llama_coordinator_hashes={"environment": {}}))
    )
    assert "LLAMA_ARG_RPC_TENSOR_HASHES" not in unused


def test_the_gate_runs_as_llama_servers_user_without_privileges():
    text = render(
        "gate.service.j2",
        _llama_coordinator_gate="/usr/local/lib/llamarpc/coordinator/llamarpc_gate.py",
        llama_coordinator_gate_port=8081,
        llama_coordinator_gate_retry_after=10,
    )
    [argv] = worker_unit.commands(text, "ExecStart")
    assert argv == [
        "/usr/bin/python3",
        "/usr/local/lib/llamarpc/coordinator/llamarpc_gate.py",
        "--address",
        "10.0.0.1",
        "--port",
        "8081",
        "--retry-after",
        "10",
    ]
    lines = set(text.splitlines())
    assert {"User=llamarpc-server", "Group=llamarpc-server", "NoNewPrivileges=yes", "CapabilityBoundingSet="} <= lines
    assert {"ProtectSystem=strict", "PrivateTmp=yes", "ProtectHome=yes"} <= lines
    assert not [line for line in lines if line.startswith(("DynamicUser", "AmbientCapabilities=CAP", "[Install]"))]


def test_the_restart_is_gated_and_the_gate_always_goes():
    """The handler restarts llama-server behind the gate in one module run, a llama.cpp cutover too: the switching
    workers' waits are queued (and said armed) before the handlers run, and collected after; a block's `always` closes
    the gate whatever happened, in service.yml and in the restart entry point, which queues the same waits (one task
    file for both) for the workers that left their restart to it."""
    handlers = {task["name"]: task for task in yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())}
    gated = handlers["Restart llama-server behind the gate until it serves"]["llamarpc.cluster.llama_server_gate"]
    assert gated["state"] == "restarted" and gated["server_unit"] == "{{ llama_coordinator_service }}.service"
    service = yaml.safe_load((ROLE / "tasks" / "service.yml").read_text())
    [block] = [task for task in service if "block" in task and "always" in task]
    names = [task["name"] for task in block["block"]]
    assert names.index("Cutover to the new llama.cpp") < names.index("Apply unit and plan changes before (re)starting")
    [cutover] = [task for task in block["block"] if task["name"] == "Cutover to the new llama.cpp"]
    arm, notify = cutover["block"]
    assert arm["ansible.builtin.import_tasks"] == "cutover_arm.yml"
    assert arm["vars"]["_llama_coordinator_cutover_from"] == "llama_rpc_worker_binaries"
    assert notify["notify"] == "llama_coordinator restart" and notify["changed_when"] is True
    armed = yaml.safe_load((ROLE / "tasks" / "cutover_arm.yml").read_text())
    modules = [next(key for key in task if key.startswith(("ansible.", "llamarpc."))) for task in armed]
    assert modules == [
        "ansible.builtin.systemd_service", "ansible.builtin.set_fact", "llamarpc.cluster.rpc_worker_cutover",
        "ansible.builtin.wait_for",
    ]  # fmt: skip
    waits = armed[2]
    assert waits["poll"] == 0 and "notify" not in waits and "delegate_to" in waits
    collect = [task for task in block["block"] if task.get("ansible.builtin.import_tasks") == "cutover_collect.yml"]
    assert len(collect) == 1 and names.index(collect[0]["name"]) > names.index(
        "Apply unit and plan changes before (re)starting"
    )
    [status] = yaml.safe_load((ROLE / "tasks" / "cutover_collect.yml").read_text())
    assert "ansible.builtin.async_status" in status
    [close] = block["always"]
    assert close["llamarpc.cluster.llama_server_gate"]["state"] == "closed" and "when" not in close
    restart = yaml.safe_load((ROLE / "tasks" / "restart.yml").read_text())
    [block] = [task for task in restart if "block" in task]
    steps = [next(key for key in task if key.startswith(("ansible.", "llamarpc."))) for task in block["block"]]
    gate = steps.index("llamarpc.cluster.llama_server_gate")
    assert block["block"][gate]["llamarpc.cluster.llama_server_gate"]["state"] == "restarted"
    arm = steps.index("ansible.builtin.import_tasks")
    assert block["block"][arm]["ansible.builtin.import_tasks"] == "cutover_arm.yml" and arm < gate
    assert block["block"][-1]["ansible.builtin.import_tasks"] == "cutover_collect.yml"
    close, timer = block["always"]
    assert close["llamarpc.cluster.llama_server_gate"]["state"] == "closed" and "when" not in close
    assert timer["ansible.builtin.systemd_service"]["state"] == "started"
