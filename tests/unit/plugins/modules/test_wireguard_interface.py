"""wireguard_interface against a stand-in host: systemctl, ip and wg answer from a small model of wg-quick's unit
and the interface, and the sync helper and systemctl's actions change that model. Every run is checked four ways
where it matters: check mode (predicts, runs nothing), apply, rerun (nothing), and what was run."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import (
    _wireguard_interface as wireguard_interface_run,
)
from ansible_collections.llamarpc.cluster.plugins.modules import wireguard_interface

PRIVATE = "YOpBEgDk6mjlTdx0xQ8TaxrE2UHkRo0j8C7pq8ePkEE="
KEY1 = "R//ZlwcR3Kqlhirag8xhv4T1OpROpWR1guZGDl1BtFY="
KEY2 = "6wPKSvabWZgoEDbWPx7fhWj6W/1Ad72L0raoZLcv1mY="
KEY3 = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
HELPER = "/usr/local/lib/llamarpc/wireguard-sync"
PEERS = [
    {
        "name": "node2",
        "public_key": KEY2,
        "allowed_ips": "10.99.0.12/32",
        "endpoint": "10.0.0.2:51820",
        "keepalive": 25,
    },
    {
        "name": "node3",
        "public_key": KEY3,
        "allowed_ips": "10.99.0.13/32",
        "endpoint": "10.0.0.3:51820",
        "keepalive": 25,
    },
]
ARGS = {
    "name": "wg-llamarpc",
    "address": "10.99.0.11/24",
    "mtu": 1420,
    "port": 51820,
    "peers": PEERS,
    "key": "/etc/wireguard/wg-llamarpc.key",
    "sync_helper": HELPER,
}
UNIT = "wg-quick@wg-llamarpc.service"


class FakeHost:
    """wg-quick's unit and its interface. ``up()`` is what wg-quick up does with the configuration (ARGS)."""

    def __init__(
        self, found=True, enabled=True, active=True, iface=True, peers=(KEY2, KEY3), private=True, stop_keeps=False
    ):
        self.found, self.enabled, self.active = found, enabled, active
        # stop_keeps: a stop leaves the interface (its ExecStop never ran: status 219/CGROUP in a container).
        self.stop_keeps = stop_keeps
        self.start_failures = 0  # starts that fail before one succeeds (219/CGROUP right after a stop)
        self.iface = None
        if iface:
            self.up()
            self.iface["peers"] = list(peers)
            self.iface["private"] = private
        self.calls = []

    def up(self):
        self.iface = {"address": ("10.99.0.11", 24), "mtu": 1420, "port": 51820, "peers": [KEY2, KEY3], "private": True}

    def run(self, args, **kwargs):
        self.calls.append(list(args))
        tool = args[0].rsplit("/", 1)[-1]
        if tool == "systemctl":
            return self.systemctl(args[1:])
        if tool == "ip" and args[1] == "link":
            if args[2] == "delete" and self.iface:
                self.iface = None
                return 0, "", ""
            return (0, "4: wg-llamarpc: <POINTOPOINT,UP>", "") if self.iface else (1, "", "does not exist")
        if tool == "ip":
            if not self.iface:
                return 1, "", 'Device "wg-llamarpc" does not exist.'
            local, prefix = self.iface["address"]
            link = {
                "mtu": self.iface["mtu"],
                "linkinfo": {"info_kind": "tun"},
                "addr_info": [{"family": "inet", "local": local, "prefixlen": prefix}],
            }
            return 0, json.dumps([link]), ""
        if tool == "wg":
            if not self.iface:
                return 1, "", "Unable to access interface: No such device"
            head = f"{PRIVATE if self.iface['private'] else '(none)'}\t{KEY1}\t{self.iface['port']}\toff"
            lines = [head] + [
                f"{key}\t(none)\t10.0.0.9:51820\t10.99.0.{12 if key == KEY2 else 13}/32\t0\t0\t0\t25"
                for key in self.iface["peers"]
            ]
            return 0, "\n".join(lines) + "\n", ""
        if args[0] == HELPER:
            self.iface["peers"] = [KEY2, KEY3]
            self.iface["port"] = 51820
            return 0, "", ""
        raise AssertionError(f"unexpected command {args}")

    def systemctl(self, args):
        if args[0] == "show":
            if not self.found:
                return 0, "LoadState=not-found\nActiveState=inactive\n", ""
            return 0, f"LoadState=loaded\nActiveState={'active' if self.active else 'inactive'}\n", ""
        if args[0] == "is-enabled":
            return (0 if self.enabled else 1), "", ""
        if args[0] == "enable":
            self.enabled = True
        elif args[0] == "stop":
            self.active = False
            self.iface = self.iface if self.stop_keeps else None
        elif args[0] == "reset-failed":
            pass
        elif args[0] == "start":
            if self.start_failures:
                self.start_failures -= 1
                return 1, "", "Job for wg-quick@wg-llamarpc.service failed because the control process exited"
            if self.iface:  # what wg-quick up says
                return 1, "", "Job for wg-quick@wg-llamarpc.service failed: wg-quick: `wg-llamarpc' already exists"
            self.active = True
            self.up()
        else:
            raise AssertionError(f"unexpected systemctl {args}")
        return 0, "", ""

    @property
    def actions(self):
        """What changed the host: systemctl verbs other than show/is-enabled, the helper, an interface deleted."""
        return [
            call[1] if call[0].endswith("systemctl") else "sync" if call[0] == HELPER else "delete"
            for call in self.calls
            if (call[0].endswith("systemctl") and call[1] not in ("show", "is-enabled", "reset-failed"))
            or call[0] == HELPER
            or call[1:3] == ["link", "delete"]
        ]


@pytest.fixture
def host(monkeypatch):
    def install(fake):
        monkeypatch.setattr(basic.AnsibleModule, "run_command", fake.run)
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: f"/usr/bin/{name}")
        return fake

    return install


def four_ways(run_module, fake, args=None):
    """Check mode, apply, rerun, check mode again: (predicted, applied, rerun) results; asserts the two last."""
    args = ARGS if args is None else args
    predicted = run_module(wireguard_interface, args, check_mode=True)
    assert fake.actions == [], "check mode changed the host"
    applied = run_module(wireguard_interface, args)
    done = fake.actions
    rerun = run_module(wireguard_interface, dict(args, config_changed=False))
    again = run_module(wireguard_interface, dict(args, config_changed=False), check_mode=True)
    assert not rerun.failed and not rerun.result["changed"], rerun.result
    assert not again.result["changed"]
    assert fake.actions == done, "the rerun changed the host"
    return predicted, applied


def test_as_configured_runs_nothing_and_returns_the_status(run_module, host):
    fake = host(FakeHost())
    result = run_module(wireguard_interface, ARGS)
    assert not result.failed and not result.result["changed"]
    status = result.result["ansible_facts"]["wireguard_status"]
    assert status["interface"]["public_key"] == KEY1 and status["interface"]["has_private_key"]
    assert status["implementation"] == "userspace"
    assert [peer["public_key"] for peer in status["peers"]] == [KEY2, KEY3]
    assert PRIVATE not in json.dumps(result.result)
    assert fake.actions == []


def test_a_missing_peer_is_applied_in_place(run_module, host):
    fake = host(FakeHost(peers=(KEY2,)))
    predicted, applied = four_ways(run_module, fake)
    assert predicted.result["changed"] and predicted.result["actions"] == ["sync"]
    assert applied.result["actions"] == ["sync"] and applied.result["reasons"] == ["1 peer missing"]
    assert fake.actions == ["sync"]
    assert [call for call in fake.calls if call[0] == HELPER] == [[HELPER, "wg-llamarpc", ARGS["key"]]]
    assert len(applied.result["ansible_facts"]["wireguard_status"]["peers"]) == 2


def test_a_changed_configuration_is_applied_in_place(run_module, host):
    fake = host(FakeHost())
    predicted, applied = four_ways(run_module, fake, dict(ARGS, config_changed=True))
    assert predicted.result["actions"] == applied.result["actions"] == ["sync"]
    assert fake.actions == ["sync"]


def test_another_mtu_restarts(run_module, host):
    fake = host(FakeHost())
    fake.iface["mtu"] = 1500
    predicted, applied = four_ways(run_module, fake, dict(ARGS, config_changed=True))
    assert predicted.result["actions"] == applied.result["actions"] == ["restart"]
    assert fake.actions == ["stop", "start"]


def test_a_gone_interface_is_brought_back(run_module, host):
    fake = host(FakeHost(iface=False))
    predicted, applied = four_ways(run_module, fake)
    assert applied.result["reasons"] == ["the interface is gone"]
    assert fake.actions == ["stop", "start"]


def test_a_lost_private_key_is_brought_back(run_module, host):
    fake = host(FakeHost(private=False))
    four_ways(run_module, fake)
    assert fake.actions == ["stop", "start"]


def test_a_restart_whose_stop_left_the_interface_deletes_it_before_the_start(run_module, host):
    """The lab's MTU change back to 1420: ExecStop refused (219/CGROUP), the interface stayed, the start failed."""
    fake = host(FakeHost(stop_keeps=True))
    fake.iface["mtu"] = 1380
    predicted, applied = four_ways(run_module, fake)
    assert not applied.failed, applied.result
    assert applied.result["reasons"] == ["MTU 1380 instead of 1420"]
    assert fake.actions == ["stop", "delete", "start"]
    assert fake.iface["mtu"] == 1420


def test_a_failed_unit_whose_interface_is_left_is_started_again(run_module, host):
    """The state that restart left: the unit failed, the interface up with the old MTU; every start said exists."""
    fake = host(FakeHost(active=False))
    fake.iface["mtu"] = 1380
    predicted, applied = four_ways(run_module, fake)
    assert predicted.result["actions"] == applied.result["actions"] == ["start"]
    assert fake.actions == ["delete", "start"]
    assert fake.iface["mtu"] == 1420


def test_a_start_that_fails_right_after_the_stop_is_tried_again(run_module, host, monkeypatch):
    monkeypatch.setattr(wireguard_interface_run, "START_PAUSE", 0)
    fake = host(FakeHost())
    fake.iface["mtu"] = 1380
    fake.start_failures = 2
    applied = run_module(wireguard_interface, ARGS)
    assert not applied.failed, applied.result
    assert fake.actions == ["stop", "start", "start", "start"] and fake.iface["mtu"] == 1420


def test_a_start_that_keeps_failing_fails_with_systemctls_message(run_module, host, monkeypatch):
    monkeypatch.setattr(wireguard_interface_run, "START_PAUSE", 0)
    fake = host(FakeHost())
    fake.iface["mtu"] = 1380
    fake.start_failures = 3
    applied = run_module(wireguard_interface, ARGS)
    assert applied.failed and "systemctl start wg-quick@wg-llamarpc.service failed" in applied.result["msg"]
    assert fake.actions == ["stop", "start", "start", "start"]


def test_a_fresh_unit_is_enabled_and_started(run_module, host):
    fake = host(FakeHost(enabled=False, active=False, iface=False))
    predicted, applied = four_ways(run_module, fake, dict(ARGS, config_changed=True))
    assert predicted.result["actions"] == applied.result["actions"] == ["enable", "start"]
    assert fake.actions == ["enable", "start"]


def test_check_mode_on_a_fresh_host_predicts_without_the_unit(run_module, host):
    fake = host(FakeHost(found=False, enabled=False, active=False, iface=False))
    result = run_module(wireguard_interface, ARGS, check_mode=True)
    assert not result.failed and result.result["changed"]
    assert result.result["actions"] == ["enable", "start"] and "ansible_facts" not in result.result
    assert [call for call in fake.calls if not call[0].endswith("systemctl")] == []


def test_a_missing_unit_fails_outside_check_mode(run_module, host):
    host(FakeHost(found=False, enabled=False, active=False, iface=False))
    result = run_module(wireguard_interface, ARGS)
    assert result.failed and "wg-quick@wg-llamarpc.service is not installed" in result.result["msg"]


def test_an_interface_that_does_not_come_up_fails_naming_the_unit(run_module, host, monkeypatch):
    fake = host(FakeHost(iface=False))
    monkeypatch.setattr(FakeHost, "up", lambda self: None)
    result = run_module(wireguard_interface, ARGS)
    assert result.failed and f"journalctl -u {UNIT}" in result.result["msg"]
    assert fake.actions == ["stop", "start"]


def test_a_peer_without_a_key_fails(run_module, host):
    host(FakeHost())
    result = run_module(wireguard_interface, dict(ARGS, peers=[dict(PEERS[0], public_key="oops")]))
    assert result.failed and "node2" in result.result["msg"]


def test_diff_shows_the_interface_and_the_configuration(run_module, host):
    host(FakeHost(peers=(KEY2,)))
    result = run_module(wireguard_interface, dict(ARGS, _ansible_diff=True), check_mode=True)
    diff = result.result["diff"]
    assert diff["before"]["peers"] == [KEY2] and diff["after"]["peers"] == sorted([KEY2, KEY3])
    assert diff["before"]["addresses"] == diff["after"]["addresses"] == ["10.99.0.11/24"]
