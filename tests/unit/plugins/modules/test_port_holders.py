"""The port_holders module: a port held by this test's own socket fails it, naming the PID; a free port passes."""

from __future__ import annotations

import os
import socket

from ansible_collections.llamarpc.cluster.plugins.modules import port_holders


def test_a_port_held_outside_the_unit_fails_before_anything_changes(run_module):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        services = [{"service": "the RPC worker", "port": port, "unit": "llamarpc-rpc-worker.service"}]
        result = run_module(port_holders, {"services": services}, check_mode=True)
    assert result.failed
    assert f"port {port} (the RPC worker) is already held by" in result.result["msg"]
    assert f"PID {os.getpid()}" in result.result["msg"]
    assert not result.result.get("changed")


def test_a_free_port_passes(run_module):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: nobody holds it as a listener
        result = run_module(
            port_holders, {"services": [{"service": "llama-server", "port": port, "unit": "llamarpc-server.service"}]}
        )
    assert not result.failed
    assert result.result["holders"] == {"llama-server": []} and result.result["changed"] is False
