"""Shared by the unit tests of both collections: a module's main() run in-process with given arguments (what it
returns or why it failed), a loopback port where nothing listens, and a trace of the fsyncs and renames of a write."""

from __future__ import annotations

import os
import socket

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class ModuleExit(Exception):
    """Raised instead of exit_json/fail_json: ``result`` is what the module returned, ``failed`` how."""

    def __init__(self, result, failed):
        super().__init__(result)
        self.result = result
        self.failed = failed


@pytest.fixture
def run_module(monkeypatch):
    """``run_module(module, args, check_mode=False) -> ModuleExit`` for a module object with a main()."""

    def exit_json(self, **kwargs):
        raise ModuleExit(kwargs, failed=False)

    def fail_json(self, msg, **kwargs):
        kwargs["msg"] = msg
        raise ModuleExit(kwargs, failed=True)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)

    def run(module, args, *, check_mode=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args), pytest.raises(ModuleExit) as caught:
            module.main()
        return caught.value

    return run


@pytest.fixture
def closed_port():
    """A loopback port where nothing listens (bound once to get a free number, then closed)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def canonical(path):
    """``path`` absolute, its directory's symlinks resolved, its own name kept (a symlink being renamed is not
    followed)."""
    path = os.path.abspath(os.fsdecode(path))
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


class Trace:
    def __init__(self):
        self.calls = []

    def assert_durable(self, final):
        """The last rename onto ``final``: its source fsynced before it, ``final``'s directory fsynced after it."""
        at = self._last_rename(final)
        source = self.calls[at][1]
        assert ("fsync", source) in self.calls[:at], f"{source} was not fsynced before its rename: {self.calls}"
        self.assert_directory_synced_after(final)

    def assert_directory_synced_after(self, final):
        """``final``'s directory fsynced after the last rename onto it and before the next rename (what is published
        next, a record naming this file, may not reach the disk first). Alone: for a symlink, no data to sync."""
        at = self._last_rename(final)
        following = [i for i, call in enumerate(self.calls) if i > at and call[0] == "rename"]
        window = self.calls[at + 1 : following[0] if following else len(self.calls)]
        assert ("fsync", os.path.dirname(canonical(final))) in window, (
            f"the directory of {final} was not fsynced after the rename: {self.calls}"
        )

    def _last_rename(self, final):
        final = canonical(final)
        renames = [i for i, call in enumerate(self.calls) if call[0] == "rename" and call[2] == final]
        assert renames, f"nothing was renamed onto {final}: {self.calls}"
        return renames[-1]


@pytest.fixture
def sync_trace(monkeypatch):
    """Every ``os.fsync`` (the path of the descriptor synced) and ``os.replace`` / ``os.rename`` (source, target) in
    order, the real calls still made: ``assert_durable(path)`` checks a write (issue 40: a lab power loss cannot)."""
    found = Trace()
    real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

    def fsync(fd):
        number = fd if isinstance(fd, int) else fd.fileno()
        found.calls.append(("fsync", os.readlink(f"/proc/self/fd/{number}")))
        real_fsync(fd)

    def renamer(real):
        def rename(src, dst, **kwargs):
            found.calls.append(("rename", canonical(src), canonical(dst)))
            real(src, dst, **kwargs)

        return rename

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", renamer(real_replace))
    monkeypatch.setattr(os, "rename", renamer(real_rename))
    return found
