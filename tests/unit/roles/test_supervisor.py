"""The coordinator's supervisor: peers from /proc/net/tcp, re-plans, restores (systemctl and probes replaced)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "plugins" / "module_utils" / sub) for sub in ("rpc", "plan", "files", "metrics")]
SPEC = importlib.util.spec_from_file_location(
    "llamarpc_supervisor", ROOT / "roles" / "llama_coordinator" / "files" / "llamarpc_supervisor.py"
)
supervisor = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(supervisor)

GIB = 1 << 30


def test_established_peers_parses_ipv4_and_mapped_ipv6_and_skips_dead_peers(tmp_path):
    tcp = tmp_path / "tcp"
    tcp.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt\n"
        "   0: 0B00D50A:8F1A 0C00D50A:C3C4 01 00000000:00000000 00:00000000 00000000\n"  # established: 10.213.0.12
        "   1: 0B00D50A:8F1B 0D00D50A:C3C4 06 00000000:00000000 00:00000000 00000000\n"  # TIME_WAIT: ignored
        # Established, but in its third retransmission timeout: a peer that lost power (no FIN) is not held.
        "   2: 0B00D50A:8F1C 0F00D50A:C3C4 01 00000080:00000000 01:000004B0 00000003\n"
    )
    tcp6 = tmp_path / "tcp6"
    tcp6.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt\n"
        "   0: 0000000000000000FFFF00000B00D50A:1F90 0000000000000000FFFF00000E00D50A:C354 01 0:0 00:0 00000000\n"
        "   1: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:C354 01 0:0 00:0 00000000\n"
    )
    assert supervisor.established_peers((str(tcp), str(tcp6))) == {"10.213.0.12:50116", "10.213.0.14:50004"}


def config(tmp_path, replan_after=20, **changes):
    """The deployed plan record (plan.json): three workers, all in the plan; ``changes`` replace top-level keys."""
    workers = [{"name": f"n{i}", "endpoint": f"10.0.0.{i}:50052", "mem_available": 4 * GIB} for i in (1, 2, 3)]
    summary = {
        "n_layer": 8,
        "n_head_kv": 2,
        "head_k": 64,
        "head_v": 64,
        "layer_bytes": [100 << 20] * 8,
        "output_bytes": 10 << 20,
        "embedding_bytes": 10 << 20,
        "weight_bytes": (8 * 100 + 10 + 10) << 20,
    }
    data = {
        "service": "llamarpc-server",
        "url": "http://10.0.0.1:8080",
        "workers": workers,
        "summary": summary,
        "options": {
            "ctx_size": 512,
            "parallel": 1,
            "cache_type_k": "f16",
            "cache_type_v": "f16",
            "headroom": 0,
            "overhead": 0,
            "strategy": "all",
            "coordinator": None,
        },
        "plan": {"rpc": ",".join(w["endpoint"] for w in workers), "devices": "RPC0,RPC1,RPC2", "tensor_split": "3,3,3"},
        "replan_after": replan_after,
    }
    data.update(changes)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def world(tmp_path, monkeypatch, capsys):
    """Probes, llama-server's health, connections and restarts under the test's control."""
    state = {"down": set(), "serving": True, "restarts": 0, "now": 1000.0}
    monkeypatch.setattr(
        supervisor,
        "probe_all",
        lambda endpoints, timeout, protocols=None: {e: "refused" if e in state["down"] else "ready" for e in endpoints},
    )
    # serving: True (200, loaded), False (nothing answers) or an HTTP status (503 while llama-server loads).
    monkeypatch.setattr(
        supervisor, "listening", lambda url: {True: 200, False: 0}.get(state["serving"], state["serving"])
    )
    monkeypatch.setattr(
        supervisor, "established_peers", lambda: {f"10.0.0.{i}:50052" for i in (1, 2, 3)} - state["down"]
    )
    monkeypatch.setattr(supervisor, "restart", lambda service: state.__setitem__("restarts", state["restarts"] + 1))
    monkeypatch.setattr(supervisor, "started_at", lambda service: state.get("started"))
    monkeypatch.setattr(supervisor.time, "monotonic", lambda: state["now"] - 500.0)
    monkeypatch.setattr(supervisor.time, "time", lambda: state["now"])
    paths = [
        "--plan",
        str(config(tmp_path)),
        "--override",
        str(tmp_path / "o.env"),
        "--plan-in-force",
        str(tmp_path / "p.json"),
        "--state",
        str(tmp_path / "s.json"),
    ]

    def check():
        assert supervisor.main([*paths, "check"]) == 0
        return json.loads((tmp_path / "s.json").read_text())

    def status():
        capsys.readouterr()  # what check printed before
        assert supervisor.main([*paths, "status"]) == 0
        return json.loads(capsys.readouterr().out)

    state["check"] = check
    state["status"] = status
    state["state_file"] = tmp_path / "s.json"
    state["override"] = tmp_path / "o.env"
    return state


def test_a_worker_down_past_the_limit_is_planned_around_then_taken_back(world):
    assert world["check"]()["verdict"] == "ok"
    world["down"].add("10.0.0.3:50052")
    assert world["check"]()["verdict"] == "degraded"  # down, but not for long yet
    world["now"] += 25
    assert world["check"]()["verdict"] == "degraded"  # down for long enough, but in two checks only
    assert world["restarts"] == 0
    world["now"] += 5
    record = world["check"]()
    assert record["verdict"] == "replanned" and "n3" in record["message"]
    override = world["override"].read_text()
    assert "LLAMARPC_RPC=10.0.0.1:50052,10.0.0.2:50052\n" in override
    # What the unit expands unbraced into llama-server's arguments: the re-plan's workers, devices and split.
    args = "--rpc 10.0.0.1:50052,10.0.0.2:50052 --device RPC0,RPC1 --tensor-split 5,4 --n-gpu-layers all"
    assert f"LLAMARPC_PLAN_ARGS={args}\n" in override
    assert world["restarts"] == 1
    # While the worker stays down, the verdict keeps saying what the cluster runs on (status.yml shows it).
    world["now"] += 5
    still = world["check"]()
    assert still["verdict"] == "degraded" and still["message"].startswith("re-planned without n3; down: n3")
    assert world["restarts"] == 1
    world["down"].clear()
    world["now"] += 5
    assert world["check"]()["verdict"] == "restored"
    assert not world["override"].exists()
    assert world["restarts"] == 2


def test_the_override_the_plan_in_force_and_the_state_are_written_durably(world, sync_trace):
    """Each written whole by the collection's _atomic.py (copied beside the supervisor): fsync, rename, fsync of the
    directory. They live under /run (gone at a reboot by design); what this shows is that no half-written override
    is ever read by llama-server's unit."""
    world["check"]()
    sync_trace.assert_durable(world["state_file"])
    world["down"].add("10.0.0.3:50052")
    for _check in range(3):
        world["now"] += 15
        record = world["check"]()
    assert record["verdict"] == "replanned"
    sync_trace.assert_durable(world["override"])
    sync_trace.assert_durable(world["override"].parent / "p.json")
    sync_trace.assert_durable(world["state_file"])


def test_when_the_model_no_longer_fits_it_stays_down_and_says_why(world, tmp_path):
    world["down"].update({"10.0.0.2:50052", "10.0.0.3:50052"})
    world["check"]()
    world["check"]()
    world["now"] += 30
    # Two workers of 4 GiB are gone: one cannot hold 8 x 100 MiB? It can; make it not fit by shrinking memory.
    plan = json.loads((tmp_path / "plan.json").read_text())
    plan["workers"][0]["mem_available"] = 300 << 20
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    record = world["check"]()
    assert record["verdict"] == "down"
    assert "does not fit" in record["message"] and "n2, n3" in record["message"]
    assert world["restarts"] == 0 and not world["override"].exists()


def test_a_worker_that_restarted_while_llama_server_idled_triggers_a_reconnect(world, monkeypatch):
    # The connection to n2 is gone (the worker restarted) but n2 answers HELLO again.
    monkeypatch.setattr(supervisor, "established_peers", lambda: {"10.0.0.1:50052", "10.0.0.3:50052"})
    record = world["check"]()
    assert record["verdict"] == "reconnected" and world["restarts"] == 1


def test_no_reconnect_while_llama_server_loads(world, monkeypatch):
    """Seen in the cluster scenario: a check right after llama-server (re)started found its HTTP server up (503) and
    its workers not connected yet, took that for a worker that restarted, and restarted llama-server again."""
    monkeypatch.setattr(supervisor, "established_peers", set)
    world["serving"] = 503
    record = world["check"]()
    assert record["verdict"] != "reconnected" and world["restarts"] == 0
    world["serving"] = True  # loaded: now a worker it is not connected to did restart
    record = world["check"]()
    assert record["verdict"] == "reconnected" and world["restarts"] == 1


def test_status_observes_now_read_only_and_does_not_repeat_a_stale_down(world):
    """Seen after every lab host was power-killed and booted: the timer's first check ran while the workers still
    booted and recorded them down; status must report what answers now, and change nothing."""
    world["down"].update({"10.0.0.2:50052", "10.0.0.3:50052"})
    world["serving"] = False
    assert world["check"]()["verdict"] == "degraded"
    recorded = world["state_file"].read_text()
    world["down"].clear()
    world["serving"] = True
    world["now"] += 20
    report = world["status"]()
    assert report["verdict"] == "ok" and report["down_since"] == {}, report
    assert report["workers"] == {"n1": "serving", "n2": "serving", "n3": "serving"}
    assert report["last_check"]["verdict"] == "degraded"  # what the timer saw, beside what is true now
    assert world["state_file"].read_text() == recorded and world["restarts"] == 0


def test_status_gives_how_long_a_worker_has_been_down_and_a_silent_server(world):
    world["down"].add("10.0.0.3:50052")
    world["check"]()
    world["now"] += 12
    report = world["status"]()
    assert report["verdict"] == "degraded" and report["message"] == "down: n3 for 12 s", report
    assert report["workers"]["n3"] == "refused"
    world["serving"] = False
    report = world["status"]()
    assert report["verdict"] == "down" and "does not answer http://10.0.0.1:8080/health" in report["message"]
    assert world["restarts"] == 0


# A local plan (fit first): no worker in the plan, so nothing to wait for and nothing to re-plan (issue #22 item 5).

LOCAL_PLAN = {"rpc": "", "devices": "none", "tensor_split": "", "local": True, "args": "--device none --n-gpu-layers 0"}


def installed_files():
    """What configure.yml writes into the supervisor's directory: the files of the task that writes the supervisor,
    each read from the path its content's file lookup names (in the role's files/, or from role_path)."""
    role = ROOT / "roles" / "llama_coordinator"
    tasks = yaml.safe_load((role / "tasks" / "configure.yml").read_text())
    # The files are the task's own list or, when it adds to it in Jinja, the list it names among the task's vars.
    lists = [
        entries
        for task in tasks
        if "llamarpc.cluster.managed_files" in task
        for entries in (task["llamarpc.cluster.managed_files"].get("files"), *task.get("vars", {}).values())
        if isinstance(entries, list)
    ]
    (files,) = [entries for entries in lists if any(f["dest"].endswith("/llamarpc_supervisor.py") for f in entries)]
    files = [entry for entry in files if entry["dest"].endswith(".py")]
    sources = []
    for entry in files:
        found = re.search(r"lookup\('ansible\.builtin\.file', (?:role_path ~ )?'([^']+)'", entry["content"])
        assert found, entry["content"]
        name = found.group(1)
        sources.append((role / name.lstrip("/")).resolve() if name.startswith("/") else role / "files" / name)
        assert sources[-1].name == entry["dest"].rsplit("/", 1)[-1], entry
    return sources


def installed(tmp_path):
    """The supervisor as configure.yml installs it: its file beside the files it imports (the task's own list, so
    that a file the supervisor imports but the role does not copy fails here)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for source in installed_files():
        (lib / source.name).write_text(source.read_text())
    return lib / "llamarpc_supervisor.py"


def test_wait_returns_at_once_successfully_when_the_plan_has_no_worker(tmp_path):
    """ExecStartPre as systemd runs it on a local plan: the env file's LLAMARPC_RPC is empty. --timeout 0 ends any
    waiting after one round, so a wrong implementation fails here rather than hangs."""
    env = {"PATH": "/usr/bin:/bin", "LLAMARPC_RPC": ""}
    done = subprocess.run(
        [sys.executable, str(installed(tmp_path)), "wait", "--timeout", "0"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done
    assert "local plan" in done.stdout and "no RPC worker to wait for" in done.stdout


def test_wait_still_waits_for_the_workers_of_a_distributed_plan(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLAMARPC_RPC", "10.0.0.2:50052")
    monkeypatch.setattr(
        supervisor, "probe_all", lambda endpoints, timeout, protocols=None: dict.fromkeys(endpoints, "refused")
    )
    assert supervisor.main(["wait", "--timeout", "0"]) == 1
    assert "gave up" in capsys.readouterr().err


@pytest.fixture
def local_world(tmp_path, world):
    """The world above with a deployed local plan; probing a worker fails the test (nothing is to be probed)."""
    config(tmp_path, plan=LOCAL_PLAN)
    return world


def test_check_on_a_local_plan_returns_at_once_and_probes_nothing(local_world, monkeypatch):
    probed = []
    monkeypatch.setattr(
        supervisor, "probe_all", lambda endpoints, timeout, protocols=None: probed.append(endpoints) or {}
    )
    local_world["down"].add("10.0.0.3:50052")  # an idle worker down: no business of a local plan
    local_world["now"] += 1000
    record = local_world["check"]()
    assert record["verdict"] == "local" and "nothing to re-plan" in record["message"], record
    assert (probed, local_world["restarts"], local_world["override"].exists()) == ([], 0, False)


def test_status_of_a_local_plan_says_local_plainly(local_world):
    local_world["down"].add("10.0.0.3:50052")
    report = local_world["status"]()
    assert report["verdict"] == "ok" and report["message"].startswith("serving locally"), report
    assert "no RPC worker" in report["message"] and report["workers"]["n3"] == "refused"
    local_world["serving"] = False
    assert local_world["status"]()["verdict"] == "down"


def test_a_re_plan_that_fits_on_the_coordinator_goes_local_then_back(tmp_path, world):
    """Deployed on n2 and n3 (fit first on, strategy fewest); n3 stays down and the model now fits on n1's host: the
    re-plan is local, and the deployed plan comes back with n3."""
    options = dict(json.loads(config(tmp_path).read_text())["options"], strategy="fewest", coordinator="n1")
    plan = {"rpc": "10.0.0.2:50052,10.0.0.3:50052", "devices": "RPC0,RPC1", "tensor_split": "5,4"}
    config(tmp_path, options=dict(options, fit_first=True), plan=plan)
    world["down"].add("10.0.0.3:50052")
    world["check"]()
    world["check"]()
    world["now"] += 25
    record = world["check"]()
    assert record["verdict"] == "replanned" and "local" in record["message"], record
    assert "\nLLAMARPC_RPC=\nLLAMARPC_PLAN_ARGS=--device none --n-gpu-layers 0\n" in world["override"].read_text()
    # The override is a local plan, but the deployed plan has workers: the check keeps watching for n3.
    world["now"] += 5
    assert world["check"]()["verdict"] == "degraded"
    world["down"].clear()
    assert world["check"]()["verdict"] == "restored" and not world["override"].exists()
    assert world["restarts"] == 2
    # Without fit first the same re-plan keeps a worker.
    config(tmp_path, options=dict(options, fit_first=False), plan=plan)
    world["down"].add("10.0.0.3:50052")
    world["check"]()
    world["check"]()
    world["now"] += 25
    assert "--rpc 10.0.0.2:50052" in world["check"]()["message"]


def test_a_re_plan_reserves_the_prompt_cache_on_the_coordinators_host(tmp_path):
    """The record's cache_ram (bytes) reaches the re-plan: the model (0.8 GiB) fits on the coordinator's 4 GiB host
    alone, but not with a 3.5 GiB prompt cache beside it; then the re-plan keeps workers."""
    options = dict(json.loads(config(tmp_path).read_text())["options"], strategy="fewest", coordinator="n1")
    fits = json.loads(config(tmp_path, options=dict(options, fit_first=True)).read_text())
    assert supervisor.replan(fits, set())["local"] is True
    cached = json.loads(config(tmp_path, options=dict(options, fit_first=True, cache_ram=3584 << 20)).read_text())
    plan = supervisor.replan(cached, set())
    assert plan["local"] is False and plan["rpc"]


# Slow is not down: a loaded machine must not make the supervisor re-plan or fail.


def test_a_worker_that_llama_server_holds_is_serving_even_when_health_is_slow(world, monkeypatch):
    """/health does not answer in time (a loaded machine), but llama-server holds its connection to every worker: a
    probe of such a worker could only time out in its backlog. The old check probed them, found them down and re-planned
    around a worker that was serving; they stay serving, and nothing is restarted."""
    world["serving"] = False
    monkeypatch.setattr(
        supervisor, "probe_all", lambda endpoints, timeout, protocols=None: dict.fromkeys(endpoints, "timeout")
    )
    for _round in range(5):
        record = world["check"]()
        world["now"] += 25
    assert record["verdict"] == "ok" and record["down_since"] == {}, record
    assert set(record["workers"].values()) == {"serving"}, record
    assert (world["restarts"], world["override"].exists()) == (0, False)


def test_two_late_checks_do_not_make_an_outage(world):
    """A timer that fired late on a loaded machine: two checks 60 s apart both find n3 down (past replan_after), but a
    worker counts as down only after DOWN_CHECKS checks in a row."""
    world["down"].add("10.0.0.3:50052")
    world["check"]()
    world["now"] += 60
    record = world["check"]()
    assert record["verdict"] == "degraded" and record["down_checks"] == {"n3": 2}, record
    world["down"].clear()
    world["now"] += 60
    record = world["check"]()
    assert (record["verdict"], record["down_checks"], world["restarts"]) == ("ok", {}, 0), record


def test_a_new_deployment_drops_the_re_plan_of_the_plan_it_replaced(tmp_path, world):
    """n3 stayed down and the supervisor re-planned; then site.yml deployed another plan (here fit first went local).
    The override made from the replaced plan must not stay in force: the next check drops it and restarts llama-server
    on the deployed plan, then watches the local plan as such."""
    world["down"].add("10.0.0.3:50052")
    for _round in range(3):
        record = world["check"]()
        world["now"] += 10
    assert record["verdict"] == "replanned" and world["override"].exists(), record
    config(tmp_path, plan=LOCAL_PLAN)
    record = world["check"]()
    assert record["verdict"] == "restored" and "earlier deployment" in record["message"], record
    assert not world["override"].exists() and not (tmp_path / "p.json").exists()
    assert world["restarts"] == 2
    assert world["check"]()["verdict"] == "local"


def test_an_unexpected_error_is_a_verdict_and_a_line_not_a_traceback(world, monkeypatch, capsys):
    def broken(endpoints, timeout, protocols=None):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(supervisor, "probe_all", broken)
    monkeypatch.setattr(supervisor, "established_peers", set)
    paths = ["--plan", str(world["state_file"].parent / "plan.json"), "--state", str(world["state_file"])]
    assert supervisor.main([*paths, "--override", str(world["override"]), "check"]) == 1
    record = json.loads(world["state_file"].read_text())
    assert record["verdict"] == "error" and "RuntimeError: can't start new thread" in record["message"], record
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: the check failed: RuntimeError"), err


def test_a_deployment_beside_the_check_that_drops_the_override_first_is_no_error(world, monkeypatch):
    """site.yml's handler removes the override while a check that saw it is about to restore the deployed plan (every
    worker back): the old check's unlink raised FileNotFoundError and the unit failed (exit 1)."""
    world["down"].add("10.0.0.3:50052")
    for _round in range(3):
        world["check"]()
        world["now"] += 10
    assert world["override"].exists()
    world["down"].clear()
    observe = supervisor.observe

    def observe_then_deploy(*args):
        seen = observe(*args)
        world["override"].unlink()  # the handler, between this check's look and its clean-up
        return seen

    monkeypatch.setattr(supervisor, "observe", observe_then_deploy)
    record = world["check"]()
    assert record["verdict"] == "restored" and not record["override"], record


def test_a_replan_keeps_the_draftless_speculation_and_drops_a_draft_whose_worker_is_down(world, tmp_path):
    """The deployed speculation (plan.json's options) is re-planned with the workers: a draft whose worker stays down
    is left out of the override (the supervisor does not plan the coordinator's memory for it), and the draftless
    types stay."""
    draft = {
        "n_layer": 2,
        "n_head_kv": 1,
        "head_k": 64,
        "head_v": 64,
        "layer_bytes": [1 << 20] * 2,
        "output_bytes": 1 << 20,
        "embedding_bytes": 1 << 20,
        "weight_bytes": 4 << 20,
    }
    deployed = json.loads(config(tmp_path).read_text())
    speculative = {
        "types": ["draft-simple", "ngram-simple"],
        "settings": {"draft-n-max": 8, "ngram-simple-size-m": 4},
        "draft": draft,
        "draft_path": "/data/models/draft/d.gguf",
        "draft_device": "n3",
    }
    config(tmp_path, options={**deployed["options"], "speculative": speculative})
    world["down"].add("10.0.0.3:50052")
    for _check in range(3):
        world["now"] += 15
        record = world["check"]()
    assert record["verdict"] == "replanned"
    args = re.search(r"^LLAMARPC_PLAN_ARGS=(.*)$", world["override"].read_text(), re.MULTILINE).group(1)
    assert args.endswith(" --spec-type ngram-simple --spec-ngram-simple-size-m 4"), args
    assert "draft" not in args
    # Without a draftless type there is no speculation left.
    alone = dict(speculative, types=["draft-simple"], settings={"draft-n-max": 8})
    assert supervisor.speculation_without({"speculative": alone}, {"n3"}) is None
    # A draft on a worker that stays up stays there, on its device in the re-plan's order.
    assert supervisor.speculation_without({"speculative": speculative}, {"n1"})["draft_device"] == "n3"
    assert supervisor.speculation_without({}, {"n1"}) is None


def test_each_check_writes_the_workers_the_plan_and_the_replans_for_node_exporter(world, tmp_path):
    metrics = tmp_path / "textfile" / "llamarpc_supervisor.prom"
    metrics.parent.mkdir()
    paths = ["--plan", str(tmp_path / "plan.json"), "--override", str(world["override"])]
    paths += ["--plan-in-force", str(tmp_path / "p.json"), "--state", str(world["state_file"])]

    def check():
        assert supervisor.main([*paths, "--metrics", str(metrics), "check"]) == 0
        return supervisor.textfile.parse(metrics.read_text())

    found = check()
    assert found["llamarpc_worker_up"] == [({"worker": f"n{i}"}, 1.0) for i in (1, 2, 3)]
    assert found["llamarpc_plan_workers"] == [({}, 3.0)]
    assert found["llamarpc_replans_total"] == [({}, 0.0)]
    assert "llamarpc_worker_down_since_timestamp_seconds" not in found
    world["down"].add("10.0.0.3:50052")
    found = check()
    assert ({"worker": "n3"}, 0.0) in found["llamarpc_worker_up"]
    assert found["llamarpc_worker_down_since_timestamp_seconds"] == [({"worker": "n3"}, 1000.0)]
    world["now"] += 30
    check()
    world["now"] += 5
    found = check()  # the re-plan without n3
    assert found["llamarpc_replans_total"] == [({}, 1.0)]
    assert found["llamarpc_plan_workers"] == [({}, 2.0)] and found["llamarpc_plan_replanned"] == [({}, 1.0)]
    assert [labels["worker"] for labels, _value in found["llamarpc_plan_worker_layers"]] == ["n1", "n2"]
    world["down"].clear()
    found = check()  # restored: the count stays, the deployed plan is in force again
    assert found["llamarpc_replans_total"] == [({}, 1.0)] and found["llamarpc_plan_workers"] == [({}, 3.0)]
    assert found["llamarpc_supervisor_verdict_info"] == [({"verdict": "restored"}, 1.0)]


def test_without_the_textfile_directory_the_check_still_works(world, tmp_path, capsys):
    paths = ["--plan", str(tmp_path / "plan.json"), "--state", str(world["state_file"])]
    missing = tmp_path / "nowhere" / "x.prom"
    assert supervisor.main([*paths, "--override", str(world["override"]), "--metrics", str(missing), "check"]) == 0
    assert "does not exist" in capsys.readouterr().err and not missing.exists()


def test_the_protocol_a_worker_announced_is_kept_while_it_serves():
    result = type("R", (), {"state": "ready", "protocol": "3.0.0"})()
    protocols = {}
    original = supervisor.rpc.probe
    try:
        supervisor.rpc.probe = lambda host, port, timeout, connect_timeout: result
        assert supervisor.probe_all(["10.0.0.1:50052"], 1.0, protocols) == {"10.0.0.1:50052": "ready"}
    finally:
        supervisor.rpc.probe = original
    assert protocols == {"10.0.0.1:50052": "3.0.0"}


def test_a_load_the_supervisor_watched_gets_its_seconds(world, tmp_path):
    """Seen loading (503) at one check and serving at the next: the seconds from the unit's start; a start first seen
    serving keeps the last measured load."""
    metrics = tmp_path / "m.prom"
    paths = ["--plan", str(tmp_path / "plan.json"), "--override", str(world["override"])]
    paths += [
        "--plan-in-force",
        str(tmp_path / "p.json"),
        "--state",
        str(world["state_file"]),
        "--metrics",
        str(metrics),
    ]
    world["started"] = int((world["now"] - 500.0 - 3.0) * 1e6)  # started 3 s before this check (monotonic)
    world["serving"] = 503
    assert supervisor.main([*paths, "check"]) == 0
    assert "llamarpc_server_load_seconds" not in supervisor.textfile.parse(metrics.read_text())
    world["now"] += 40
    world["serving"] = True
    assert supervisor.main([*paths, "check"]) == 0
    found = supervisor.textfile.parse(metrics.read_text())
    assert found["llamarpc_server_load_seconds"] == [({}, 43.0)]
    assert found["llamarpc_server_load_finished_timestamp_seconds"] == [({}, world["now"])]
    world["started"] += 100 * 10**6  # restarted 57 s after that check, first seen serving 143 s later: an upper bound
    world["now"] += 200
    assert supervisor.main([*paths, "check"]) == 0
    assert supervisor.textfile.parse(metrics.read_text())["llamarpc_server_load_seconds"] == [({}, 143.0)]
    world["state_file"].unlink()  # no previous check (a new supervisor): a start first seen serving is not measured
    world["started"] += 100 * 10**6
    world["now"] += 200
    assert supervisor.main([*paths, "check"]) == 0
    assert "llamarpc_server_load_seconds" not in supervisor.textfile.parse(metrics.read_text())


def seeding_record(tmp_path, finished_at, written=2, present=0, rpc=None, tensor_split="3,3,3"):
    """The role's seeded.json beside plan.json: the plan it seeded and each worker's summary (tensor_cache_seed)."""
    rpc = ",".join(f"10.0.0.{i}:50052" for i in (1, 2, 3)) if rpc is None else rpc
    summary = {"written": written, "present": present, "unavailable": 0, "finished_at": finished_at}
    record = {"rpc": rpc, "tensor_split": tensor_split, "workers": {f"n{i}": dict(summary) for i in (1, 2, 3)}}
    (tmp_path / "seeded.json").write_text(json.dumps(record))


def load_kinds(world, tmp_path, metrics):
    """One load watched from its start (503) to /health 200; the kind the metrics give it, or None."""
    paths = ["--plan", str(tmp_path / "plan.json"), "--override", str(world["override"])]
    paths += ["--plan-in-force", str(tmp_path / "p.json"), "--state", str(world["state_file"])]
    paths += ["--metrics", str(metrics)]
    world["now"] += 100
    world["started"] = int((world["now"] - 500.0 - 2.0) * 1e6)  # started 2 s before this check
    world["serving"] = 503
    assert supervisor.main([*paths, "check"]) == 0
    world["now"] += 10
    world["serving"] = True
    assert supervisor.main([*paths, "check"]) == 0
    found = supervisor.textfile.parse(metrics.read_text())
    assert found["llamarpc_server_load_seconds"] == [({}, 12.0)]
    return [labels["kind"] for labels, value in found.get("llamarpc_server_load_info", []) if value == 1]


def test_the_first_load_after_a_seeding_of_its_plan_is_seeded_the_next_warm(world, tmp_path):
    metrics = tmp_path / "m.prom"
    assert load_kinds(world, tmp_path, metrics) == ["cold"]  # no seeding record: nothing known cached
    seeding_record(tmp_path, finished_at=world["now"] + 50)  # seeded before the next start
    assert load_kinds(world, tmp_path, metrics) == ["seeded"]
    assert load_kinds(world, tmp_path, metrics) == ["warm"]  # the same caches, a load since the seeding
    seeding_record(tmp_path, finished_at=world["now"] + 50, written=0, present=6)  # a re-seeding that found all
    assert load_kinds(world, tmp_path, metrics) == ["seeded"]


def test_a_seeding_that_cached_nothing_or_was_for_another_plan_leaves_the_load_cold(world, tmp_path):
    metrics = tmp_path / "m.prom"
    seeding_record(tmp_path, finished_at=world["now"] + 50, written=0, present=0)  # no tensor over 10 MiB
    assert load_kinds(world, tmp_path, metrics) == ["cold"]
    seeding_record(tmp_path, finished_at=world["now"] + 50, tensor_split="4,3,2")  # another split of the workers
    assert load_kinds(world, tmp_path, metrics) == ["cold"]
    seeding_record(tmp_path, finished_at=world["now"] + 50, rpc="10.0.0.1:50052,10.0.0.2:50052")
    assert load_kinds(world, tmp_path, metrics) == ["cold"]
    seeding_record(tmp_path, finished_at=world["now"] + 500)  # ended after the start: not this load's seeding
    assert load_kinds(world, tmp_path, metrics) == ["warm"]


def test_a_load_on_a_local_plan_is_local(local_world, tmp_path):
    seeding_record(tmp_path, finished_at=local_world["now"] + 50)  # a seeding of the earlier distributed plan
    assert load_kinds(local_world, tmp_path, tmp_path / "m.prom") == ["local"]


def test_the_load_kind_is_decided_from_the_plan_in_force_and_the_seeding():
    plan = {"rpc": "10.0.0.1:50052,10.0.0.2:50052", "tensor_split": "1,1"}
    seeding = {"rpc": plan["rpc"], "tensor_split": [1.0, 1.0], "workers": {"a": {"written": 1, "finished_at": 100.0}}}
    assert supervisor.load_kind(plan, seeding, 150.0, None) == "seeded"  # no load known before
    assert supervisor.load_kind(plan, seeding, 150.0, 90.0) == "seeded"
    assert supervisor.load_kind(plan, seeding, 150.0, 120.0) == "warm"  # a load started after the seeding
    assert supervisor.load_kind(plan, seeding, 50.0, None) == "warm"  # the seeding ended after this start
    assert supervisor.load_kind(plan, None, 150.0, None) == "cold"
    assert supervisor.load_kind(plan, dict(seeding, tensor_split="bad"), 150.0, None) == "cold"
    assert supervisor.load_kind({"rpc": "", "tensor_split": ""}, seeding, 150.0, None) == "local"


def test_a_seeding_before_the_boot_makes_the_first_load_warm_not_seeded(world, tmp_path):
    """No previous start in the state (a reboot emptied /run): the boot (the monotonic clock's zero) counts as one."""
    boot = world["now"] - supervisor.time.monotonic()  # wall time at the monotonic clock's zero
    seeding_record(tmp_path, finished_at=boot - 10)
    assert load_kinds(world, tmp_path, tmp_path / "m.prom") == ["warm"]
    world["state_file"].unlink()
    seeding_record(tmp_path, finished_at=boot + 10)
    assert load_kinds(world, tmp_path, tmp_path / "m.prom") == ["seeded"]
