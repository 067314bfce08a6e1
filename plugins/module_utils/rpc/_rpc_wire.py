# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Counts what crosses one ggml RPC connection: requests and bytes per command, and the wait for each reply.

A passive observer for a proxy (``_delay_proxy --rpc-stats``): it is handed the bytes the proxy forwards, in order,
one chunk at a time, and never changes or holds them.  Chunks may cut the stream anywhere, a header included.

The framing is ``_rpc_protocol``'s (protocol 7.0.0, ``ggml-rpc.cpp``)::

    request : u8 cmd | u64 size | payload[size]      (client -> worker)
    reply   : u64 size | payload[size]               (worker -> client, only for ANSWERED_COMMANDS)

HELLO is framed like any request; what is special about it is that the worker reads it first and alone: the first
command of a connection must be HELLO (else the worker drops the connection), a later HELLO ends the connection, and
protocol 4+ sends 24 payload bytes (1-3: none).  A stream whose first command is not HELLO, or that carries a command
byte the pinned enum does not have, is not (or no longer) understood: parsing stops for that connection with a note,
and what was counted so far stays.  Replies carry no command: the worker serves one request after another, so the
n-th reply answers the n-th answered request, which is how a reply is paired with its request.

Round trip as the proxy sees it: from the moment the request's last byte is handed to the worker's side to the moment
the first byte of its reply comes back from it.  A proxy's added delay is outside it (it is known: twice
``--delay-ms``).  Unanswered commands (GRAPH_COMPUTE above all) are queued on the worker: a GET_TENSOR sent right after
a GRAPH_COMPUTE waits for that computation, so its round trip includes it.

Standard library only: this file runs on managed hosts, beside the proxy (the benchmark writes both there).
"""

from __future__ import annotations

import collections
import time

try:
    from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_protocol as rpc
except ImportError:  # run as a script beside its copies (the benchmark writes them to the host)
    import _rpc_protocol as rpc  # type: ignore[no-redef]


class CommandStats:
    """Counters of one command on one connection."""

    __slots__ = (
        "request_bytes",
        "requests",
        "response_bytes",
        "responses",
        "rtt_count",
        "rtt_max",
        "rtt_min",
        "rtt_total",
    )

    def __init__(self):
        self.requests = 0
        self.request_bytes = 0
        self.responses = 0
        self.response_bytes = 0
        self.rtt_count = 0
        self.rtt_total = 0.0
        self.rtt_min = None
        self.rtt_max = None

    def add_rtt(self, seconds):
        self.rtt_count += 1
        self.rtt_total += seconds
        self.rtt_min = seconds if self.rtt_min is None else min(self.rtt_min, seconds)
        self.rtt_max = seconds if self.rtt_max is None else max(self.rtt_max, seconds)

    def as_dict(self):
        return {
            "requests": self.requests,
            "request_bytes": self.request_bytes,
            "responses": self.responses,
            "response_bytes": self.response_bytes,
            "rtt_count": self.rtt_count,
            "rtt_total_s": self.rtt_total,
            "rtt_min_s": self.rtt_min,
            "rtt_max_s": self.rtt_max,
        }


class _Frames:
    """Cuts one direction of the stream into frames of ``header`` (a struct whose last field is the u64 size) and a
    payload it skips without keeping.  ``feed`` returns the events of the chunk, in order:
    ``("start", None)`` at a frame's first byte, ``("header", fields)`` once its header is whole and
    ``("end", frame_bytes)`` once its payload is."""

    def __init__(self, header):
        self.header = header
        self.buffer = bytearray()
        self.remaining = None  # payload bytes still to skip, None while reading a header
        self.frame_bytes = 0

    def feed(self, data):
        events = []
        view = memoryview(data)
        pos, end = 0, len(view)
        while pos < end:
            if self.remaining is None:
                if not self.buffer:
                    events.append(("start", None))
                take = min(self.header.size - len(self.buffer), end - pos)
                self.buffer += view[pos : pos + take]
                pos += take
                if len(self.buffer) < self.header.size:
                    break
                fields = self.header.unpack(bytes(self.buffer))
                self.buffer.clear()
                self.remaining = fields[-1]
                self.frame_bytes = self.header.size + fields[-1]
                events.append(("header", fields))
            else:
                take = min(self.remaining, end - pos)
                self.remaining -= take
                pos += take
            if self.remaining == 0:
                self.remaining = None
                events.append(("end", self.frame_bytes))
        return events


class RpcWireMeter:
    """Requests, replies, bytes and round trips of one RPC connection, fed with the bytes a proxy forwards.

    ``to_worker(data, now)`` with what goes from the client to the worker (as it is written to the worker),
    ``from_worker(data, now)`` with what comes back (as it is read from the worker); ``now`` in seconds of a monotonic
    clock.  Neither raises for anything a peer sends: a stream it does not understand stops the parsing (``note``
    says why) and only the byte totals go on.
    """

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.commands = {}
        self.bytes_to_worker = 0
        self.bytes_from_worker = 0
        self.note = None
        self._requests = _Frames(rpc.REQUEST_HEADER)
        self._replies = _Frames(rpc.REPLY_HEADER)
        self._request = None  # (command byte, name) of the request being read
        self._awaiting = collections.deque()  # (command name, time its last byte went to the worker)
        self._answering = None  # the command whose reply is being read
        self._seen = 0  # requests whose header was read

    @property
    def parsing(self):
        return self.note is None

    def _stats(self, name):
        stats = self.commands.get(name)
        if stats is None:
            stats = self.commands[name] = CommandStats()
        return stats

    def _stop(self, note):
        if self.note is None:
            self.note = note

    def to_worker(self, data, now=None):
        self.bytes_to_worker += len(data)
        if self.note is not None:
            return
        now = self.clock() if now is None else now
        try:
            for kind, value in self._requests.feed(data):
                if kind == "header":
                    cmd, size = value
                    name = rpc.COMMAND_NAMES.get(cmd)
                    self._seen += 1
                    if name is None:
                        self._stop(f"request {self._seen}: unknown command byte {cmd} (size {size}): parsing stopped")
                        return
                    if self._seen == 1 and cmd != rpc.CMD_HELLO:
                        self._stop(f"request 1 is {name}, not HELLO: not an RPC client's stream, parsing stopped")
                        return
                    self._request = (cmd, name)
                elif kind == "end":
                    cmd, name = self._request
                    stats = self._stats(name)
                    stats.requests += 1
                    stats.request_bytes += value
                    if cmd in rpc.ANSWERED_COMMANDS:
                        self._awaiting.append((name, now))
        except Exception as exc:  # noqa: BLE001 - an observer must never break the stream it watches
            self._stop(f"parser error: {exc!r}: parsing stopped")

    def from_worker(self, data, now=None):
        self.bytes_from_worker += len(data)
        if self.note is not None:
            return
        now = self.clock() if now is None else now
        try:
            for kind, value in self._replies.feed(data):
                if kind == "start":
                    if not self._awaiting:
                        self._stop("a reply came with no answered request waiting for one: parsing stopped")
                        return
                    name, sent = self._awaiting.popleft()
                    self._answering = name
                    self._stats(name).add_rtt(now - sent)
                elif kind == "end":
                    stats = self._stats(self._answering)
                    stats.responses += 1
                    stats.response_bytes += value
        except Exception as exc:  # noqa: BLE001 - an observer must never break the stream it watches
            self._stop(f"parser error: {exc!r}: parsing stopped")

    def as_dict(self):
        return {
            "bytes_to_worker": self.bytes_to_worker,
            "bytes_from_worker": self.bytes_from_worker,
            "parsing": self.parsing,
            "note": self.note,
            "awaiting_replies": len(self._awaiting),
            "commands": {name: self.commands[name].as_dict() for name in sorted(self.commands)},
        }


def totals(snapshot_commands):
    """Sum of every command's counters in an ``as_dict()["commands"]`` mapping (round-trip min/max left out)."""
    keys = ("requests", "request_bytes", "responses", "response_bytes", "rtt_count", "rtt_total_s")
    return {key: sum(stats[key] for stats in snapshot_commands.values()) for key in keys}


def difference(after, before):
    """Per-command counters of ``after`` minus ``before`` (two ``as_dict()["commands"]`` mappings of one connection,
    ``before`` taken first): what crossed between the two snapshots.  Commands with no new request or reply are
    left out; round-trip min/max cannot be differenced and are left out too."""
    keys = ("requests", "request_bytes", "responses", "response_bytes", "rtt_count", "rtt_total_s")
    out = {}
    for name, stats in after.items():
        prior = before.get(name, {})
        delta = {key: stats[key] - prior.get(key, 0) for key in keys}
        if delta["requests"] or delta["responses"]:
            out[name] = delta
    return out
