"""The gate in front of llama-server: its nftables text, the sockets it decides on (/proc/net/tcp), the drain, the
module's decisions against a stand-in host (nft, systemctl and the sockets replaced), and the responder itself on
loopback."""

from __future__ import annotations

import http.client
import importlib.util
import json
import threading
from pathlib import Path

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _server_gate as gate

ROOT = Path(__file__).resolve().parents[5]
SPEC = importlib.util.spec_from_file_location("llamarpc_gate", ROOT / "roles/llama_coordinator/files/llamarpc_gate.py")
responder = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(responder)

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt\n"
# 10.213.0.11 as /proc/net/tcp prints it (a host-order word), ports 8080 (1F90) and 8081 (1F91).
LISTEN_8080 = "   0: 0B00D50A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n"
LISTEN_8081 = "   1: 0B00D50A:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n"
OPEN_8080 = "   2: 0B00D50A:1F90 0C00D50A:C3C4 01 00000000:00000000 00:00000000 00000000\n"
WAITING_8080 = "   3: 0B00D50A:1F90 0C00D50A:C3C5 06 00000000:00000000 00:00000000 00000000\n"
#: The wildcard address (llama-server on every address); only parsed here, nothing binds it.
EVERY = "0.0.0.0"  # noqa: S104
PARAMS = {
    "state": "open",
    "address": "10.213.0.11",
    "port": 8080,
    "gate_port": 8081,
    "unit": "llamarpc-server-gate.service",
    "table": "llamarpc_gate",
    "drain_timeout": 120,
    "api_key": "",
    "listen_timeout": 30,
    "interval": 1.0,
    "server_unit": None,
    "health_timeout": 600,
    "pause_units": [],
}
SERVER = "llamarpc-server.service"
TIMER, CHECK = "llamarpc-server-supervisor.timer", "llamarpc-server-supervisor.service"
#: The closing gate's first step: its rules go, its table stays.
FLUSH = ("load", "flush chain inet llamarpc_gate prerouting")


def test_the_ruleset_sends_only_new_connections_to_the_gate_and_exempts_roots_own():
    text = gate.ruleset("llamarpc_gate", "10.213.0.11", 8080, 8081)
    rule = "ip daddr 10.213.0.11 tcp dport 8080 tcp flags & (syn | ack) == syn dnat ip to 10.213.0.11:8081"
    assert text.startswith("table inet llamarpc_gate {\n")
    assert text.count(rule) == 2, text  # prerouting (other hosts) and output (local clients)
    assert "type nat hook prerouting priority -100" in text and "type nat hook output priority -100" in text
    output = text[text.index("chain output") :]
    assert output.index("meta skuid 0 return") < output.index(rule), "root's connections must pass before the rule"
    assert "meta skuid" not in text[: text.index("chain output")], "a remote client has no local uid"


def test_the_ruleset_for_ipv6_and_for_every_address():
    assert "ip6 daddr fd00::b tcp dport 8080 tcp flags & (syn | ack) == syn dnat ip6 to [fd00::b]:8081" in (
        gate.ruleset("g", "fd00::b", 8080, 8081)
    )
    assert "tcp dport 8080 tcp flags & (syn | ack) == syn redirect to :8081" in gate.ruleset("g", EVERY, 8080, 8081)


def test_sockets_read_ipv4_and_mapped_ipv6_and_count_only_connections_that_may_carry_a_request():
    tcp6 = HEADER + "   0: 0000000000000000FFFF00000B00D50A:1F90 0000000000000000FFFF00000E00D50A:C354 01 0:0 0:0 0\n"
    found = gate.sockets([HEADER + LISTEN_8080 + OPEN_8080 + WAITING_8080, tcp6])
    assert gate.listening(found, "10.213.0.11", 8080)
    assert not gate.listening(found, "10.213.0.11", 8081)
    assert not gate.listening(found, "10.213.0.12", 8080)
    assert gate.listening(found, EVERY, 8080)
    # The established IPv4 one and the mapped IPv6 one; TIME_WAIT and LISTEN are not connections that carry requests.
    assert gate.open_connections(found, "10.213.0.11", 8080) == 2
    assert gate.open_connections(found, "10.213.0.11", 8081) == 0


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_drain_ends_when_no_connection_is_left():
    clock, left = Clock(), iter([2, 1, 0])
    seen = gate.drain(lambda: next(left), lambda: 1, 120, 1.0, clock=clock, sleep=clock.sleep)
    assert seen == {"drained": True, "how": "none_open", "connections": 0, "waited": 2.0}


def test_the_drain_ends_on_two_idle_looks_in_a_row_with_keep_alive_connections_left():
    clock, busy = Clock(), iter([1, 0, 1, 0, 0])
    seen = gate.drain(lambda: 3, lambda: next(busy), 120, 1.0, clock=clock, sleep=clock.sleep)
    assert seen == {"drained": True, "how": "idle", "connections": 3, "waited": 4.0}


def test_idle_looks_must_span_the_idle_spacing_however_often_the_drain_looks():
    """Looks every 0.02 s: the connections left count as idle only once looks 0.1 s apart found no slot busy, with no
    busy look between them (a request read but not yet in a slot)."""
    clock = Clock()
    seen = gate.drain(lambda: 2, lambda: 0, 120, 0.02, clock=clock, sleep=clock.sleep)
    assert seen["how"] == "idle" and gate.IDLE_SPACING <= seen["waited"] < gate.IDLE_SPACING + 0.05
    clock, busy = Clock(), iter([0, 0, 0, 1] + [0] * 20)  # busy at the fourth look: the span starts again after it
    seen = gate.drain(lambda: 2, lambda: next(busy), 120, 0.02, clock=clock, sleep=clock.sleep)
    assert seen["how"] == "idle" and 0.08 + gate.IDLE_SPACING <= seen["waited"] < 0.08 + gate.IDLE_SPACING + 0.05


def test_the_drain_gives_up_after_its_timeout_when_llama_server_does_not_say():
    clock = Clock()
    seen = gate.drain(lambda: 1, lambda: None, 10, 1.0, clock=clock, sleep=clock.sleep)
    assert seen == {"drained": False, "how": "timeout", "connections": 1, "waited": 10.0}


class Host:
    """A stand-in for the host: the table, the unit and the sockets as a test sets them; what was done."""

    def __init__(
        self, *, present=False, running=False, sockets=HEADER + LISTEN_8080, load_fails=False, loads=3, active=()
    ):
        self.present, self.running, self.text, self.load_fails = present, running, sockets, load_fails
        self.loads = loads
        self.active = set(active)  # other units than the gate's and llama-server's that are active
        self.done = []

    def table_present(self):
        return self.present

    def unit_active(self, unit):
        return self.running if unit == PARAMS["unit"] else unit in self.active

    def unit(self, action, unit, retries=0, delay=2.0, sleep=None):
        self.done.append((action, unit))
        if unit == SERVER:
            return
        if unit != PARAMS["unit"]:
            (self.active.add if action == "start" else self.active.discard)(unit)
            return
        self.running = action == "start"
        if self.running:
            self.text += LISTEN_8081

    def load(self, text):
        self.done.append(("load", text.splitlines()[0]))
        if self.load_fails:
            raise gate.GateError("nft -f -: Error: Could not process rule")
        self.present = True

    def delete(self):
        self.done.append(("delete", "table"))
        self.present = False

    def sockets(self):
        return gate.sockets([self.text])

    def busy(self, address, port, api_key):
        return 0

    def healthy(self, address, port):
        """llama-server's /health: 200 from the ``loads``-th look after its restart on (never with None)."""
        self.looks = getattr(self, "looks", 0) + 1
        self.done.append(("health", self.looks))
        return self.loads is not None and self.looks >= self.loads


def run(host, check_mode=False, **params):
    clock = Clock()
    return gate.gate({**PARAMS, **params}, check_mode, host, clock=clock, sleep=clock.sleep)


def test_opening_starts_the_responder_before_the_table_then_drains():
    host = Host()
    result = run(host)
    assert host.done == [("start", PARAMS["unit"]), ("load", "table inet llamarpc_gate {")]
    assert result["changed"] and result["open"]
    assert result["drained"] and result["how"] == "none_open"
    assert result["diff"] == {"before": {"gate": "closed"}, "after": {"gate": "open"}}


def test_a_llama_server_that_does_not_listen_gets_no_gate():
    host = Host(sockets=HEADER)
    result = run(host)
    assert host.done == []
    assert not result["changed"] and not result["open"] and result["drained"] is None
    assert "no gate" in result["msg"]


def test_an_open_gate_is_left_as_it_is_and_drained_again():
    host = Host(present=True, running=True, sockets=HEADER + LISTEN_8081)
    result = run(host)
    assert host.done == []
    assert not result["changed"] and result["open"] and result["drained"]


def test_check_mode_reports_and_changes_nothing():
    host = Host()
    assert run(host, check_mode=True)["changed"]
    assert run(Host(present=True, running=True), check_mode=True, state="closed")["changed"]
    assert host.done == []


def test_a_table_nft_refuses_stops_the_responder_again():
    host = Host(load_fails=True)
    with pytest.raises(gate.GateError, match="Could not process"):
        run(host)
    assert host.done[-1] == ("stop", PARAMS["unit"]) and not host.present


def test_a_responder_that_does_not_listen_is_stopped_and_fails_the_run():
    host = Host()
    host.unit = lambda action, unit: host.done.append((action, unit))
    with pytest.raises(gate.GateError, match="does not listen"):
        run(host)
    assert host.done == [("start", PARAMS["unit"]), ("stop", PARAMS["unit"])]


def test_closing_deletes_the_table_before_the_responder_stops():
    host = Host(present=True, running=True)
    result = run(host, state="closed")
    assert host.done == [
        ("load", "flush chain inet llamarpc_gate prerouting"),
        ("delete", "table"),
        ("stop", PARAMS["unit"]),
    ]
    assert result["changed"] and not result["open"]
    assert result["diff"] == {"before": {"gate": "open"}, "after": {"gate": "closed"}}
    again = Host()
    assert not run(again, state="closed")["changed"] and again.done == []


def test_closing_keeps_the_table_until_the_connections_the_gate_took_have_their_answers():
    """The kernel translates a gated connection's later packets only while a nat chain is hooked: the rules go first
    (new connections reach llama-server), the table only once no connection to the responder is left."""
    gated = "   4: 0B00D50A:1F91 0C00D50A:C3C6 01 00000000:00000000 00:00000000 00000000\n"
    host = Host(present=True, running=True, sockets=HEADER + LISTEN_8080 + LISTEN_8081 + gated)
    looks = []

    def sockets():
        looks.append(host.done[-1])
        if len(looks) == 3:
            host.text = host.text.replace(gated, "")  # answered: the client closed
        return gate.sockets([host.text])

    host.sockets = sockets
    run(host, state="closed")
    assert host.done == [
        ("load", "flush chain inet llamarpc_gate prerouting"),
        ("delete", "table"),
        ("stop", PARAMS["unit"]),
    ]
    assert (
        looks == [("load", "flush chain inet llamarpc_gate prerouting")] * 3
    )  # the table stayed while the connection was open


def test_the_gate_port_must_not_be_llama_servers_own():
    with pytest.raises(gate.GateError, match="own port"):
        run(Host(), gate_port=8080)


@pytest.fixture
def served():
    server = responder.Server(("127.0.0.1", 0), responder.handler(7))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("method", ["POST", "GET", "HEAD"])
def test_the_responder_answers_every_request_with_503_retry_after_and_an_openai_error(served, method):
    connection = http.client.HTTPConnection("127.0.0.1", served, timeout=10)
    body = json.dumps({"prompt": "x" * 100000, "n_predict": 2}) if method == "POST" else None
    connection.request(method, "/v1/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    text = response.read()
    connection.close()
    assert response.status == 503
    assert response.getheader("Retry-After") == "7"
    assert response.getheader("Connection") == "close"
    if method != "HEAD":
        error = json.loads(text)["error"]
        assert error["code"] == 503 and error["type"] == "unavailable_error"
        assert "retry after 7 s" in error["message"]


def test_the_host_reads_a_missing_table_as_closed_and_anything_else_nft_says_as_an_error(monkeypatch):
    monkeypatch.setattr(gate.shutil, "which", lambda name, path=None: "/usr/sbin/nft")
    said = {"rc": 1, "err": "Error: No such file or directory\nlist table inet llamarpc_gate\n"}
    calls = []

    def run_command(argv, data=None):
        calls.append((argv, data))
        return said["rc"], "", said["err"]

    host = gate.Host("llamarpc_gate", run_command)
    assert host.table_present() is False
    said.update(rc=1, err="Error: Operation not permitted")
    with pytest.raises(gate.GateError, match="not permitted"):
        host.table_present()
    said.update(rc=0, err="")
    host.load("table inet llamarpc_gate {}\n")
    assert calls[-1] == (["/usr/sbin/nft", "-f", "-"], "table inet llamarpc_gate {}\n")
    monkeypatch.setattr(gate.shutil, "which", lambda name, path=None: None)
    assert host.table_present() is False  # no nft on the host: no table either


class Systemctl:
    """systemctl's answers in turn (rc, stderr), and what was asked."""

    def __init__(self, *answers):
        self.answers, self.asked = list(answers), []

    def run(self, *args):
        self.asked.append(args)
        rc, err = self.answers.pop(0)
        return rc, "", err


def test_a_failed_restart_is_tried_again_and_the_last_failure_shows_the_units_journal():
    journal = "Dec 07 node1 systemd[1]: llamarpc-server.service: Failed at step CGROUP spawning /usr/bin/python3\n"
    calls = []

    def run_command(argv, data=None):
        calls.append(argv)
        return 0, journal, ""

    failed = (1, "Job for llamarpc-server.service failed because the control process exited with error code.")
    host = gate.Host("llamarpc_gate", run_command, Systemctl(failed, (0, "")))
    naps = []
    assert host.unit("restart", SERVER, retries=2, sleep=naps.append) == 1 and naps == [2.0] and calls == []
    host = gate.Host("llamarpc_gate", run_command, Systemctl(failed, failed, failed))
    with pytest.raises(gate.GateError) as error:
        host.unit("restart", SERVER, retries=2, sleep=naps.append)
    assert "failed (3 attempts): Job for llamarpc-server.service failed" in str(error.value)
    assert "Failed at step CGROUP" in str(error.value) and calls[0][0] == "journalctl" and SERVER in calls[0]


def test_a_restart_is_the_whole_window_in_one_run_gate_drain_restart_health_then_the_gate_goes():
    host = Host()
    result = run(host, state="restarted", server_unit=SERVER)
    unit = PARAMS["unit"]
    assert host.done == [
        ("start", unit), ("load", "table inet llamarpc_gate {"), ("restart", SERVER),
        ("health", 1), ("health", 2), ("health", 3), FLUSH, ("delete", "table"), ("stop", unit),
    ]  # fmt: skip
    assert result["changed"] and result["restarted"] and not result["open"]
    assert result["drained"] and result["loaded"] == 2.0  # two intervals of 1 s after the restart


def test_a_restart_behind_a_gate_the_play_opened_keeps_it_until_health_then_closes_it():
    """The cutover: the play opened the gate and stopped llama-server (nothing listens on its port)."""
    host = Host(present=True, running=True, sockets=HEADER + LISTEN_8081, loads=1)
    run(host, state="restarted", server_unit=SERVER)
    assert host.done == [
        ("restart", SERVER),
        ("health", 1),
        ("load", "flush chain inet llamarpc_gate prerouting"),
        ("delete", "table"),
        ("stop", PARAMS["unit"]),
    ]


def test_a_restart_without_anyone_served_opens_no_gate_and_does_not_wait():
    host = Host(sockets=HEADER)
    result = run(host, state="restarted", server_unit=SERVER)
    assert host.done == [("restart", SERVER)]
    assert result["changed"] and result["loaded"] is None


def test_a_server_that_never_serves_fails_the_run_and_the_gate_still_goes():
    host = Host(loads=None)
    with pytest.raises(gate.GateError, match="did not answer /health with 200 within 5 s"):
        run(host, state="restarted", server_unit=SERVER, health_timeout=5)
    assert host.done[-2:] == [("delete", "table"), ("stop", PARAMS["unit"])] and not host.present


def test_a_restart_in_check_mode_reports_it_and_does_nothing():
    host = Host(active={TIMER})
    result = run(host, check_mode=True, state="restarted", server_unit=SERVER, pause_units=[TIMER, CHECK])
    assert result["changed"] and result["restarted"] and host.done == []


def test_the_supervisor_pauses_for_the_whole_window_and_only_what_ran_starts_again():
    """The supervisor's check between the gate's opening and /health 200 would read llama-server serving, then its
    workers free, and restart it a second time: its timer and a check in progress stop before the gate opens; the
    timer, which was active, starts again after the gate closed; the check, which was not running, does not."""
    host = Host(active={TIMER})
    run(host, state="restarted", server_unit=SERVER, pause_units=[TIMER, CHECK])
    unit = PARAMS["unit"]
    assert host.done == [
        ("stop", TIMER), ("start", unit), ("load", "table inet llamarpc_gate {"), ("restart", SERVER),
        ("health", 1), ("health", 2), ("health", 3), FLUSH, ("delete", "table"), ("stop", unit),
        ("start", TIMER),
    ]  # fmt: skip
    assert host.active == {TIMER}


def test_the_supervisor_starts_again_also_when_llama_server_never_serves():
    host = Host(loads=None, active={TIMER, CHECK})
    with pytest.raises(gate.GateError, match="did not answer /health"):
        run(host, state="restarted", server_unit=SERVER, health_timeout=5, pause_units=[TIMER, CHECK])
    assert host.done[:2] == [("stop", TIMER), ("stop", CHECK)]
    assert host.done[-2:] == [("start", TIMER), ("start", CHECK)] and host.active == {TIMER, CHECK}
