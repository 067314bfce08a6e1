# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Byte ranges of a file on another host, over SFTP.

The SFTP protocol, version 3 (the one OpenSSH's sftp-server speaks), through a child process: ``ssh ... -s
USER@HOST sftp`` to a host's read-only shard export (the ``sshfs_shard_export`` role), or a local ``sftp-server`` in
the tests. Only what reading needs: INIT, OPEN, READ (several outstanding at once), CLOSE. The bytes are written to
a descriptor at their place in the range, so a server that answers reads out of order writes nothing wrong.
"""

from __future__ import annotations

import contextlib
import os
import select
import struct
import subprocess
import tempfile

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._sshfs import build_options

FXP_INIT, FXP_VERSION, FXP_OPEN, FXP_CLOSE, FXP_READ = 1, 2, 3, 4, 5
FXP_STATUS, FXP_HANDLE, FXP_DATA = 101, 102, 103
FXF_READ = 0x1
FX_OK, FX_EOF = 0, 1
STATUS_NAMES = {
    2: "no such file",
    3: "permission denied",
    4: "failure",
    5: "bad message",
    6: "no connection",
    7: "connection lost",
    8: "operation unsupported",
}
#: Bytes asked for by one READ (OpenSSH's sftp-server answers up to 255 KiB) and READs outstanding at once: 64 KiB x
#: 16 keeps a 1 Gbit/s link with a 4 ms round trip busy.
READ_BLOCK = 64 * 1024
WINDOW = 16
#: The largest reply accepted (a DATA of READ_BLOCK and its header, with room): a longer length is a broken stream.
MAX_REPLY = READ_BLOCK + 1024
#: Seconds without a byte from the server before a read is given up.
IDLE_TIMEOUT = 60


class SftpError(Exception):
    """The session failed: it could not start, the server refused a request, or the stream broke or went silent."""


def ssh_argv(host, user, *, identity_file, known_hosts_file, port=22):
    """``ssh`` asking ``USER@HOST`` for its sftp subsystem: key only, the host's key pinned, never a prompt."""
    options = build_options(
        read_only=False, reconnect=False, identity_file=identity_file, known_hosts_file=known_hosts_file
    )
    argv = ["ssh"]
    for option in options:
        argv += ["-o", option]
    return [*argv, "-o", "ConnectTimeout=30", "-p", str(int(port)), "-s", f"{user}@{host}", "sftp"]


def _string(data):
    return struct.pack(">I", len(data)) + data


def _take_string(body, at):
    (length,) = struct.unpack_from(">I", body, at)
    end = at + 4 + length
    if end > len(body):
        raise SftpError("a reply's string runs past its end")
    return body[at + 4 : end], end


class Session:
    """One SFTP session over a child process's stdin and stdout (a context manager: the child is ended on exit)."""

    def __init__(self, argv, idle_timeout=IDLE_TIMEOUT):
        self.idle_timeout = idle_timeout
        self.next_id = 0
        self.buffer = b""
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close(); a pipe nobody reads could fill up
        try:
            # A child spoken to while it runs (run_command only returns once it has ended): Popen is the point here.
            self.child = subprocess.Popen(  # noqa: S603 - argv list, no shell  # pylint: disable=ansible-bad-function
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr
            )
        except OSError as exc:
            self.stderr.close()
            raise SftpError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        try:
            self._send(FXP_INIT, struct.pack(">I", 3), with_id=False)
            kind, body = self._receive()
            if kind != FXP_VERSION or len(body) < 4 or struct.unpack_from(">I", body)[0] != 3:
                raise SftpError(f"the server does not speak SFTP version 3 (reply type {kind})")
        except SftpError:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """End the child: close its stdin (ssh and sftp-server end on that), kill it if it lingers (every reply this
        session waited for has come by now)."""
        if self.child.stdin and not self.child.stdin.closed:
            with contextlib.suppress(OSError):
                self.child.stdin.close()
        try:
            self.child.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        self.child.stdout.close()
        self.stderr.close()

    def _why(self):
        """What the child said on stderr, once it has ended (ssh's own message: host key, permission, refused)."""
        if self.child.poll() is None:
            return ""
        try:
            self.stderr.seek(0)
            text = self.stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""
        return f": {text.splitlines()[-1]}" if text else f" (exit {self.child.returncode})"

    def _send(self, kind, payload, with_id=True):
        request_id = None
        if with_id:
            request_id = self.next_id
            self.next_id = (self.next_id + 1) & 0xFFFFFFFF
            payload = struct.pack(">I", request_id) + payload
        packet = struct.pack(">IB", len(payload) + 1, kind) + payload
        try:
            self.child.stdin.write(packet)
            self.child.stdin.flush()
        except (OSError, ValueError):
            raise SftpError(f"the SFTP session ended{self._wait_why()}") from None
        return request_id

    def _wait_why(self):
        try:
            self.child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return ""
        return self._why()

    def _fill(self, count):
        """Read until the buffer holds ``count`` bytes; IDLE_TIMEOUT seconds without a byte is an error."""
        descriptor = self.child.stdout.fileno()
        while len(self.buffer) < count:
            ready, _w, _x = select.select([descriptor], [], [], self.idle_timeout)
            if not ready:
                raise SftpError(f"no answer from the SFTP server for {self.idle_timeout} s")
            block = os.read(descriptor, max(count - len(self.buffer), 65536))
            if not block:
                raise SftpError(f"the SFTP session ended{self._wait_why()}")
            self.buffer += block

    def _receive(self):
        """The next reply: (type, body after the type byte)."""
        self._fill(4)
        (length,) = struct.unpack_from(">I", self.buffer)
        if not 1 <= length <= MAX_REPLY:
            raise SftpError(f"a reply of {length} bytes: not an SFTP stream")
        self._fill(4 + length)
        packet, self.buffer = self.buffer[4 : 4 + length], self.buffer[4 + length :]
        return packet[0], packet[1:]

    def _reply(self, expected):
        """The next reply, which must carry an id: (type, id, rest); a STATUS other than OK or EOF raises."""
        kind, body = self._receive()
        if len(body) < 4:
            raise SftpError(f"a reply of type {kind} without a request id")
        (request_id,) = struct.unpack_from(">I", body)
        rest = body[4:]
        if kind == FXP_STATUS:
            code = struct.unpack_from(">I", rest)[0] if len(rest) >= 4 else 4
            if code not in (FX_OK, FX_EOF):
                message = _take_string(rest, 4)[0].decode(errors="replace") if len(rest) >= 8 else ""
                raise SftpError(f"{STATUS_NAMES.get(code, f'status {code}')}{f' ({message})' if message else ''}")
        elif kind not in expected:
            raise SftpError(f"an unexpected reply of type {kind}")
        return kind, request_id, rest

    def open(self, path):
        """A handle of ``path``, opened for reading."""
        self._send(FXP_OPEN, _string(path.encode()) + struct.pack(">II", FXF_READ, 0))
        kind, _id, rest = self._reply({FXP_HANDLE})
        if kind != FXP_HANDLE:
            raise SftpError(f"{path}: no handle (end of file)")
        return _take_string(rest, 0)[0]

    def release(self, handle):
        self._send(FXP_CLOSE, _string(handle))
        self._reply(set())

    def read_range(self, path, offset, size, descriptor):
        """Write exactly ``size`` bytes of ``path`` from ``offset`` to ``descriptor``, each at its place from the
        descriptor's position 0, by READs WINDOW at a time; a short answer asks again for what it left out. Returns
        the bytes received. A file that ends before the range does raises SftpError; after any SftpError the session
        may hold unanswered requests and is good only for closing."""
        handle = self.open(path)
        received = self._read(handle, path, offset, size, descriptor)
        self.release(handle)
        return received

    def _read(self, handle, path, offset, size, descriptor):
        pending = {}  # request id -> (offset in the file, length asked)
        todo = [(at, min(READ_BLOCK, offset + size - at)) for at in range(offset, offset + size, READ_BLOCK)]
        todo.reverse()
        received = 0
        while todo or pending:
            while todo and len(pending) < WINDOW:
                at, length = todo.pop()
                request = self._send(FXP_READ, _string(handle) + struct.pack(">QI", at, length))
                pending[request] = (at, length)
            kind, request, rest = self._reply({FXP_DATA})
            if request not in pending:
                raise SftpError(f"a reply to request {request}, which was not asked")
            at, length = pending.pop(request)
            if kind != FXP_DATA:
                raise SftpError(f"{path} ends before byte {at} of the range {offset}-{offset + size - 1}")
            data = _take_string(rest, 0)[0]
            if not data or len(data) > length:
                raise SftpError(f"{len(data)} bytes to a read of {length}")
            _write_at(descriptor, data, at - offset)
            received += len(data)
            if len(data) < length:
                todo.append((at + len(data), length - len(data)))
        return received


def _write_at(descriptor, data, position):
    view = memoryview(data)
    while view:
        written = os.pwrite(descriptor, view, position)
        view, position = view[written:], position + written
