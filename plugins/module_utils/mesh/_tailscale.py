# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers of the Tailscale modules: auth key format, ``tailscale status --json`` / ``tailscale ip`` /
``tailscale debug prefs`` parsing, what differs from the wanted settings, and the ``tailscale up`` command line.

Standard library only and side-effect free; unit-tested on recorded outputs (tests/unit/plugins/fixtures/tailscale).
"""

from __future__ import annotations

import ipaddress
import json
import re

#: Tailscale's own control server (what ``ControlURL`` holds when no --login-server was given).
DEFAULT_CONTROL_URL = "https://controlplane.tailscale.com"

# Tailscale auth keys: tskey-auth-<key id>-<secret> (and the older tskey-<id>-<secret>); OAuth client secrets
# tskey-client-<id>-<secret>, optionally with ?ephemeral=…&preauthorized=… as `tailscale up` accepts them.
_TSKEY_RE = re.compile(r"^tskey-(?:auth-|client-)?[A-Za-z0-9]+-[A-Za-z0-9]+(?:\?[A-Za-z0-9=&_-]+)?$")
# Headscale pre-auth keys: 48 hexadecimal characters (up to 0.25), hskey-auth-<id>-<secret> (0.26 and later).
_HSKEY_RE = re.compile(r"^(?:[0-9a-f]{48}|hskey-auth-[A-Za-z0-9_]+-[A-Za-z0-9_]+)$")
_TAG_RE = re.compile(r"^tag:[A-Za-z0-9][A-Za-z0-9-]*$")
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def auth_key_problem(key, login_server=""):
    """None when ``key`` has the format of an auth key for this control server, else why it has not.

    The message never contains the key itself.
    """
    if not key:
        return None
    key = str(key)
    if key.startswith("file:"):
        return None if len(key) > len("file:") and key[5] == "/" else "a file: auth key needs an absolute path"
    if _TSKEY_RE.match(key):
        return None
    if login_server and _HSKEY_RE.match(key):
        return None
    expected = "tskey-auth-<id>-<secret> (or tskey-client-<id>-<secret>)"
    if login_server:
        expected += ", a Headscale pre-auth key (48 hexadecimal characters or hskey-auth-<id>-<secret>)"
    return (
        f"the auth key ({len(key)} characters, starting {key[:6]!r}) does not have the format of "
        f"{expected} or file:/path"
    )


def tag_problems(tags):
    """Messages about tags that Tailscale would refuse (each must be tag:name)."""
    return [f"tag {tag!r} must look like tag:name (letters, digits, dashes)" for tag in tags if not _TAG_RE.match(tag)]


def hostname_problem(hostname):
    if hostname and not _HOSTNAME_RE.match(hostname):
        return f"hostname {hostname!r} must be a DNS label (letters, digits, dashes, at most 63 characters)"
    return None


def _split_ips(values):
    ipv4, ipv6 = [], []
    for value in values or []:
        try:
            address = ipaddress.ip_address(str(value).strip())
        except ValueError:
            continue
        (ipv4 if address.version == 4 else ipv6).append(str(address))
    return ipv4, ipv6


def parse_ip(text):
    """``tailscale ip`` (one address a line) as ``(ipv4 list, ipv6 list)``."""
    return _split_ips(line for line in text.splitlines() if line.strip())


def connection(peer):
    """How traffic to a peer goes now, as ``tailscale status`` says it: direct, relayed, peer-relay or idle.

    A peer with no recent traffic (``Active`` false) is idle: its ``Relay`` is only its home DERP region.
    """
    if not peer.get("Active"):
        return "idle"
    if peer.get("CurAddr"):
        return "direct"
    if peer.get("PeerRelay"):
        return "peer-relay"
    if peer.get("Relay"):
        return "relayed"
    return "idle"


def parse_status(text):
    """``tailscale status --json`` as the collection's facts; raises ValueError on output that is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"tailscale status --json did not print JSON: {exc}") from exc
    if not isinstance(data, dict) or "BackendState" not in data:
        raise ValueError("tailscale status --json printed JSON without BackendState")
    me = data.get("Self") or {}
    ipv4, ipv6 = _split_ips(data.get("TailscaleIPs") or me.get("TailscaleIPs"))
    peers = []
    for peer in (data.get("Peer") or {}).values():
        peer_ipv4, peer_ipv6 = _split_ips(peer.get("TailscaleIPs"))
        peers.append(
            {
                "hostname": peer.get("HostName", ""),
                "dns_name": (peer.get("DNSName") or "").rstrip("."),
                "os": peer.get("OS", ""),
                "ipv4": peer_ipv4[0] if peer_ipv4 else None,
                "ipv6": peer_ipv6[0] if peer_ipv6 else None,
                "online": bool(peer.get("Online")),
                "active": bool(peer.get("Active")),
                "connection": connection(peer),
                "cur_addr": peer.get("CurAddr") or None,
                "relay": peer.get("Relay") or None,
                "tags": list(peer.get("Tags") or []),
                "rx_bytes": int(peer.get("RxBytes") or 0),
                "tx_bytes": int(peer.get("TxBytes") or 0),
            }
        )
    peers.sort(key=lambda peer: (peer["dns_name"], peer["hostname"]))
    return {
        "backend_state": data["BackendState"],
        "version": data.get("Version", ""),
        "hostname": me.get("HostName", ""),
        "dns_name": (me.get("DNSName") or "").rstrip("."),
        "tags": list(me.get("Tags") or []),
        "ipv4": ipv4[0] if ipv4 else None,
        "ipv6": ipv6[0] if ipv6 else None,
        "tailnet": (data.get("CurrentTailnet") or {}).get("Name"),
        "health": list(data.get("Health") or []),
        "peers": peers,
        "relayed_peers": [peer["dns_name"] or peer["hostname"] for peer in peers if peer["connection"] == "relayed"],
        "direct_peers": [peer["dns_name"] or peer["hostname"] for peer in peers if peer["connection"] == "direct"],
    }


def parse_prefs(text):
    """``tailscale debug prefs`` (JSON) reduced to the settings this collection manages."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"tailscale debug prefs did not print JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("tailscale debug prefs did not print a JSON object")
    return {
        "control_url": data.get("ControlURL") or DEFAULT_CONTROL_URL,
        "hostname": data.get("Hostname") or "",
        "tags": sorted(data.get("AdvertiseTags") or []),
        "accept_dns": bool(data.get("CorpDNS")),
        "want_running": bool(data.get("WantRunning")),
        "logged_out": bool(data.get("LoggedOut")),
    }


def wanted(hostname, tags, login_server, accept_dns):
    """The settings asked for, in the shape of parse_prefs()."""
    return {
        "control_url": (login_server or DEFAULT_CONTROL_URL).rstrip("/"),
        "hostname": hostname or "",
        "tags": sorted(set(tags or [])),
        "accept_dns": bool(accept_dns),
    }


def differences(status, prefs, want):
    """Names of what differs between the node (parsed status and prefs) and ``want``; empty when nothing does."""
    diffs = []
    if status["backend_state"] != "Running" or not prefs["want_running"] or prefs["logged_out"]:
        diffs.append("running")
    if prefs["control_url"].rstrip("/") != want["control_url"]:
        diffs.append("login_server")
    if want["hostname"] and prefs["hostname"] != want["hostname"]:
        diffs.append("hostname")
    if prefs["tags"] != want["tags"]:
        diffs.append("tags")
    if prefs["accept_dns"] != want["accept_dns"]:
        diffs.append("accept_dns")
    return diffs


def up_argv(tailscale, want, auth_key=None, timeout=60):
    """``tailscale up`` with every managed setting spelled out (--reset: nothing unmanaged lingers)."""
    argv = [tailscale, "up", "--reset", f"--timeout={int(timeout)}s"]
    if want["control_url"] != DEFAULT_CONTROL_URL:
        argv.append(f"--login-server={want['control_url']}")
    if want["hostname"]:
        argv.append(f"--hostname={want['hostname']}")
    argv.append(f"--advertise-tags={','.join(want['tags'])}")
    argv.append(f"--accept-dns={'true' if want['accept_dns'] else 'false'}")
    if auth_key:
        argv.append(f"--auth-key={auth_key}")
    return argv


def read_node(module, tailscale):
    """Run ``tailscale status --json``, ``tailscale ip`` and ``tailscale debug prefs`` through ``module``.

    Returns ``(status, prefs)``; fails the module with a message when tailscaled does not answer.
    """
    rc, out, err = module.run_command([tailscale, "status", "--json"])
    # status exits 1 when the node is stopped or logged out but still prints its JSON.
    try:
        status = parse_status(out)
    except ValueError as exc:
        module.fail_json(msg=f"cannot read tailscale status (rc={rc}): {err.strip() or exc}; is tailscaled running?")
    if status["backend_state"] == "Running":
        rc, out, err = module.run_command([tailscale, "ip"])
        if rc == 0:
            ipv4, ipv6 = parse_ip(out)
            status["ipv4"] = ipv4[0] if ipv4 else status["ipv4"]
            status["ipv6"] = ipv6[0] if ipv6 else status["ipv6"]
    rc, out, err = module.run_command([tailscale, "debug", "prefs"])
    try:
        prefs = parse_prefs(out)
    except ValueError as exc:
        module.fail_json(msg=f"cannot read tailscale prefs (rc={rc}): {err.strip() or exc}")
    return status, prefs
