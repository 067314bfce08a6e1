"""The wireguard_interface decision: ``ip -json address`` parsing and one test per row of ``decide``."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import _wireguard as wgu

KEY1 = "R//ZlwcR3Kqlhirag8xhv4T1OpROpWR1guZGDl1BtFY="
KEY2 = "6wPKSvabWZgoEDbWPx7fhWj6W/1Ad72L0raoZLcv1mY="
KEY3 = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="


def ip_json(kind="tun", mtu=1420, addresses=(("10.99.0.11", 24),)):
    info = [{"family": "inet", "local": local, "prefixlen": prefix} for local, prefix in addresses]
    info.append({"family": "inet6", "local": "fe80::1", "prefixlen": 64})
    return json.dumps([{"ifname": "wg-llamarpc", "mtu": mtu, "linkinfo": {"info_kind": kind}, "addr_info": info}])


UNIT = {"found": True, "enabled": True, "active": True}
LINK = wgu.parse_link(ip_json())
WANT = {
    "addresses": ["10.99.0.11/24"],
    "mtu": 1420,
    "port": 51820,
    "peers": [
        {"name": "node2", "public_key": KEY2, "allowed_ips": "10.99.0.12/32", "endpoint": "a:1", "keepalive": 25},
        {"name": "node3", "public_key": KEY3, "allowed_ips": "10.99.0.13/32", "endpoint": "b:1", "keepalive": 25},
    ],
}


def dump(peers=((KEY2, "10.99.0.12/32", 25), (KEY3, "10.99.0.13/32", 25)), port=51820, private=True):
    return {
        "interface": {"public_key": KEY1, "has_private_key": private, "listen_port": port, "fwmark": "off"},
        "peers": [
            {
                "public_key": key,
                "endpoint": "10.213.3.99:51820",  # roamed: never compared
                "allowed_ips": [ips],
                "latest_handshake": 0,
                "rx_bytes": 0,
                "tx_bytes": 0,
                "persistent_keepalive": keepalive,
            }
            for key, ips, keepalive in peers
        ],
    }


def test_parse_link_kernel_and_userspace():
    assert wgu.parse_link(ip_json("wireguard")) == {
        "mtu": 1420,
        "addresses": ["10.99.0.11/24"],
        "implementation": "kernel",
    }
    assert wgu.parse_link(ip_json("tun"))["implementation"] == "userspace"
    assert wgu.parse_link(ip_json("veth"))["implementation"] is None


def test_parse_link_without_addresses_or_linkinfo():
    assert wgu.parse_link('[{"ifname": "x", "mtu": 1420}]') == {"mtu": 1420, "addresses": [], "implementation": None}


@pytest.mark.parametrize("text", ["", "[]", "{}", "not json"])
def test_parse_link_refuses_other_output(text):
    with pytest.raises(ValueError, match="ip -json address"):
        wgu.parse_link(text)


def test_as_configured_nothing_to_do():
    assert wgu.decide(UNIT, LINK, dump(), WANT) == ([], [])


def test_unit_not_installed_yet_is_enabled_and_started():
    assert wgu.decide({"found": False, "enabled": False, "active": False}, None, None, WANT)[0] == ["enable", "start"]


def test_unit_not_enabled_is_enabled_only():
    assert wgu.decide(dict(UNIT, enabled=False), LINK, dump(), WANT) == (
        ["enable"],
        ["the unit does not start at boot"],
    )


def test_unit_not_running_is_started_whatever_the_interface():
    actions, reasons = wgu.decide(dict(UNIT, active=False), None, None, WANT, config_changed=True)
    assert (actions, reasons) == (["start"], ["the unit is not running"])


def test_interface_gone_is_restarted():
    assert wgu.decide(UNIT, None, None, WANT) == (["restart"], ["the interface is gone"])


def test_link_without_wireguard_is_restarted():
    assert wgu.decide(UNIT, LINK, None, WANT)[0] == ["restart"]


def test_lost_private_key_is_restarted():
    assert wgu.decide(UNIT, LINK, dump(private=False), WANT) == (
        ["restart"],
        ["the interface has lost its private key"],
    )


@pytest.mark.parametrize(
    ("link", "reason"),
    [
        (ip_json(addresses=(("10.99.0.50", 24),)), "address 10.99.0.50/24 instead of 10.99.0.11/24"),
        (ip_json(addresses=(("10.99.0.11", 16),)), "address 10.99.0.11/16 instead of 10.99.0.11/24"),
        (ip_json(addresses=(("10.99.0.11", 24), ("10.99.0.60", 24))), "address 10.99.0.11/24, 10.99.0.60/24 instead"),
        (ip_json(addresses=()), "address none instead of 10.99.0.11/24"),
        (ip_json(mtu=1500), "MTU 1500 instead of 1420"),
    ],
    ids=["other-address", "other-prefix", "extra-address", "no-address", "other-mtu"],
)
def test_other_address_or_mtu_is_restarted_even_with_other_peers(link, reason):
    actions, reasons = wgu.decide(UNIT, wgu.parse_link(link), dump(peers=()), WANT)
    assert actions == ["restart"]
    assert reasons[0].startswith(reason)


@pytest.mark.parametrize(
    ("live", "reason"),
    [
        (dump(peers=((KEY2, "10.99.0.12/32", 25),)), "1 peer missing"),
        (
            dump(peers=((KEY2, "10.99.0.12/32", 25), (KEY3, "10.99.0.13/32", 25), (KEY1, "10.99.0.9/32", 25))),
            "1 peer not configured",
        ),
        (
            dump(peers=((KEY2, "10.99.0.12/32", 25), (KEY3, "10.99.0.77/32", 25))),
            "1 peer with other allowed IPs or keepalive",
        ),
        (
            dump(peers=((KEY2, "10.99.0.12/32", 0), (KEY3, "10.99.0.13/32", 0))),
            "2 peers with other allowed IPs or keepalive",
        ),
        (dump(port=51821), "listen port 51821 instead of 51820"),
    ],
    ids=["missing-peer", "extra-peer", "other-allowed-ips", "other-keepalive", "other-port"],
)
def test_other_peers_or_port_are_applied_in_place(live, reason):
    assert wgu.decide(UNIT, LINK, live, WANT) == (["sync"], [reason])


def test_a_changed_configuration_is_applied_in_place():
    assert wgu.decide(UNIT, LINK, dump(), WANT, config_changed=True) == (["sync"], ["the configuration changed"])


def test_not_enabled_and_other_peers_enable_then_sync():
    assert wgu.decide(dict(UNIT, enabled=False), LINK, dump(peers=()), WANT)[0] == ["enable", "sync"]


def test_keepalive_off_matches_no_keepalive():
    want = dict(WANT, peers=[dict(peer, keepalive=0) for peer in WANT["peers"]])
    live = dump(peers=((KEY2, "10.99.0.12/32", 0), (KEY3, "10.99.0.13/32", 0)))
    assert wgu.decide(UNIT, LINK, live, want) == ([], [])
