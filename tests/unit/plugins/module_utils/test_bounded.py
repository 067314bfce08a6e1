"""run_bounded: a child's output, or None in bounded time when it does not finish."""

from __future__ import annotations

import sys
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils._bounded import run_bounded


def test_finished_child_gives_rc_and_output():
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    assert run_bounded([sys.executable, "-c", code], 30) == (3, "out\n", "err\n")


def test_child_that_does_not_finish_gives_none_and_is_killed(tmp_path):
    marker = tmp_path / "pid"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    assert run_bounded([sys.executable, "-c", code], 0.5) is None
    pid = int(marker.read_text())
    # Killed and reaped: no such process any more (a zombie would still have a /proc entry).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        assert state != "Z", "the killed child was left a zombie"
        time.sleep(0.1)
    raise AssertionError(f"child {pid} still runs")


def test_child_that_cannot_be_reaped_does_not_block(monkeypatch):
    """A child stuck uninterruptibly ignores SIGKILL: stand in for it with a kill that does nothing."""
    monkeypatch.setattr("subprocess.Popen.kill", lambda self: None)
    monkeypatch.setattr("ansible_collections.llamarpc.cluster.plugins.module_utils._bounded.REAP_SECONDS", 0.2)
    started = time.monotonic()
    assert run_bounded([sys.executable, "-c", "import time; time.sleep(5)"], 0.3) is None
    # Returned long before the child's 5 s were up (a generous bound: not a timing target, a "did not wait").
    assert time.monotonic() - started < 4.5
