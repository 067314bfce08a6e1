"""Shared by the unit tests of both collections: a module's main() run in-process with given arguments (what it
returns or why it failed), and a loopback port where nothing listens."""

from __future__ import annotations

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
