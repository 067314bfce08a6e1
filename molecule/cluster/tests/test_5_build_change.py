"""Day 2, a llama.cpp change through site.yml and back with rollback.yml: the build in use, repacked with one more
file, deployed as a prebuilt archive (another build key, the same binaries: no second build in the suite). The workers
that serve keep their old binaries while the run stages everything else; at the coordinator's cutover llama-server
stops before the first worker of its plan restarts on the new build and starts once after the last worker of its new
plan did, so it never talks to a worker of another llama.cpp and the switch costs one load (a worker that no
llama-server uses may restart at any time: the run's plan can be local). ``rollback.yml -e llamarpc_rollback=build``
goes back the same way with nothing built or fetched (the controller's cache as it was). Greedy token ids stay those
of the model before the change. Through both switches a client of another host (the controller, through node1's
bridge) sends one small completion after another: each gets an answer, or a 503 with Retry-After from the
coordinator's gate, never a refused, reset, empty or unanswered request. The teardown deploys the scenario's own build
again (the converge's run)."""

from __future__ import annotations

import pytest
import testinfra.utils.ansible_runner
from clusterlib import client, deployed_plan, inventory_copy, playbook, restarts, through_switch
from labtest import INVENTORY, lab
from llama_builds import cached_archive, controller_cache, key_of, repack
from test_5_model_change import ids, record

SERVER = "llamarpc-server"
WORKER = "llamarpc-rpc-worker"
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
COORDINATOR = RUNNER.get_hosts("coordinator")[0]
WORKERS = RUNNER.get_hosts("rpc_workers")


def show(host, unit, *properties):
    """``systemctl show``'s ``properties`` of ``unit`` on ``host``, as strings."""
    out = lab(host).run_expect([0], f"systemctl show -p {','.join(properties)} {unit}").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def running_key(host, unit):
    """The build key of the binary ``unit``'s main process runs now."""
    pid = show(host, unit, "MainPID")["MainPID"]
    assert pid not in ("", "0"), f"{unit} does not run on {host}"
    return key_of(lab(host).run_expect([0], f"readlink /proc/{pid}/exe").stdout.strip())


def state():
    """Each worker's build and start (the monotonic clock the lab's hosts share: one kernel), llama-server's build,
    its last stop and start, and how often systemd restarted it by itself."""
    server = show(COORDINATOR, SERVER, "InactiveEnterTimestampMonotonic", "ActiveEnterTimestampMonotonic")
    return {
        "workers": {
            host: (running_key(host, WORKER), int(show(host, WORKER, "ExecMainStartTimestampMonotonic")[
                "ExecMainStartTimestampMonotonic"]))
            for host in WORKERS
        },
        "server": running_key(COORDINATOR, SERVER),
        "stopped": int(server["InactiveEnterTimestampMonotonic"]),
        "started": int(server["ActiveEnterTimestampMonotonic"]),
        "restarts": restarts(lab(COORDINATOR), SERVER),
        "planned": [row["name"] for row in deployed_plan()["plan"]["workers"]],
    }  # fmt: skip


def cut_over(before, after, key):
    """Every worker and llama-server on ``key`` now; the workers of the plan llama-server ran on restarted only after it
    stopped, and those of its new plan before it started again, by the run (not by systemd after a crash); the
    failures, empty when it all holds."""
    problems = [f"{host} runs {got[0]}, not {key}" for host, got in after["workers"].items() if got[0] != key]
    if after["server"] != key:
        problems.append(f"llama-server runs {after['server']}, not {key}")
    if after["started"] == before["started"]:
        problems.append("llama-server was not restarted")
    for host, (_key, started) in after["workers"].items():
        if host in before["planned"] and not after["stopped"] < started:
            problems.append(
                f"{host}'s worker started at {started}, before llama-server's stop ({after['stopped']}): it restarted "
                "under the llama-server that used it"
            )
        if host in after["planned"] and not started < after["started"]:
            problems.append(
                f"{host}'s worker started at {started}, after llama-server's start ({after['started']}): llama-server "
                "met a worker of another build"
            )
    if after["restarts"] != before["restarts"]:
        problems.append(f"systemd restarted llama-server by itself ({before['restarts']} -> {after['restarts']})")
    return problems


def with_settings(settings):
    def edit(data):
        data["vars"].update(settings)

    return edit


@pytest.fixture
def model_files(request, tmp_path_factory):
    """The model served now as the inventory names it (rollback.yml keeps the inventory's model for a build
    rollback). When the test did not pass, the scenario's own deployment again afterwards, which puts the converge's
    build back (a test that passed ended on it: the rollback's checks say so)."""
    yield record()["served"][0]["source"]["files"]
    call = getattr(request.node, "reports", {}).get("call")
    if call is not None and call.passed:
        return
    result = playbook(inventory_copy(tmp_path_factory.mktemp("build-change-teardown"), with_settings({})))
    assert result.returncode == 0, result.stdout[-3000:]


def test_a_new_build_cuts_over_once_and_a_build_rollback_goes_back_without_a_build(tmp_path, model_files):
    before = state()
    first = before["server"]
    assert {got[0] for got in before["workers"].values()} == {first}, before
    reference = ids()

    # Forward: the repacked build, staged on every host while the cluster serves, then one cutover.
    repacked, checksum = repack(cached_archive(first), tmp_path)
    second = f"prebuilt-{checksum[:16]}"
    new_build = {
        "llama_cpp_install_method": "prebuilt",
        "llama_cpp_prebuilt_archive": str(repacked),
        "llama_cpp_prebuilt_checksum": checksum,
        "llama_model_files": model_files,
        "llama_coordinator_plan_strategy": "all",  # every worker in the new plan: its start waits for each of them
    }
    (tmp_path / "forward").mkdir()
    with client() as answers:
        result = playbook(inventory_copy(tmp_path / "forward", with_settings(new_build)))
    assert result.returncode == 0, result.stdout[-3000:]
    problems = through_switch(answers)
    assert not problems, "\n".join(problems)
    after = state()
    assert cut_over(before, after, second) == []
    assert ids() == reference

    # Back: rollback.yml, nothing built or fetched, the same cutover.
    cache = controller_cache()
    (tmp_path / "back").mkdir()
    inventory = inventory_copy(tmp_path / "back", with_settings(new_build))
    with client() as answers:
        result = playbook(inventory, "-e", "llamarpc_rollback=build", name="rollback.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    problems = through_switch(answers)
    assert not problems, "\n".join(problems)
    assert "Build llama.cpp" not in result.stdout and "Look up the controller's cache of builds" not in result.stdout
    assert controller_cache() == cache, "the controller's cache changed in a build rollback"
    rolled = state()
    assert cut_over(after, rolled, first) == []
    assert ids() == reference
