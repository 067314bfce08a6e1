"""Self-healing: a killed worker comes back by itself; a worker that stays down is planned around, then back in."""

from __future__ import annotations

import json
import time

import pytest
from clusterlib import (
    came_back,
    deployed_plan,
    main_pid,
    serving,
    status_problems,
    status_report,
    supervisor,
    wait_serving,
)
from faultreport import record
from labtest import EVENTUALLY, lab, wait_for

WORKER = "llamarpc-rpc-worker.service"


def test_status_reports_a_well_cluster_field_by_field(tmp_path):
    report = status_report(tmp_path)
    assert status_problems(report) == [], report
    assert report["supervisor"]["verdict"] == "ok", report["supervisor"]
    assert report["supervisor"]["down_since"] == {}, report["supervisor"]


@pytest.mark.fault(1)
def test_killed_worker_serves_again_without_an_operator():
    assert serving()
    node3 = lab("node3")
    killed, checked = main_pid(node3, WORKER), supervisor().get("checked_at", 0)
    node3.run_expect([0], f"systemctl kill --kill-whom=main --signal=KILL {WORKER}")
    time.sleep(1)
    took = wait_serving(EVENTUALLY)
    pid, verdict = came_back("node3", WORKER, killed, checked)
    print(f"\nworker SIGKILLed -> serving again after {took} s; PID {killed} -> {pid}; supervisor {verdict}")
    record(
        1,
        "idle worker node3 SIGKILLed: "
        + (f"no answer within {EVENTUALLY} s" if took is None else "serving again, no operator")
        + f"; worker PID {killed} -> {pid or 'not restarted'}; supervisor "
        + (f"{verdict['verdict']}, node3 {verdict['workers']['node3']}" if verdict else "never saw node3 up again"),
        ok=took is not None and pid is not None and verdict is not None,
        recover_s=took,
        key="1 idle",
        detail="idle (between requests)",
    )
    # 60 s is a target the report shows (recover_s), not a pass condition: a loaded machine reloads slower.
    assert took is not None
    # The worker came back (a new process), and the supervisor's own probe found it after the kill.
    assert pid is not None, f"{WORKER} on node3 has no new MainPID after {killed} was killed"
    assert verdict is not None, supervisor()
    assert verdict["verdict"] in ("ok", "reconnected") and "node3" not in verdict["down_since"], verdict


def test_worker_that_stays_down_is_planned_around_then_taken_back(tmp_path):
    node6 = lab("node6")
    node6.run_expect([0], "systemctl stop llamarpc-rpc-worker.service")
    start = time.monotonic()
    try:
        replanned = wait_for(
            lambda: (
                supervisor().get("verdict") == "replanned"
                or (supervisor().get("override") and "node6" in supervisor().get("message", ""))
            ),
            interval=2,
        )
        assert replanned, supervisor()
        took = wait_serving(EVENTUALLY)
        assert took is not None
        print(
            f"\nworker stopped -> re-planned and serving after {time.monotonic() - start:.0f} s "
            f"(replan_after 20 s): {supervisor()['message']}"
        )
        in_force = json.loads(lab("node1").file("/run/llamarpc/coordinator/plan-in-force.json").content_string)
        assert "node6" not in [row["name"] for row in in_force["workers"]]
        assert len(in_force["workers"]) == 5
        report = status_report(tmp_path)
        assert status_problems(report, expect_down=["node6"]) == [], report
        assert report["supervisor"]["verdict"] == "degraded", report["supervisor"]
        assert report["supervisor"]["message"].startswith("re-planned without node6; down: node6 for "), report
    finally:
        node6.run_expect([0], "systemctl start llamarpc-rpc-worker.service")
    back = wait_for(
        lambda: supervisor().get("verdict") in ("restored", "ok") and not supervisor().get("override"), interval=2
    )
    assert back, supervisor()
    assert wait_serving(EVENTUALLY) is not None
    assert len(deployed_plan()["plan"]["workers"]) == 6
