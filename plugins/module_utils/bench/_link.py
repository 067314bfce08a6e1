# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Link figures for the benchmark: a file's bytes over one plain TCP connection (the baseline an SSHFS mount is
compared with), a file read through a path (an SSHFS mount, a local disk), memory bandwidth of a host."""

from __future__ import annotations

import os
import socket
import tempfile
import time

MB = 1000 * 1000
BLOCK = 1 << 20


class LinkError(Exception):
    """A measurement that could not be made (no peer, a refused connection, a timeout)."""


def rate(nbytes, seconds):
    """MB/s (10^6 bytes) of ``nbytes`` moved in ``seconds``; None when nothing was timed."""
    return nbytes / seconds / MB if seconds and seconds > 0 else None


def serve_file(path, port, bind, timeout=60.0, allowed=None, ready=None):
    """Accept one connection on ``bind``:``port`` within ``timeout`` seconds (only from an address in ``allowed``
    when given; others are closed), send ``path`` with sendfile and close. ``ready`` (a callable) is called once
    listening. Returns ``{bytes, seconds, mb_per_s, peer}``."""
    size = os.path.getsize(path)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    deadline = time.monotonic() + timeout
    try:
        server.bind((bind, int(port)))
        server.listen(1)
        if ready:
            ready()
        while True:
            server.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, peer = server.accept()
            except socket.timeout:  # noqa: UP041 - not TimeoutError before Python 3.10
                raise LinkError(f"no reader connected to {bind}:{port} within {timeout:.0f} s") from None
            if allowed and peer[0] not in allowed:
                conn.close()
                continue
            break
        with conn, open(path, "rb") as handle:
            # A socket with a timeout is non-blocking underneath: socket.sendfile waits for room, os.sendfile alone
            # fails with EAGAIN as soon as a slow link fills the send buffer (seen on the 100 Mbit/s bench link).
            conn.settimeout(max(1.0, deadline - time.monotonic()))
            start = time.monotonic()
            sent = conn.sendfile(handle, 0, size)
            conn.shutdown(socket.SHUT_WR)
            seconds = time.monotonic() - start
            return {"bytes": sent, "seconds": seconds, "mb_per_s": rate(sent, seconds), "peer": peer[0]}
    finally:
        server.close()


def serve_zeros(size, port, bind, timeout=60.0, allowed=None, ready=None):
    """:func:`serve_file` of ``size`` zero bytes (a sparse temporary file, removed afterwards): a link's throughput
    from a host that holds no file worth sending."""
    with tempfile.NamedTemporaryFile(prefix="llamarpc-link-") as handle:
        handle.truncate(int(size))
        handle.flush()
        return serve_file(handle.name, port, bind, timeout, allowed, ready)


def read_stream(host, port, timeout=60.0, clock=time.monotonic, sleep=time.sleep):
    """Connect to ``host``:``port`` (retrying while nothing listens yet, until ``timeout``) and read until the peer
    closes. Returns ``{bytes, seconds, mb_per_s}``; the clock starts at the connect."""
    deadline = clock() + timeout
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=max(0.1, deadline - clock()))
            break
        except ConnectionRefusedError:
            if clock() >= deadline:
                raise LinkError(f"{host}:{port} refused every connection for {timeout:.0f} s") from None
            sleep(0.2)
        except OSError as exc:
            raise LinkError(f"cannot connect to {host}:{port}: {exc}") from None
    start = clock()
    received = 0
    with conn:
        conn.settimeout(max(1.0, deadline - start))
        buffer = bytearray(BLOCK)
        while True:
            got = conn.recv_into(buffer)
            if not got:
                break
            received += got
    seconds = clock() - start
    return {"bytes": received, "seconds": seconds, "mb_per_s": rate(received, seconds)}


def read_file(path, limit=None, drop_cache=False):
    """Read ``path`` (up to ``limit`` bytes) in 1 MiB blocks. Returns ``{bytes, seconds, mb_per_s}``.

    ``drop_cache`` first asks the kernel to forget the file's cached pages (posix_fadvise DONTNEED), so that a file
    on an SSHFS mount really crosses the link again."""
    received = 0
    with open(path, "rb", buffering=0) as handle:
        if drop_cache:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        start = time.monotonic()
        buffer = bytearray(BLOCK)
        while limit is None or received < limit:
            got = handle.readinto(buffer)
            if not got:
                break
            received += got
    seconds = time.monotonic() - start
    return {"bytes": received, "seconds": seconds, "mb_per_s": rate(received, seconds)}


def memory_bandwidth(size_mb=64, rounds=5):
    """Single-thread memory copy bandwidth in MB/s (best of ``rounds`` copies of ``size_mb`` MB, counting the read
    and the write). What one llama.cpp thread can stream weights at, roughly: the performance model's input."""
    size = int(size_mb * MB)
    source = bytearray(size)
    best = None
    for _round in range(max(1, rounds)):
        start = time.perf_counter()
        copy = bytes(source)
        seconds = time.perf_counter() - start
        del copy
        best = seconds if best is None or seconds < best else best
    return {"bytes": 2 * size, "seconds": best, "mb_per_s": rate(2 * size, best)}
