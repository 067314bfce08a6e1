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
what crossed the link, and knows every connection has ended when each ``open`` has its ``closed``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import socket
import sys
import time

CHUNK = 1 << 16


def parse_route(text):
    """``"6001=10.0.0.2:50052"`` -> (6001, "10.0.0.2", 50052)."""
    try:
        listen, target = text.split("=", 1)
        host, port = target.rsplit(":", 1)
        return int(listen), host, int(port)
    except ValueError as exc:
        raise ValueError(f"invalid route {text!r}: use LISTEN_PORT=HOST:PORT") from exc


class DelayLine:
    """FIFO of (due time, data): what a pump has read and may write once due."""

    def __init__(self, delay):
        self.delay = float(delay)
        self.items = collections.deque()

    def push(self, data, now):
        self.items.append((now + self.delay, data))

    def pop_due(self, now):
        """Every chunk due at ``now``, joined, and the wait until the next one (None if empty)."""
        out = []
        while self.items and self.items[0][0] <= now:
            out.append(self.items.popleft()[1])
        wait = None if not self.items else max(0.0, self.items[0][0] - now)
        return b"".join(out), wait


async def _pump(reader, writer, delay):
    """Copy ``reader`` to ``writer`` ``delay`` seconds late until EOF; returns the bytes written."""
    line = DelayLine(delay)
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
            line.push(data, time.monotonic())
            event.set()

    task = asyncio.ensure_future(read_side())
    try:
        while True:
            # Clear before looking: a chunk read while this pump awaits drain() sets the event again (no lost wakeup).
            event.clear()
            data, wait = line.pop_due(time.monotonic())
            if data:
                writer.write(data)
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


async def _serve(route, listen_host, delay, report=False, ready=None):
    port, host, target_port = route
    numbers = itertools.count(1)

    async def handle(client_reader, client_writer):
        number = next(numbers)
        if report:
            _say(f"open {number}")
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, target_port)
        except OSError:
            client_writer.close()
            if report:
                _say(f"closed {number}: 0 bytes to target, 0 bytes back (target refused)")
            return
        for w in (client_writer, upstream_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up, down = await asyncio.gather(
            _pump(client_reader, upstream_writer, delay),
            _pump(upstream_reader, client_writer, delay),
            return_exceptions=True,
        )
        if report:
            counts = [value if isinstance(value, int) else f"? ({value!r})" for value in (up, down)]
            _say(f"closed {number}: {counts[0]} bytes to target, {counts[1]} bytes back")

    server = await asyncio.start_server(handle, listen_host, port)
    if ready is not None:
        ready.release()
    async with server:
        await server.serve_forever()


async def _main(routes, listen_host, delay, report=False):
    ready = asyncio.Semaphore(0)

    async def announce():
        for _route in routes:
            await ready.acquire()
        if report:
            _say("listening")

    await asyncio.gather(announce(), *(_serve(r, listen_host, delay, report, ready) for r in routes))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay (round trip adds twice this)")
    parser.add_argument("--report", action="store_true", help="print listening, open and closed lines (bytes)")
    parser.add_argument("routes", nargs="+", help="LISTEN_PORT=HOST:PORT")
    args = parser.parse_args(argv)
    asyncio.run(_main([parse_route(r) for r in args.routes], args.listen, args.delay_ms / 1000.0, args.report))


if __name__ == "__main__":
    main()
