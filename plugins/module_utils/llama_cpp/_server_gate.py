# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate in front of llama-server while a play restarts it: new connections to llama-server's address and port go
to a responder that answers every request with 503 and Retry-After, the connections already open keep going to
llama-server until they end (the drain), then the play restarts llama-server and closes the gate once it serves.

Opening: the responder's unit starts and listens, then an nftables table of its own (one transaction) rewrites the
destination of each new connection (its SYN: nat chains see a connection's first packet only, and a connection that
began before conntrack ran is never matched) to the responder's port, in prerouting (clients of other hosts) and in
output (local clients, root's own connections exempt: the play's health checks and smoke completion reach
llama-server). Then it waits until no connection to llama-server is open, or until llama-server reports no request in
progress on looks 0.1 s apart (the connections left are idle keep-alive ones), or until the drain's timeout. Each of
these waits, and the one for ``/health`` below, looks every 0.02 s: each look late is time the clients wait.

Closing: the table's rules go first (new connections reach llama-server again), then, once the connections the gate
took have ended, the table (its nat chains keep those connections translated until then), then the responder stops.

Restarting (the whole window in one run, no play's task inside it): the gate opens and drains as above (or stays, when
a play opened it before stopping llama-server), llama-server's unit restarts, the run waits until its ``/health``
answers 200, and the gate closes - also when the restart or the wait fails. Units named to pause (the supervisor's
timer and its check) stop before the gate opens and start again after it closed, those that were active: a check
running meanwhile would read llama-server serving, then its workers free while it restarts, and restart it a second
time, outside the window.

A llama-server that does not listen (a first deploy, a stopped service) gets no gate: nobody can be dropped.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import time
import urllib.error

from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils import _proc_tcp
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._coordinator_state import health_status
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd import Systemctl
from ansible_collections.llamarpc.cluster.plugins.module_utils.systemd._systemd_units import tried

ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["open", "closed", "restarted"], "default": "open"},
    "server_unit": {"type": "str"},
    "health_timeout": {"type": "int", "default": 600},
    "pause_units": {"type": "list", "elements": "str", "default": []},
    "address": {"type": "str", "required": True},
    "port": {"type": "int", "required": True},
    "gate_port": {"type": "int", "required": True},
    "unit": {"type": "str", "required": True},
    "table": {"type": "str", "default": "llamarpc_gate"},
    "drain_timeout": {"type": "int", "default": 120},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "listen_timeout": {"type": "int", "default": 30},
    "interval": {"type": "float", "default": 0.02},
}
REQUIRED_IF = [("state", "restarted", ["server_unit"])]
#: TCP states of a connection that may carry a request: ESTABLISHED, SYN_RECV, CLOSE_WAIT (the client sent its last
#: byte; llama-server may still answer).
OPEN_STATES = {_proc_tcp.ESTABLISHED, _proc_tcp.SYN_RECV, _proc_tcp.CLOSE_WAIT}
NFT = "nft"
#: Seconds the closing gate waits for the connections it took to end (the responder gives a client 15 s to send its
#: request, and answers at once).
GATE_ANSWERS_TIMEOUT = 15
#: Seconds between the first and the last of the looks at llama-server's slots that find none processing before the
#: drain takes the connections left for idle keep-alive ones: a request read but not yet in a slot shows by then.
IDLE_SPACING = 0.1
#: How many more times a failed restart of llama-server's unit is tried, 2 s apart.
RESTART_RETRIES = 2
NFT_PATH = "/usr/sbin:/sbin:/usr/bin:/bin"


def unspecified(address):
    """Whether ``address`` is a wildcard (0.0.0.0, ::): llama-server listens on every address."""
    return ipaddress.ip_address(address).is_unspecified


def ruleset(table, address, port, gate_port):
    """The nftables text of the gate: a table ``inet <table>`` whose nat chains send each new TCP connection (its SYN
    alone) to ``address``:``port`` on to ``gate_port`` of the same address, root's local connections exempt."""
    if unspecified(address):
        match, target = f"tcp dport {port}", f"redirect to :{gate_port}"
    else:
        ip = ipaddress.ip_address(address)
        family = "ip" if ip.version == 4 else "ip6"
        shown = str(ip) if ip.version == 4 else f"[{ip}]"
        match, target = f"{family} daddr {ip} tcp dport {port}", f"dnat {family} to {shown}:{gate_port}"
    rule = f"{match} tcp flags & (syn | ack) == syn {target}"
    return (
        f"table inet {table} {{\n"
        "  chain prerouting {\n"
        "    type nat hook prerouting priority -100; policy accept;\n"
        f"    {rule}\n"
        "  }\n"
        "  chain output {\n"
        "    type nat hook output priority -100; policy accept;\n"
        "    meta skuid 0 return\n"
        f"    {rule}\n"
        "  }\n"
        "}\n"
    )


def _local(address):
    """A socket's local address, an IPv4-mapped IPv6 one as its IPv4 address."""
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def sockets(texts):
    """(local address, local port, state) of every socket in the texts of /proc/net/tcp and /proc/net/tcp6."""
    return [(_local(sock.address), sock.port, sock.state) for sock in _proc_tcp.parse(texts)]


def _matches(local, address):
    wanted = ipaddress.ip_address(address)
    return wanted.is_unspecified or local.is_unspecified or local == wanted


def listening(found, address, port):
    """Whether a socket listens on ``address``:``port`` (or on every address at that port)."""
    listen = _proc_tcp.LISTEN
    return any(state == listen and number == port and _matches(local, address) for local, number, state in found)


def open_connections(found, address, port):
    """How many connections to ``address``:``port`` may still carry a request."""
    return sum(state in OPEN_STATES and number == port and _matches(local, address) for local, number, state in found)


def read_sockets():
    """This host's sockets, as ``sockets`` gives them."""
    return [(_local(sock.address), sock.port, sock.state) for sock in _proc_tcp.read()]


def url_of(address, port):
    ip = ipaddress.ip_address(address)
    host = ("127.0.0.1" if ip.version == 4 else "::1") if ip.is_unspecified else str(ip)
    return f"http://{host}:{port}" if ip.version == 4 else f"http://[{host}]:{port}"


def busy_slots(address, port, api_key, timeout=10):
    """How many of llama-server's slots process a request now (its /slots), None when it does not say (an old build,
    /slots off, no answer)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with open_url(url_of(address, port) + "/slots", headers=headers, timeout=timeout, use_proxy=False) as reply:
            slots = json.loads(reply.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(slots, list):
        return None
    return sum(bool(slot.get("is_processing")) for slot in slots if isinstance(slot, dict))


def drain(connections, busy, timeout, interval, *, clock=time.monotonic, sleep=time.sleep):
    """Wait until ``connections()`` is 0, or ``busy()`` is 0 on looks at least IDLE_SPACING seconds apart with none
    busy between them (idle keep-alive connections only), or ``timeout`` seconds; a look every ``interval`` seconds.
    A dict of what it saw: drained, how (none_open, idle, timeout), the connections left and the seconds waited."""
    start = clock()
    idle_since = None
    while True:
        left = connections()
        waited = round(clock() - start, 2)
        if left == 0:
            return {"drained": True, "how": "none_open", "connections": 0, "waited": waited}
        if busy() == 0:
            now = clock()
            if idle_since is None:
                idle_since = now
            elif now - idle_since >= IDLE_SPACING:
                return {"drained": True, "how": "idle", "connections": left, "waited": waited}
        else:
            idle_since = None
        if waited >= timeout:
            return {"drained": False, "how": "timeout", "connections": left, "waited": waited}
        sleep(interval)


def health_ok(address, port):
    """Whether llama-server's /health answers 200 (the model loaded): the collection's one health read."""
    return health_status(url_of(address, port)) == 200


class GateError(Exception):
    pass


class Host:
    """What the gate does on the host: nft (through ``run_command``, AnsibleModule's), systemctl (``systemctl``, a
    ``_systemd.Systemctl``), /proc/net/tcp, llama-server's /slots (tests replace it)."""

    def __init__(self, table, run_command, systemctl=None):
        self.table = table
        self.run_command = run_command
        self.systemctl = systemctl

    def _run(self, argv, stdin=None):
        rc, out, err = self.run_command(argv, data=stdin)
        return rc, (err or out).strip()

    @staticmethod
    def nft():
        return shutil.which(NFT, path=NFT_PATH) or NFT

    def table_present(self):
        if shutil.which(NFT, path=NFT_PATH) is None:
            return False  # no nft: no table either (a host the gate was never opened on)
        rc, said = self._run([self.nft(), "list", "table", "inet", self.table])
        if rc != 0 and "No such file" not in said and "does not exist" not in said.lower():
            raise GateError(f"nft list table inet {self.table}: {said}")
        return rc == 0

    def load(self, text):
        rc, said = self._run([self.nft(), "-f", "-"], stdin=text)
        if rc != 0:
            raise GateError(f"nft -f - (the gate's table): {said}")

    def delete(self):
        rc, said = self._run([self.nft(), "delete", "table", "inet", self.table])
        if rc != 0:
            raise GateError(f"nft delete table inet {self.table}: {said}")

    def unit_active(self, unit):
        return self.systemctl.run("is-active", "--quiet", unit)[0] == 0

    def unit(self, action, unit, retries=0, delay=2.0, sleep=time.sleep):
        """``systemctl ACTION UNIT``, tried again ``retries`` times; the error after the last has the unit's last
        journal lines."""
        rc, tries, said = tried(self.systemctl, action, unit, retries, delay, sleep)
        if rc != 0:
            journal = self.run_command(["journalctl", "--no-pager", "-o", "short-precise", "-n", "20", "-u", unit])[1]
            raise GateError(
                f"systemctl {action} {unit} failed ({tries + 1} attempts): {said}; its journal's last lines:\n"
                + journal.strip()
            )
        return tries

    sockets = staticmethod(read_sockets)
    busy = staticmethod(busy_slots)
    healthy = staticmethod(health_ok)


def _wait(predicate, timeout, interval, clock, sleep):
    deadline = clock() + timeout
    while not predicate():
        if clock() >= deadline:
            return False
        sleep(interval)
    return True


def gate(params, check_mode, host, *, clock=time.monotonic, sleep=time.sleep):
    """The module's result for ``params`` (ARGUMENT_SPEC); raises GateError when the gate cannot be put in place
    (what it opened by then is closed again)."""
    address, port, gate_port, unit = params["address"], params["port"], params["gate_port"], params["unit"]
    if gate_port == port:
        raise GateError(f"gate_port {gate_port} is llama-server's own port")
    if params["state"] == "restarted":
        return restart(params, check_mode, host, clock=clock, sleep=sleep)
    present = host.table_present()
    running = host.unit_active(unit)
    before = "open" if present else "closed"
    result = {"changed": False, "open": present, "drained": None, "how": None, "connections": 0, "waited": 0.0}
    if params["state"] == "closed":
        result["changed"] = present or running
        result["open"] = False
        if not check_mode:
            if present:
                # New connections reach llama-server again at once; the table and its nat chains stay until the
                # connections the gate took have their answers: the kernel translates a connection's later packets
                # only while a nat chain is hooked in its namespace, and a 503 sent after the table went reaches the
                # client untranslated, which resets it and then waits for an answer that never comes.
                host.load(f"flush chain inet {params['table']} prerouting\nflush chain inet {params['table']} output\n")
                _wait(
                    lambda: open_connections(host.sockets(), address, gate_port) == 0,
                    GATE_ANSWERS_TIMEOUT,
                    params["interval"],
                    clock,
                    sleep,
                )
                host.delete()
            if running:
                host.unit("stop", unit)
        result["diff"] = {"before": {"gate": before}, "after": {"gate": "closed"}}
        return result

    if not present and not listening(host.sockets(), address, port):
        result["msg"] = f"nothing listens on {address}:{port}: no gate (nobody is served, nobody can be dropped)"
        result["diff"] = {"before": {"gate": before}, "after": {"gate": before}}
        return result
    result["changed"] = not present or not running
    result["open"] = True
    result["diff"] = {"before": {"gate": before}, "after": {"gate": "open"}}
    if check_mode:
        return result
    if not running:
        host.unit("start", unit)
    if not _wait(lambda: listening(host.sockets(), address, gate_port), params["listen_timeout"], 0.5, clock, sleep):
        host.unit("stop", unit)
        raise GateError(f"{unit} does not listen on {address}:{gate_port} after {params['listen_timeout']} s")
    if not present:
        try:
            host.load(ruleset(params["table"], address, port, gate_port))
        except GateError:
            host.unit("stop", unit)
            raise
    result.update(
        drain(
            lambda: open_connections(host.sockets(), address, port),
            lambda: host.busy(address, port, params["api_key"]),
            params["drain_timeout"],
            params["interval"],
            clock=clock,
            sleep=sleep,
        )
    )
    return result


def restart(params, check_mode, host, *, clock=time.monotonic, sleep=time.sleep):
    """``state=restarted``: open the gate (or keep the one open), restart ``server_unit``, wait for /health 200, close
    the gate, whatever happened; without a gate (nothing listened) the restart alone, the caller waits. Adds
    ``restarted`` and ``loaded`` (seconds from the restart until /health answered, null without a wait). The active
    units of ``pause_units`` stop first and start again last, whatever happened."""
    paused = [unit for unit in params["pause_units"] if host.unit_active(unit)]
    if not check_mode:
        for unit in paused:
            host.unit("stop", unit)
    try:
        return _restart_unpaused(params, check_mode, host, clock, sleep)
    finally:
        if not check_mode:
            for unit in paused:
                host.unit("start", unit)


def _restart_unpaused(params, check_mode, host, clock, sleep):
    opened = gate(dict(params, state="open"), check_mode, host, clock=clock, sleep=sleep)
    result = dict(opened, changed=True, open=False, restarted=True, loaded=None)
    result["diff"] = {"before": {"llama-server": "serving"}, "after": {"llama-server": "restarted"}}
    if check_mode:
        return result
    try:
        # Tried again like the collection's other starts: a loaded host has failed a unit's first process
        # (219/CGROUP) right after a daemon-reload.
        host.unit("restart", params["server_unit"], retries=RESTART_RETRIES, sleep=sleep)
        if opened["open"]:
            start = clock()
            if not _wait(
                lambda: host.healthy(params["address"], params["port"]),
                params["health_timeout"],
                params["interval"],
                clock,
                sleep,
            ):
                raise GateError(
                    f"{params['server_unit']} did not answer /health with 200 within {params['health_timeout']} s "
                    "of its restart (journalctl -u it for why); the gate is closed again"
                )
            result["loaded"] = round(clock() - start, 1)
    finally:
        if opened["open"]:
            gate(dict(params, state="closed"), False, host, clock=clock, sleep=sleep)
    return result


def run_module(module):
    try:
        host = Host(module.params["table"], module.run_command, Systemctl(module, required=True))
        return gate(module.params, module.check_mode, host)
    except GateError as exc:
        module.fail_json(msg=str(exc))
    except ValueError as exc:
        module.fail_json(msg=f"address {module.params['address']!r}: {exc}")
