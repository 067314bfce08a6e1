"""llama_cluster_plan run on the coordinator with O(worker_hosts): it reads the state it plans on itself - /health (with
the API key), the env files in force, plan.json (once), its own memory - probes the workers llama-server is not
connected to, refuses a worker of another protocol major, plans from the controller's headers in check mode, and
decides whether to seed (was gathered in seven tasks and decided in Jinja in the llama_coordinator role)."""

from __future__ import annotations

import http.server
import json
import threading
from types import SimpleNamespace
from unittest import mock

import pytest
from ansible.plugins.action import ActionBase
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.action import llama_cluster_plan as action
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_state as state
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _plan_run
from ansible_collections.llamarpc.cluster.plugins.modules import llama_cluster_plan

GIB = 1 << 30
HOSTS = ["n1", "n2", "n3"]
SEEDING = {"cache_dir": "/var/cache/w/rpc", "keep_file": "/var/cache/w/keep", "hasher": ""}


class Health(http.server.ThreadingHTTPServer):
    """llama-server's /health on loopback: answers ``status``; records the Authorization header of each request."""

    def __init__(self, status):
        self.status = status
        self.auth = []
        super().__init__(("127.0.0.1", 0), HealthHandler)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class HealthHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server API
        self.server.auth.append(self.headers.get("Authorization"))
        body = json.dumps({"status": "ok"} if self.server.status == 200 else {"error": {"message": "Loading model"}})
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def health():
    servers = []

    def start(status):
        server = Health(status)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("model"), preset="tiny", shards=2, seed=7)


@pytest.fixture
def workers(rpc_server, closed_port):
    """n1 and n3 answer HELLO (protocol 7), nothing listens for n2."""
    ready = [rpc_server(major=7), rpc_server(major=7)]
    return [ready[0].endpoint, f"127.0.0.1:{closed_port}", ready[1].endpoint]


def figures(*names):
    """Each worker's memory as the delegated node_memory_facts loop read it; a name not given did not answer."""
    return {name: ({"available": 4 * GIB, "total": 8 * GIB} if name in names else {}) for name in HOSTS}


@pytest.fixture
def plan(run_module, model, workers, tmp_path):
    def run(check_mode=False, **args):
        base = {
            "model_path": model["files"][0]["path"],
            "worker_hosts": HOSTS,
            "endpoints": workers,
            "memory": figures(*HOSTS),
            "coordinator": "n1",
            "ctx_size": 512,
            "strategy": "all",
            "rpc_protocol": "7.0.0",
            "env_files": [str(tmp_path / "override.env"), str(tmp_path / "cluster.env")],
            "plan_file": str(tmp_path / "plan.json"),
            "deployment": {
                "service": "llamarpc-server",
                "url": "http://10.0.0.1:8080",
                "model_path": model["files"][0]["path"],
                "replan_after": 120,
            },
        }
        given = {key: value for key, value in {**base, **args}.items() if value is not None}  # None: not given
        return run_module(llama_cluster_plan, given, check_mode=check_mode)

    return run


def states(out):
    return [worker["state"] for worker in out.result["candidates"]]


def test_the_probe_and_the_memory_make_the_candidates(plan, workers):
    out = plan()
    assert not out.failed, out.result
    assert states(out) == ["ready", "refused", "ready"]
    first = out.result["candidates"][0]
    assert (first["name"], first["endpoint"], first["mem_available"], first["mem_total"]) == (
        "n1",
        workers[0],
        4 * GIB,
        8 * GIB,
    )
    assert first["rtt_ms"] is not None
    assert [entry["endpoint"] for entry in out.result["probe"]] == workers
    assert out.result["plan"]["rpc"] == f"{workers[0]},{workers[2]}"
    assert out.result["serving"] == [] and out.result["health_status"] == 0  # no api_url: nothing answers
    assert out.result["planned_from"] == "coordinator"


def test_a_host_without_memory_figures_is_unreachable_over_ssh(plan):
    out = plan(memory=figures("n1", "n2"))
    assert states(out)[2] == "unreachable over SSH"
    assert out.result["candidates"][2]["mem_available"] == 0


def test_health_is_asked_with_the_api_key(plan, health):
    server = health(503)
    out = plan(api_url=server.url, api_key="s3cret")
    assert out.result["health_status"] == 503
    assert server.auth == ["Bearer s3cret"]
    assert "s3cret" not in json.dumps(out.result)  # no_log: the key is not returned
    server = health(200)
    plan(api_url=server.url)
    assert server.auth == [None]  # no key, no header


def test_the_plan_in_force_serves_when_healthy_and_is_not_probed(plan, health, tmp_path, workers, monkeypatch):
    probed = []
    real = _plan_run._probe
    monkeypatch.setattr(_plan_run, "_probe", lambda endpoints: probed.append(list(endpoints)) or real(endpoints))
    (tmp_path / "cluster.env").write_text(f"# managed\nLLAMARPC_RPC={workers[1]},{workers[2]}\nLLAMARPC_PLAN_ARGS=x\n")
    healthy = plan(api_url=health(200).url)
    assert healthy.result["serving"] == workers[1:]
    assert probed == [workers[:1]]  # only the worker llama-server does not hold
    assert states(healthy) == ["ready", "ready", "ready"]
    # Loading (503): nothing is serving, every worker is probed and n2's refusal stands.
    probed.clear()
    loading = plan(api_url=health(503).url)
    assert loading.result["serving"] == [] and probed == [workers] and states(loading)[1] == "refused"
    # The supervisor's override comes first.
    (tmp_path / "override.env").write_text(f"LLAMARPC_RPC={workers[2]}\n")
    assert plan(api_url=health(200).url).result["serving"] == workers[2:]


def test_a_worker_of_another_protocol_major_is_refused_before_planning(plan, rpc_server, workers):
    foreign = rpc_server(major=6)
    out = plan(endpoints=[workers[0], workers[1], foreign.endpoint])
    assert out.failed
    assert out.result["msg"] == (
        f"{foreign.endpoint} speaks RPC protocol 6.0.0, but llama-server on n1 speaks 7.0.0 and accepts only a worker "
        "of its own major version with a minor no newer than its own: deploy the same llama.cpp version on every host "
        "(run site.yml on the workers), or take that worker out of the 'rpc_workers' group."
    )
    assert "plan" not in out.result
    # Without the coordinator's protocol there is nothing to compare with.
    assert not plan(endpoints=[workers[0], workers[1], foreign.endpoint], rpc_protocol="").failed


def test_a_worker_of_a_newer_protocol_minor_is_refused_and_an_older_one_planned(plan, rpc_server, workers):
    """llama.cpp's RPC client refuses a worker whose minor is newer than its own (ggml-rpc.cpp), and takes an older
    one: the order a llama.cpp change must keep (the coordinator's llama-server first when the minor goes up)."""
    newer = rpc_server(major=7, minor=1)
    out = plan(endpoints=[workers[0], workers[1], newer.endpoint])
    assert out.failed and f"{newer.endpoint} speaks RPC protocol 7.1.0" in out.result["msg"]
    assert not plan(endpoints=[workers[0], workers[1], newer.endpoint], rpc_protocol="7.1.0").failed
    assert not plan(endpoints=[workers[0], workers[1], newer.endpoint], rpc_protocol="7.2.0").failed


def test_a_worker_that_switches_llama_cpp_is_checked_by_its_new_build_not_probed(plan, rpc_server, workers):
    """A worker that switches llama.cpp in this run runs its old binaries until the cutover: its probe would say what
    it leaves (here protocol 6, which llama-server 7.0.0 refuses). It counts as ready without a probe, and the rule
    is applied to the build it switches to: 7.0.0 planned, 7.1.0 (a newer minor) refused before any change."""
    leaving = rpc_server(major=6)
    endpoints = [workers[0], workers[1], leaving.endpoint]
    assert plan(endpoints=endpoints).failed  # probed: the build it leaves is refused
    switching = [False, False, True]
    out = plan(endpoints=endpoints, switching=switching, worker_protocols=["7.0.0", "7.0.0", "7.0.0"])
    assert not out.failed, out.result.get("msg")
    assert states(out) == ["ready", "refused", "ready"]
    assert leaving.endpoint not in [entry["endpoint"] for entry in out.result["probe"]]
    newer = plan(endpoints=endpoints, switching=switching, worker_protocols=["7.0.0", "7.0.0", "7.1.0"])
    assert newer.failed and f"{leaving.endpoint} speaks RPC protocol 7.1.0" in newer.result["msg"]
    # Not in step with the workers: refused.
    assert "switching must be given in step" in plan(switching=[True]).result["msg"]


def test_check_mode_counts_a_worker_nothing_answers_for_as_ready(plan):
    assert states(plan(check_mode=True)) == ["ready", "ready", "ready"]
    assert states(plan()) == ["ready", "refused", "ready"]


def test_plan_only_counts_every_worker_and_reports_a_model_that_cannot_fit(plan, model):
    summary = plan().result["model"]
    only = plan(plan_only=True, model=summary, model_path=None)
    assert states(only) == ["ready", "ready", "ready"] and only.result["refusal"] == ""
    tight = {name: {"available": 1 << 20, "total": 0} for name in HOSTS}
    refused = plan(plan_only=True, model=summary, model_path=None, memory=tight)
    assert not refused.failed and "plan" not in refused.result
    assert "does not fit" in refused.result["refusal"] or "no usable RPC worker" in refused.result["refusal"]
    assert [worker["name"] for worker in refused.result["candidates"]] == HOSTS
    # Outside the plan-only run, the same model fails the task, with the candidates.
    failed = plan(memory=tight)
    assert failed.failed and [worker["name"] for worker in failed.result["candidates"]] == HOSTS


def test_the_deployed_plan_is_read_once(plan, tmp_path, monkeypatch):
    record = plan().result["record"]
    (tmp_path / "plan.json").write_text(json.dumps(record, indent=4, sort_keys=True))
    reads = []
    real = state.read_text
    monkeypatch.setattr(state, "read_text", lambda path: reads.append(path) or real(path))
    out = plan()
    assert reads.count(str(tmp_path / "plan.json")) == 1
    assert out.result["deploy_needed"] is False
    assert out.result["plan"]["rpc"] == record["plan"]["rpc"]


def test_the_record_and_when_it_must_be_rewritten(plan, tmp_path):
    out = plan()
    record = out.result["record"]
    assert record["options"]["ctx_size"] == 512 and record["options"]["coordinator"] == "n1"
    assert all("state" not in worker for worker in record["workers"])
    assert record["plan"] == out.result["plan"]
    assert out.result["deploy_needed"] is True  # nothing deployed
    deployed = tmp_path / "plan.json"
    moved = json.loads(json.dumps(record))
    for worker in moved["workers"]:
        worker["mem_available"] -= GIB
    deployed.write_text(json.dumps(moved))
    assert plan().result["deploy_needed"] is False  # memory moves: not rewritten
    assert plan(ctx_size=1024).result["deploy_needed"] is True
    deployed.write_text("not json")
    assert plan().result["deploy_needed"] is True


def test_the_coordinators_own_memory_is_read_for_fit_first(plan, monkeypatch):
    reads = []
    big = {"available": 64 * GIB, "total": 64 * GIB}
    monkeypatch.setattr(_plan_run._node_memory, "memory_facts", lambda: reads.append(1) or big)
    local = plan(coordinator="c", strategy="fewest")
    assert reads == [1] and local.result["plan"]["local"] is True
    # A worker shares the coordinator's host: its figure is the coordinator's, nothing else is read.
    reads.clear()
    plan(coordinator="n1", strategy="fewest")
    assert reads == []
    # Not fit first: not read.
    plan(coordinator="c", strategy="fewest", fit_first=False)
    assert reads == []
    # Not fit first, but a draft model to run (speculative decoding): read, for the draft's bytes there; a
    # draftless type needs none.
    params = {"coordinator_memory": None, "worker_hosts": ["n1"], "coordinator": "c", "fit_first": False}
    assert _plan_run._coordinator_memory({**params, "speculative": {"types": ["ngram-simple"]}}) is None
    assert _plan_run._coordinator_memory({**params, "speculative": None}) is None
    assert reads == []
    assert _plan_run._coordinator_memory({**params, "speculative": {"types": ["draft-simple"]}}) == big
    assert reads == [1]


@pytest.mark.parametrize(
    ("seeding", "health_status", "deployed", "plan_only", "needed"),
    [
        ([SEEDING] * 3, 200, False, False, True),  # nothing deployed yet: a load is coming
        ([SEEDING] * 3, 200, True, False, False),  # a rerun that changes nothing seeds nothing
        ([SEEDING] * 3, 503, True, False, True),  # llama-server not serving: it will load
        ([{}] * 3, 503, False, False, False),  # no worker has a cache to seed
        ([SEEDING] * 3, 503, False, True, False),  # the plan-only run seeds nothing
    ],
)
def test_seed_needed(plan, health, tmp_path, seeding, health_status, deployed, plan_only, needed):
    args = {"seeding": seeding, "api_url": health(health_status).url}
    if deployed:
        (tmp_path / "plan.json").write_text(json.dumps(plan().result["record"]))
    if plan_only:
        args.update(plan_only=True, model=plan().result["model"], model_path=None)
    assert plan(**args).result["seed_needed"] is needed


def test_seed_needed_is_false_when_planned_from_the_controller(plan, model):
    summary = plan().result["model"]
    out = plan(check_mode=True, model_path="/nowhere/m.gguf", controller_model=summary, seeding=[SEEDING] * 3)
    assert out.result["planned_from"] == "controller" and out.result["seed_needed"] is False


def test_where_the_model_is_planned_from(plan, model):
    summary = plan().result["model"]
    here = plan(check_mode=True)
    controller = plan(check_mode=True, model_path="/nowhere/m.gguf", controller_model=summary)
    assert (here.result["planned_from"], controller.result["planned_from"]) == ("coordinator", "controller")
    assert controller.result["plan"]["rpc"] == here.result["plan"]["rpc"]
    nothing = plan(check_mode=True, model_path="/nowhere/m.gguf")
    assert not nothing.failed and "plan" not in nothing.result and nothing.result["planned_from"] is None
    assert nothing.result["msg"].startswith(
        "/nowhere/m.gguf is not on n1 yet, and its headers are not on the controller"
    )
    # A real run never plans from the controller's copy: the model must be on the coordinator.
    real = plan(model_path="/nowhere/m.gguf", controller_model=summary)
    assert real.failed and real.result["msg"] == "/nowhere/m.gguf does not exist on n1."


def test_endpoints_must_be_in_step_with_the_hosts(plan, workers):
    out = plan(endpoints=workers[:2])
    assert out.failed and "in step" in out.result["msg"]


def test_the_action_reads_the_controllers_headers(model, tmp_path):
    summary = action.controller_model(model["files"][0]["path"])
    assert summary["n_layer"] == model["block_count"]
    assert action.controller_model(str(tmp_path / "absent.gguf")) is None
    assert action.controller_model("") is None


def run_action(args, check_mode):
    """The action plugin's run() with the module call captured: (module name, module args)."""
    calls = []
    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = SimpleNamespace(args=args, check_mode=check_mode, async_val=0, diff=False)

    def execute(self, module_name, module_args, task_vars):
        calls.append((module_name, module_args))
        return {"changed": False}

    with (
        mock.patch.object(ActionBase, "run", lambda self, tmp=None, task_vars=None: {}),
        mock.patch.object(action.ActionModule, "_execute_module", execute),
    ):
        plugin.run(task_vars={})
    return calls[0]


def test_the_action_gives_the_controllers_model_in_check_mode_only(model):
    path = model["files"][0]["path"]
    name, args = run_action({"model_path": "/on/the/coordinator.gguf", "controller_model_path": path}, check_mode=True)
    assert name == "llamarpc.cluster.llama_cluster_plan" and args["controller_model"]["n_layer"] == model["block_count"]
    _name, args = run_action({"model_path": "/m.gguf", "controller_model_path": path}, check_mode=False)
    assert "controller_model" not in args  # a real run never plans from the controller's copy
    _name, args = run_action(
        {"model": {"n_layer": 1}, "plan_only": True, "controller_model_path": path}, check_mode=True
    )
    assert "controller_model" not in args  # the plan-only run plans the model it is given
    _name, args = run_action({"model_path": "/m.gguf", "controller_model": {"forged": 1}}, check_mode=False)
    assert "controller_model" not in args  # only the plugin sets it
