"""The one parser of /proc/net/tcp{,6}: addresses in host-order words, ports, states and inodes; a table that is missing
or a malformed line is skipped."""

from __future__ import annotations

import ipaddress

from ansible_collections.llamarpc.cluster.plugins.module_utils import _proc_tcp

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
TAIL = " 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0000 20 4 30 10 -1\n"


def row(local, state, inode):
    return f"   0: {local} 00000000:0000 {state}" + TAIL.format(inode=inode)


def test_ipv4_ipv6_and_mapped_addresses_ports_states_and_inodes(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(HEADER + row("0B00D50A:1F90", "0A", "111") + "garbage line\n")
    mapped = "0000000000000000FFFF00000B00D50A"  # ::ffff:10.213.0.11
    loopback6 = "00000000000000000000000001000000"  # ::1
    (tmp_path / "net" / "tcp6").write_text(
        HEADER + row(mapped + ":C384", "01", "222") + row(loopback6 + ":0016", "0a", "333")
    )
    found = _proc_tcp.read(str(tmp_path))
    assert found == [
        _proc_tcp.Socket(ipaddress.ip_address("10.213.0.11"), 8080, "0A", "111"),
        _proc_tcp.Socket(ipaddress.ip_address("::ffff:10.213.0.11"), 50052, "01", "222"),
        _proc_tcp.Socket(ipaddress.ip_address("::1"), 22, "0A", "333"),
    ]
    assert _proc_tcp.read(str(tmp_path / "nothing")) == []
