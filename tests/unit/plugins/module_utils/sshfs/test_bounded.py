"""run_bounded: a child's output, or None in bounded time when it does not finish."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._bounded import run_bounded

BOUNDED = "ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._bounded"


def _record_children(monkeypatch):
    """The Popen objects run_bounded creates, recorded as it creates them (the child's pid known at once,
    whether or not the child got as far as running any code before it was killed)."""
    children = []

    class RecordingPopen(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            children.append(self)

    monkeypatch.setattr(f"{BOUNDED}.subprocess.Popen", RecordingPopen)
    return children


def test_finished_child_gives_rc_and_output():
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    assert run_bounded([sys.executable, "-c", code], 30) == (3, "out\n", "err\n")


def test_child_that_does_not_finish_gives_none_and_is_killed(monkeypatch):
    children = _record_children(monkeypatch)
    # However long a loaded machine takes to reap the killed child, run_bounded waits for it here.
    monkeypatch.setattr(f"{BOUNDED}.REAP_SECONDS", 60)
    assert run_bounded([sys.executable, "-c", "import time; time.sleep(600)"], 0.5) is None
    (child,) = children
    # Killed by SIGKILL and reaped by run_bounded itself (wait() set the return code).
    assert child.returncode == -signal.SIGKILL
    # No such process any more (a zombie would still have a /proc entry).
    assert not os.path.exists(f"/proc/{child.pid}"), "the killed child is still there"


def test_child_that_cannot_be_reaped_does_not_block(monkeypatch):
    """A child stuck uninterruptibly ignores SIGKILL: stand in for it with a kill that does nothing."""
    children = _record_children(monkeypatch)
    monkeypatch.setattr("subprocess.Popen.kill", lambda self: None)
    monkeypatch.setattr(f"{BOUNDED}.REAP_SECONDS", 0.2)
    started = time.monotonic()
    try:
        assert run_bounded([sys.executable, "-c", "import time; time.sleep(600)"], 0.3) is None
        # Returned long before the child's 600 s were up (a generous bound: not a timing target, a "did not wait").
        assert time.monotonic() - started < 60
        (child,) = children
        assert child.returncode is None  # left behind, still running
    finally:
        for child in children:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=60)
