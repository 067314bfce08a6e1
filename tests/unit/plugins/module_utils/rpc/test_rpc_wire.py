# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""The RPC wire meter: requests, replies and bytes per command, whatever the chunking, and the wait for each reply."""

from __future__ import annotations

import struct

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc
from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_wire as wire

CMD = {name: number for number, name in rpc.COMMAND_NAMES.items()}
RPC_TENSOR = 296  # sizeof(rpc_tensor) in protocol 7.0.0


def request(name, payload_size):
    return rpc.encode_request(CMD[name], bytes(range(256)) * (payload_size // 256) + b"\x07" * (payload_size % 256))


def reply(payload_size):
    return struct.pack("<Q", payload_size) + b"\xab" * payload_size


# One token of a worker in the layer split as llama-server 0c1e570 sends it (sizes as measured on the wire), after
# the connection's start: HELLO, DEVICE_COUNT, a buffer, a weight set, then inputs, a recompute and the logits read.
REQUESTS = [
    ("HELLO", 24),
    ("DEVICE_COUNT", 0),
    ("ALLOC_BUFFER", 12),
    ("SET_TENSOR", RPC_TENSOR + 9 + 1000),
    ("GRAPH_COMPUTE", 4 + 4 + 8 * 3 + 4 + RPC_TENSOR * 3),
    ("SET_TENSOR", RPC_TENSOR + 9 + 4),
    ("GRAPH_RECOMPUTE", 4),
    ("GET_TENSOR", RPC_TENSOR + 16),
]
REPLIES = [28, 4, 16, 4096]  # HELLO, DEVICE_COUNT, ALLOC_BUFFER, GET_TENSOR: the answered ones, in order
UP = b"".join(request(name, size) for name, size in REQUESTS)
DOWN = b"".join(reply(size) for size in REPLIES)

EXPECTED = {
    "HELLO": (1, 9 + 24, 1, 8 + 28),
    "DEVICE_COUNT": (1, 9, 1, 8 + 4),
    "ALLOC_BUFFER": (1, 9 + 12, 1, 8 + 16),
    "SET_TENSOR": (2, 9 + RPC_TENSOR + 9 + 1000 + 9 + RPC_TENSOR + 9 + 4, 0, 0),
    "GRAPH_COMPUTE": (1, 9 + 4 + 4 + 8 * 3 + 4 + RPC_TENSOR * 3, 0, 0),
    "GRAPH_RECOMPUTE": (1, 9 + 4, 0, 0),
    "GET_TENSOR": (1, 9 + RPC_TENSOR + 16, 1, 8 + 4096),
}


def counts(meter):
    return {
        name: (s.requests, s.request_bytes, s.responses, s.response_bytes) for name, s in sorted(meter.commands.items())
    }


def test_the_command_table_is_the_pinned_enum():
    # ggml-rpc.cpp 0c1e570 (protocol 7.0.0): enum rpc_cmd, and the cases of rpc_serve_client that call send_msg.
    assert rpc.WIRE_COMMANDS.index("HELLO") == rpc.CMD_HELLO == 14
    assert rpc.WIRE_COMMANDS.index("GRAPH_COMPUTE") == 10
    assert rpc.WIRE_COMMANDS.index("GRAPH_RECOMPUTE") == 16
    assert len(rpc.WIRE_COMMANDS) == 18  # RPC_CMD_NONE (18) never goes on the wire
    unanswered = {rpc.COMMAND_NAMES[c] for c in rpc.COMMAND_NAMES if c not in rpc.ANSWERED_COMMANDS}
    assert unanswered == {
        "FREE_BUFFER",
        "BUFFER_CLEAR",
        "SET_TENSOR",
        "INIT_TENSOR",
        "GRAPH_COMPUTE",
        "GRAPH_RECOMPUTE",
        "MEMSET_TENSOR",
    }


def test_whole_stream_counts_requests_replies_and_bytes_per_command():
    meter = wire.RpcWireMeter()
    meter.to_worker(UP, 0.0)
    meter.from_worker(DOWN, 1.0)
    assert counts(meter) == EXPECTED
    assert meter.parsing and meter.note is None
    assert meter.bytes_to_worker == len(UP) == sum(v[1] for v in EXPECTED.values())
    assert meter.bytes_from_worker == len(DOWN) == sum(v[3] for v in EXPECTED.values())
    assert meter.as_dict()["awaiting_replies"] == 0


@pytest.mark.parametrize("direction", ["up", "down"])
def test_a_split_at_every_byte_boundary_counts_the_same(direction):
    """Two chunks cut at every offset (a header split included), then a chunk per byte: same counts each time."""
    for cut in range(1, len(UP if direction == "up" else DOWN)):
        meter = wire.RpcWireMeter()
        if direction == "up":
            meter.to_worker(UP[:cut], 0.0)
            meter.to_worker(UP[cut:], 0.0)
            meter.from_worker(DOWN, 1.0)
        else:
            meter.to_worker(UP, 0.0)
            meter.from_worker(DOWN[:cut], 1.0)
            meter.from_worker(DOWN[cut:], 1.0)
        assert counts(meter) == EXPECTED, cut
        assert meter.note is None, cut
    meter = wire.RpcWireMeter()
    for i in range(len(UP)):
        meter.to_worker(UP[i : i + 1], 0.0)
    for i in range(len(DOWN)):
        meter.from_worker(DOWN[i : i + 1], 1.0)
    assert counts(meter) == EXPECTED


def test_a_request_is_counted_once_whole_and_its_reply_is_paired_in_order():
    meter = wire.RpcWireMeter()
    hello = request("HELLO", 24)
    meter.to_worker(hello[:-1], 0.0)
    assert counts(meter) == {}  # its last byte has not gone yet
    meter.to_worker(hello[-1:], 0.5)
    assert counts(meter) == {"HELLO": (1, 33, 0, 0)}
    meter.to_worker(request("GRAPH_RECOMPUTE", 4) + request("GET_TENSOR", 312) + request("GET_TENSOR", 312), 1.0)
    meter.from_worker(reply(28), 0.75)
    meter.from_worker(reply(10)[:3], 4.0)  # the first byte of the first GET_TENSOR's reply
    meter.from_worker(reply(10)[3:] + reply(20), 5.0)
    assert counts(meter)["GET_TENSOR"] == (2, 2 * 321, 2, 18 + 28)
    stats = meter.commands["GET_TENSOR"]
    # Round trips: from the request's last byte to the reply's first byte.
    assert (stats.rtt_count, stats.rtt_min, stats.rtt_max, stats.rtt_total) == (2, 3.0, 4.0, 7.0)
    assert meter.commands["HELLO"].rtt_total == 0.25
    assert meter.commands["GRAPH_RECOMPUTE"].rtt_count == 0  # no reply, no round trip


def test_an_unknown_command_byte_stops_parsing_and_keeps_what_was_counted():
    meter = wire.RpcWireMeter()
    meter.to_worker(request("HELLO", 24) + request("DEVICE_COUNT", 0), 0.0)
    meter.to_worker(bytes([18]) + struct.pack("<Q", 4) + b"abcd" + request("GET_TENSOR", 312), 0.0)
    assert not meter.parsing
    assert "unknown command byte 18" in meter.note
    assert counts(meter) == {"DEVICE_COUNT": (1, 9, 0, 0), "HELLO": (1, 33, 0, 0)}
    meter.from_worker(b"\xff" * 100, 1.0)  # nothing parsed any more, bytes still counted
    assert meter.bytes_to_worker == 33 + 9 + 13 + 9 + 312
    assert meter.bytes_from_worker == 100
    assert meter.as_dict()["note"] == meter.note


def test_a_stream_that_does_not_start_with_hello_is_not_parsed():
    meter = wire.RpcWireMeter()
    meter.to_worker(b"GET / HTTP/1.1\r\n\r\n", 0.0)  # 'G' is 71: unknown
    assert "unknown command byte 71" in meter.note
    meter = wire.RpcWireMeter()
    meter.to_worker(request("DEVICE_COUNT", 0), 0.0)
    assert "not HELLO" in meter.note
    assert counts(meter) == {}


def test_a_reply_nobody_asked_for_stops_parsing():
    meter = wire.RpcWireMeter()
    meter.to_worker(request("HELLO", 24) + request("SET_TENSOR", 400), 0.0)
    meter.from_worker(reply(28) + reply(1), 1.0)
    assert "no answered request" in meter.note
    assert counts(meter)["HELLO"] == (1, 33, 1, 36)


def test_a_huge_declared_payload_is_skipped_not_buffered():
    meter = wire.RpcWireMeter()
    meter.to_worker(request("HELLO", 24), 0.0)
    meter.to_worker(rpc.REQUEST_HEADER.pack(CMD["SET_TENSOR"], 1 << 40) + b"\0" * 65536, 0.0)
    assert meter.parsing and counts(meter) == {"HELLO": (1, 33, 0, 0)}
    assert meter._requests.remaining == (1 << 40) - 65536


def test_difference_and_totals_of_two_snapshots():
    meter = wire.RpcWireMeter()
    meter.to_worker(UP[: len(UP) - len(request("GET_TENSOR", 312))], 0.0)
    before = meter.as_dict()["commands"]
    meter.to_worker(request("GET_TENSOR", 312) + request("GRAPH_RECOMPUTE", 4), 1.0)
    meter.from_worker(DOWN, 2.0)
    after = meter.as_dict()["commands"]
    delta = wire.difference(after, before)
    assert set(delta) == {"HELLO", "DEVICE_COUNT", "ALLOC_BUFFER", "GET_TENSOR", "GRAPH_RECOMPUTE"}
    assert delta["GET_TENSOR"]["requests"] == 1 and delta["GET_TENSOR"]["response_bytes"] == 4104
    assert delta["GRAPH_RECOMPUTE"] == {
        "requests": 1,
        "request_bytes": 13,
        "responses": 0,
        "response_bytes": 0,
        "rtt_count": 0,
        "rtt_total_s": 0.0,
    }
    assert wire.totals(after)["request_bytes"] == len(UP) + 13
