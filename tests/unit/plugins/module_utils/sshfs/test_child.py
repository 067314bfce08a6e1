"""run_in_child: a function's answer from a forked child, or None in bounded time; a child left behind holds
none of the caller's output."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _child
from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._child import run_in_child

CHILD = "ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs._child"


def answer(value):
    return {"value": value, "pid": os.getpid(), "ppid": os.getppid()}


def raises():
    raise OSError(5, "Input/output error")


def sleeps(pid_file):
    with open(pid_file, "w", encoding="ascii") as handle:
        handle.write(str(os.getpid()))
    time.sleep(600)


def dies():
    os._exit(3)


def test_answer_comes_from_another_process():
    got = run_in_child(answer, [[1, "two"]], 60)
    assert got["value"] == [1, "two"]
    assert got["pid"] != os.getpid() and got["ppid"] == os.getpid()


def test_large_answer_is_read_whole():
    assert run_in_child(answer, ["x" * 1_000_000], 60)["value"] == "x" * 1_000_000


def test_exception_and_silent_death_are_errors():
    assert run_in_child(raises, [], 60) == {"ok": False, "error": "probe failed: OSError: [Errno 5] Input/output error"}
    assert run_in_child(dies, [], 60) == {"ok": False, "error": "the child process died without an answer"}


def test_child_that_does_not_answer_gives_none_and_is_killed(tmp_path, monkeypatch):
    # However long a loaded machine takes to reap the killed child, run_in_child waits for it here.
    monkeypatch.setattr(f"{CHILD}.REAP_SECONDS", 60)
    pid_file = tmp_path / "pid"
    assert run_in_child(sleeps, [str(pid_file)], 0.5) is None
    if pid_file.exists():  # the child may have been killed before it wrote its pid
        assert not os.path.exists(f"/proc/{pid_file.read_text()}"), "the killed child is still there"


LEFT_BEHIND = textwrap.dedent(
    """
    import os, sys, time
    from ansible_collections.llamarpc.cluster.plugins.module_utils.sshfs import _child

    def sleeps(pid_file):
        with open(pid_file, "w") as handle:
            handle.write(str(os.getpid()))
        time.sleep(600)

    # A child stuck uninterruptibly ignores SIGKILL: stand in for it with a kill that does nothing.
    _child.os.kill = lambda pid, sig: None
    _child.REAP_SECONDS = 0.2
    result = _child.run_in_child(sleeps, [sys.argv[1]], 1.0)
    while not os.path.exists(sys.argv[1]):  # the child runs on (its kill did nothing): wait for its pid
        time.sleep(0.05)
    print("result", result, flush=True)
    """
)


def test_child_left_behind_does_not_hold_the_callers_output(tmp_path):
    """Ansible reads a module's stdout to its end: a child left behind must not keep it open (nor stderr)."""
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen(
        [sys.executable, "-c", LEFT_BEHIND, str(pid_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    callers = {os.readlink(f"/proc/self/fd/{pipe.fileno()}") for pipe in (proc.stdout, proc.stderr)}
    try:
        # Returns once the caller has exited and nobody else holds its pipes; with the child holding them, it
        # would wait out the child's 600 s (a generous bound: not a timing target, a "did not wait").
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out == "result None\n"
        left = int(pid_file.read_text())
        assert os.path.exists(f"/proc/{left}"), "the child was not left behind"
        held = {int(fd): os.readlink(f"/proc/{left}/fd/{fd}") for fd in os.listdir(f"/proc/{left}/fd")}
        assert [held.get(fd) for fd in (0, 1, 2)] == ["/dev/null"] * 3, held
        assert not callers & set(held.values()), held
    finally:
        proc.kill()
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_reap_of_a_running_child_gives_up(monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert _child.reap(proc.pid, 0.1) is False
    finally:
        proc.kill()
        proc.wait(timeout=60)
