# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A userspace TCP proxy that delays every byte by a fixed time in each direction (netem is not in every kernel).

One listener per route LISTEN_PORT=TARGET_HOST:TARGET_PORT; each accepted connection opens one to the target and
two pumps copy data, each chunk written delay seconds after it was read, in order. The round trip through the
proxy is therefore the link's own plus 2 * delay; bandwidth is not limited (cap it with tc tbf).

Run as a script (the benchmark module writes this file to the host and starts it as a transient systemd unit)::

    python3 _delay_proxy.py --listen 127.0.0.1 --delay-ms 5 6001=10.0.0.2:50052 6002=10.0.0.3:50052

``--report`` prints a line on stdout when the listeners are up (``listening``), when a connection opens
(``open N``) and when both its directions have ended (``closed N: X bytes to target, Y bytes back``): a test counts
what crossed the link, and knows every connection has ended when each ``open`` has its ``closed``. N counts the
connections of one listener (two routes both have an ``open 1``).

``--hold-file PATH`` keeps, every half second, ``{"delay_s", "chunks", "held_seconds", "bytes", "cpu_s"}`` in PATH:
the chunks written so far in both directions of every connection, the seconds they were held in all, their bytes, and
the CPU seconds the proxy has used. The delay asked is a floor; a timer that fires late, or a busy machine, holds a
chunk longer, and the emulated round trip is twice the mean hold (the benchmark's performance model takes it from
there). The proxy is one Python process on the coordinator's host: every byte it relays costs its CPU, so a large
reply (the logits of several verified tokens) crosses it at bytes / CPU seconds at best, which the model charges on
top of the delay.

``--rpc-stats`` (implies ``--report``) also reads each connection as ggml RPC (``_rpc_wire``: requests and bytes per
command each way, and the worker side's wait for each reply) and prints machine-readable lines, each a word and one
JSON object:

* ``rpc {...}`` after a connection's ``closed`` line: that connection's counters;
* ``rpc-snapshot {"seq": K, "connections": [...]}`` on SIGUSR1: the counters so far of every connection the proxy has
  had, open or closed (cumulative: per-token figures are the difference of two snapshots).

A connection's object: ``listen_port``, ``connection`` (N), ``target``, ``open`` (bool) and the counters of
``_rpc_wire.RpcWireMeter.as_dict`` (``bytes_to_worker``, ``bytes_from_worker``, ``parsing``, ``note``,
``commands: {NAME: {requests, request_bytes, responses, response_bytes, rtt_count, rtt_total_s, rtt_min_s,
rtt_max_s}}``). Request bytes count the 9-byte header, reply bytes the 8-byte one. The meter sees a reference to
each chunk the pumps forward (requests as they are written to the worker, replies as they are read from it) and
never changes, holds or delays one (it runs after the chunk is passed on); a stream it cannot parse only stops its
counting. Without ``--rpc-stats`` SIGUSR1 is not handled (its default action ends the process).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import os
import signal
import socket
import sys
import time

try:
    from ansible_collections.llamarpc.cluster.plugins.module_utils.rpc import _rpc_wire
except ImportError:  # run as a script beside its copies (the benchmark writes them to the host)
    import _rpc_wire  # type: ignore[no-redef]

CHUNK = 1 << 16
#: How often ``--hold-file`` is rewritten.
HOLD_FILE_SECONDS = 0.5


def parse_route(text):
    """``"6001=10.0.0.2:50052"`` -> (6001, "10.0.0.2", 50052)."""
    try:
        listen, target = text.split("=", 1)
        host, port = target.rsplit(":", 1)
        return int(listen), host, int(port)
    except ValueError as exc:
        raise ValueError(f"invalid route {text!r}: use LISTEN_PORT=HOST:PORT") from exc


class HoldTally:
    """What the delay lines really held: chunks written and the seconds each was held in all (asked: ``delay``; more
    when the proxy's timer or a busy machine wakes it late). The emulated round trip is twice the mean hold."""

    def __init__(self, delay, cpu=time.process_time):
        self.delay = float(delay)
        self.chunks = 0
        self.held_seconds = 0.0
        self.bytes = 0
        self.cpu = cpu

    def as_dict(self):
        return {
            "delay_s": self.delay,
            "chunks": self.chunks,
            "held_seconds": self.held_seconds,
            "bytes": self.bytes,
            "cpu_s": self.cpu(),
        }


class DelayLine:
    """FIFO of (due time, data): what a pump has read and may write once due; ``tally`` (a HoldTally) counts how long
    each chunk was really held."""

    def __init__(self, delay, tally=None):
        self.delay = float(delay)
        self.items = collections.deque()
        self.tally = tally

    def push(self, data, now):
        self.items.append((now + self.delay, data))

    def pop_due(self, now):
        """Every chunk due at ``now``, joined, and the wait until the next one (None if empty)."""
        out = []
        while self.items and self.items[0][0] <= now:
            due, data = self.items.popleft()
            out.append(data)
            if self.tally is not None:
                self.tally.chunks += 1
                self.tally.held_seconds += now - due + self.delay
                self.tally.bytes += len(data)
        wait = None if not self.items else max(0.0, self.items[0][0] - now)
        return b"".join(out), wait


def write_hold_file(path, tally):
    """The tally as JSON in ``path``, replaced at once (a reader never sees half a file)."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="ascii") as handle:
        json.dump(tally.as_dict(), handle)
    os.replace(temporary, path)


def _observe(observer, data, now):
    """Hand a forwarded chunk to an observer; nothing it does may stop the forwarding."""
    with contextlib.suppress(Exception):  # the stream matters more than its statistics
        observer(data, now)


async def _pump(reader, writer, delay, on_read=None, on_write=None, tally=None):
    """Copy ``reader`` to ``writer`` ``delay`` seconds late until EOF; returns the bytes written. ``on_read`` and
    ``on_write`` (``(data, monotonic time)``) see each chunk as it is read and as it is written, with the time of
    that moment, but run after it (``call_soon``: first-in first-out, after the write the chunk's arrival woke), so
    that they never hold a chunk back."""
    loop = asyncio.get_running_loop()
    line = DelayLine(delay, tally)
    sent = 0
    event = asyncio.Event()
    eof = False

    async def read_side():
        nonlocal eof
        while True:
            data = await reader.read(CHUNK)
            if not data:
                eof = True
                event.set()
                return
            now = time.monotonic()
            line.push(data, now)
            event.set()
            if on_read is not None:
                loop.call_soon(_observe, on_read, data, now)

    task = asyncio.ensure_future(read_side())
    try:
        while True:
            # Clear before looking: a chunk read while this pump awaits drain() sets the event again (no lost wakeup).
            event.clear()
            now = time.monotonic()
            data, wait = line.pop_due(now)
            if data:
                writer.write(data)
                if on_write is not None:
                    loop.call_soon(_observe, on_write, data, now)
                await writer.drain()
                sent += len(data)
                continue
            if wait is None:
                if eof:
                    break
                await event.wait()
            else:
                await asyncio.sleep(wait)
    finally:
        task.cancel()
        with contextlib.suppress(OSError):
            writer.close()
    return sent


def _say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class RpcStats:
    """The RPC meters of every connection the proxy has had (``--rpc-stats``), for the ``rpc`` lines."""

    def __init__(self):
        self.connections = []
        self.seq = 0

    def open(self, route, number):
        port, host, target_port = route
        entry = {"listen_port": port, "connection": number, "target": f"{host}:{target_port}", "open": True}
        entry["meter"] = _rpc_wire.RpcWireMeter()
        self.connections.append(entry)
        return entry

    @staticmethod
    def record(entry):
        out = {key: value for key, value in entry.items() if key != "meter"}
        out.update(entry["meter"].as_dict())
        return out

    def closed_line(self, entry):
        entry["open"] = False
        return "rpc " + json.dumps(self.record(entry), sort_keys=True)

    def snapshot_line(self):
        self.seq += 1
        records = [self.record(entry) for entry in self.connections]
        return "rpc-snapshot " + json.dumps({"seq": self.seq, "connections": records}, sort_keys=True)


async def _serve(route, listen_host, delay, report=False, ready=None, stats=None, tally=None):
    port, host, target_port = route
    numbers = itertools.count(1)

    async def handle(client_reader, client_writer):
        number = next(numbers)
        if report:
            _say(f"open {number}")
        entry = stats.open(route, number) if stats is not None else None
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, target_port)
        except OSError:
            client_writer.close()
            if report:
                _say(f"closed {number}: 0 bytes to target, 0 bytes back (target refused)")
            if entry is not None:
                entry["meter"].note = "target refused"
                _say(stats.closed_line(entry))
            return
        for w in (client_writer, upstream_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        to_worker = from_worker = None
        if entry is not None:
            to_worker, from_worker = entry["meter"].to_worker, entry["meter"].from_worker
        up, down = await asyncio.gather(
            _pump(client_reader, upstream_writer, delay, on_write=to_worker, tally=tally),
            _pump(upstream_reader, client_writer, delay, on_read=from_worker, tally=tally),
            return_exceptions=True,
        )
        if report:
            counts = [value if isinstance(value, int) else f"? ({value!r})" for value in (up, down)]
            _say(f"closed {number}: {counts[0]} bytes to target, {counts[1]} bytes back")
        if entry is not None:
            _say(stats.closed_line(entry))

    server = await asyncio.start_server(handle, listen_host, port)
    if ready is not None:
        ready.release()
    async with server:
        await server.serve_forever()


async def _keep_hold_file(path, tally, every=HOLD_FILE_SECONDS):
    while True:
        write_hold_file(path, tally)
        await asyncio.sleep(every)


async def _main(routes, listen_host, delay, report=False, rpc_stats=False, hold_file=None):
    ready = asyncio.Semaphore(0)
    stats = RpcStats() if rpc_stats else None
    if stats is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, lambda: _say(stats.snapshot_line()))
    tally = HoldTally(delay)
    background = [_keep_hold_file(hold_file, tally)] if hold_file else []

    async def announce():
        for _route in routes:
            await ready.acquire()
        if report:
            _say("listening")

    await asyncio.gather(
        announce(), *background, *(_serve(r, listen_host, delay, report, ready, stats, tally) for r in routes)
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay (round trip adds twice this)")
    parser.add_argument("--report", action="store_true", help="print listening, open and closed lines (bytes)")
    parser.add_argument(
        "--rpc-stats",
        action="store_true",
        help="count ggml RPC requests per command (rpc lines at close, rpc-snapshot on SIGUSR1); implies --report",
    )
    parser.add_argument(
        "--hold-file",
        help=f"keep the chunks written and the seconds they were held in all in this JSON file (every "
        f"{HOLD_FILE_SECONDS:g} s)",
    )
    parser.add_argument("routes", nargs="+", help="LISTEN_PORT=HOST:PORT")
    args = parser.parse_args(argv)
    routes = [parse_route(r) for r in args.routes]
    report = args.report or args.rpc_stats
    asyncio.run(_main(routes, args.listen, args.delay_ms / 1000.0, report, args.rpc_stats, args.hold_file))


if __name__ == "__main__":
    main()
