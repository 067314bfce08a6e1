# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/tools/switch_bench.py: a phase measured with the probe against a real loopback server, and the report's rows
and targets from what the phases recorded."""

import http.server
import sys
import threading

import switch_bench


class Server(http.server.BaseHTTPRequestHandler):
    """Answers completions; busy (503 with Retry-After) while ``busy`` is set."""

    busy = threading.Event()

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        status, body = (503, b"{}") if self.busy.is_set() else (200, b'{"choices": [{"text": " Paris"}]}')
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "2")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_phase_runs_its_commands_with_the_probe_and_counts_what_it_saw(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        options = switch_bench.probe_args(f"http://127.0.0.1:{server.server_port}", "")
        options.interval = 0.2
        Server.busy.set()
        busy = [sys.executable, "-c", "import time; time.sleep(1.0)"]
        phase = switch_bench.measured("switch", [busy, [sys.executable, "-c", "raise SystemExit(3)"]], options, "lo",
                                      tmp_path, settle=0.0)  # fmt: skip
    finally:
        Server.busy.clear()
        server.shutdown()
    assert phase["rc"] == [0, 3] and phase["seconds"] >= 1.0
    assert phase["probe"]["busy"] >= 3 and phase["probe"]["failed"] == 0, phase["probe"]
    assert phase["sent_bytes"] > 0  # the probe's requests crossed the "bridge" (loopback here)
    assert "raise SystemExit(3)" in (tmp_path / "switch.log").read_text()


def phase(name, downtime, sent, failed=0, rc=(0,)):
    return {"name": name, "seconds": 10.0, "rc": list(rc), "sent_bytes": sent,
            "probe": {"downtime_s": downtime, "ok": 9, "busy": 2, "failed": failed}}  # fmt: skip


def test_the_rows_compare_with_the_paired_warm_restart_and_the_noop_and_the_targets_say_what_holds():
    phases = [
        phase("noop", 0.0, 5_000_000),
        phase("restart", 10.0, 100_000),
        phase("model-plain", 60.0, 300_000_000, failed=4),
        phase("model-staged:warm", 10.0, 100_000),
        phase("model-staged", 11.0, 305_000_000),
        phase("model-rollback:warm", 20.0, 100_000),
        phase("model-rollback", 13.0, 5_500_000),
        phase("model-staged#2:warm", 5.0, 100_000),
        phase("model-staged#2", 10.0, 5_000_000),
        phase("model-rollback#2:warm", 10.0, 100_000),
        phase("model-rollback#2", 10.0, 5_000_000),
        phase("model-staged#3:warm", 10.0, 100_000),
        phase("model-staged#3", 12.0, 5_000_000),
        phase("build-staged", 12.5, 50_000_000, failed=1),
        phase("build-rollback", 9.0, 55_000_000, rc=(0, 2)),
    ]
    table = switch_bench.rows(phases)
    by_name = {row["name"]: row for row in table}
    assert by_name["model-staged"]["downtime_over_warm"] == 1.1  # against its own warm restart
    assert by_name["model-rollback"]["downtime_over_warm"] == 0.65
    assert by_name["build-staged"]["downtime_over_warm"] == 1.25  # no pair: against the first restart
    assert by_name["model-plain"]["mb_over_noop"] == 295.0
    assert by_name["build-rollback"]["ok"] is False and by_name["noop"]["ok"] is True
    verdicts = dict(switch_bench.targets(table, {"model": 100_000_000, "build": 40_000_000}))
    assert verdicts == {
        # 1.1, 2.0 and 1.2: the median holds; one run of three over it does not decide
        "model-staged: downtime / paired warm restart <= 1.2 (median of 1.10, 1.20, 2.00)": True,
        "model-rollback: downtime / paired warm restart <= 1.2 (median of 0.65, 1.00)": True,
        "build-staged: downtime / paired warm restart <= 1.2 (median of 1.25)": False,
        "build-rollback: downtime / paired warm restart <= 1.2 (median of 0.90)": True,
        "model-staged: no failed request (503 with Retry-After aside)": True,
        "model-rollback: no failed request (503 with Retry-After aside)": True,
        "model-rollback: ships less than one file a download would (100.0 MB)": True,
        "model-staged#2: no failed request (503 with Retry-After aside)": True,
        "model-rollback#2: no failed request (503 with Retry-After aside)": True,
        "model-rollback#2: ships less than one file a download would (100.0 MB)": True,
        "model-staged#3: no failed request (503 with Retry-After aside)": True,
        "build-staged: no failed request (503 with Retry-After aside)": False,
        "build-rollback: no failed request (503 with Retry-After aside)": True,
        "build-rollback: ships less than one file a download would (40.0 MB)": False,
    }
    text = switch_bench.markdown(table, switch_bench.targets(table), "python3 lab/tools/switch_bench.py ...")
    assert "| model-staged | 10.0 | 11.0 | 1.10 | 9 | 2 | 0 | 300.0 |" in text
    assert "| build-rollback (FAILED) |" in text and "| build-staged: no failed request" in text
