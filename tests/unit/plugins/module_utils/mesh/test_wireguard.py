"""WireGuard mesh helpers: key format, the peers of a host from the others' facts, wg show dump parsing."""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.filter.mesh import wireguard_dump, wireguard_peers
from ansible_collections.llamarpc.cluster.plugins.module_utils.mesh import _wireguard as wgu

KEYS = {
    "node1": "R//ZlwcR3Kqlhirag8xhv4T1OpROpWR1guZGDl1BtFY=",
    "node2": "6wPKSvabWZgoEDbWPx7fhWj6W/1Ad72L0raoZLcv1mY=",
    "node3": "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=",
}


def node(name, last):
    return {"public_key": KEYS[name], "address": f"10.99.0.{last}", "endpoint": f"10.213.3.{last}", "port": 51820}


def hostvars():
    return {name: {"wireguard_node": node(name, 10 + i)} for i, name in enumerate(["node1", "node2", "node3"], 1)}


@pytest.mark.parametrize("key", KEYS.values())
def test_real_keys(key):
    assert wgu.is_key(key)


@pytest.mark.parametrize("key", ["", None, "abc", KEYS["node1"][:-1], KEYS["node1"][:-2] + "B=", "x" * 43 + "="])
def test_not_keys(key):
    assert not wgu.is_key(key)


def test_every_other_host_is_a_peer():
    peers = wireguard_peers(["node3", "node1", "node2"], hostvars(), "node2", 25)
    assert peers == [
        {
            "name": "node1",
            "public_key": KEYS["node1"],
            "allowed_ips": "10.99.0.11/32",
            "endpoint": "10.213.3.11:51820",
            "keepalive": 25,
        },
        {
            "name": "node3",
            "public_key": KEYS["node3"],
            "allowed_ips": "10.99.0.13/32",
            "endpoint": "10.213.3.13:51820",
            "keepalive": 25,
        },
    ]


def test_hosts_without_a_key_are_left_out():
    variables = hostvars()
    variables["node3"] = {}
    variables["node4"] = {"wireguard_node": {"public_key": None, "address": "10.99.0.14"}}  # check mode
    assert [peer["name"] for peer in wireguard_peers(["node1", "node2", "node3", "node4"], variables, "node1")] == [
        "node2"
    ]


def test_a_shared_key_is_an_error():
    variables = hostvars()
    variables["node3"]["wireguard_node"]["public_key"] = KEYS["node1"]
    with pytest.raises(Exception, match="node3 and node1 have the same WireGuard public key"):
        wireguard_peers(["node1", "node2", "node3"], variables, "node2")


def test_a_bad_key_is_an_error():
    variables = hostvars()
    variables["node2"]["wireguard_node"]["public_key"] = "oops"
    with pytest.raises(Exception, match="node2: wireguard_node.public_key 'oops'"):
        wireguard_peers(["node1", "node2"], variables, "node1")


def test_ipv6_endpoint_in_brackets():
    assert wgu.endpoint("fd00::1", 51820) == "[fd00::1]:51820"
    assert wgu.endpoint("[fd00::1]", 51820) == "[fd00::1]:51820"


def test_dump():
    text = (
        "cHJpdmF0ZQ==\t"
        + KEYS["node1"]
        + "\t51820\toff\n"
        + KEYS["node2"]
        + "\t(none)\t10.213.3.12:51820\t10.99.0.12/32\t1764435143\t9212\t8140\t25\n"
        + KEYS["node3"]
        + "\t(none)\t(none)\t(none)\t0\t0\t0\toff\n"
    )
    dump = wireguard_dump(text)
    assert dump["interface"] == {
        "public_key": KEYS["node1"],
        "has_private_key": True,
        "listen_port": 51820,
        "fwmark": "off",
    }
    assert wireguard_dump("(none)\t(none)\t51820\toff\n")["interface"]["has_private_key"] is False
    assert "cHJpdmF0ZQ==" not in repr(dump)
    assert dump["peers"][0]["endpoint"] == "10.213.3.12:51820" and dump["peers"][0]["rx_bytes"] == 9212
    assert dump["peers"][1] == {
        "public_key": KEYS["node3"],
        "endpoint": None,
        "allowed_ips": [],
        "latest_handshake": 0,
        "rx_bytes": 0,
        "tx_bytes": 0,
        "persistent_keepalive": 0,
    }


@pytest.mark.parametrize("text", ["", "a\tb\n", "k\tp\t1\toff\nonly\tthree\tfields\n"])
def test_bad_dump(text):
    with pytest.raises(Exception, match="wg show dump"):
        wireguard_dump(text)
