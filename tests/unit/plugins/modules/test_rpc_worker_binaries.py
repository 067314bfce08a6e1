"""rpc_worker_binaries: the RPC server's --help must name every flag the worker's unit passes; the hashing helper is
copied from llama.cpp's binaries when its bytes differ (root, 0755) and proven on every run to hash "foobar" as
llama.cpp does; check mode copies nothing and does not ask a helper that a real run would replace. Stand-ins for the
RPC server and the helper record how they were called."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from ansible_collections.llamarpc.cluster.plugins.modules import rpc_worker_binaries

HELP = "usage: rpc-server [options]\n  -d, --device <dev1,dev2,...>\n  -c, --cache\n"
LOG = """import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv) + "\\n")
"""
SERVER = LOG + 'sys.stdout.write(os.environ.get("FAKE_OUT", ""))\nsys.exit(int(os.environ.get("FAKE_RC", "0")))\n'
# FNV-1a 64 as llama.cpp's fnv_hash; OFFSET changes the answer for a helper that hashes wrong.
HELPER = (
    LOG
    + """h = {offset}
for byte in open(sys.argv[1], "rb").read():
    h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
print(f"{{h:016x}}  {{sys.argv[1]}}")
"""
)
RIGHT = 0xCBF29CE484222325


def script(path, text):
    path.write_text(f"#!{sys.executable}\n{text}", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def bins(tmp_path, monkeypatch):
    """(server, helper_src, helper destination, calls()): a stand-in server that prints HELP, the helper as a build
    brings it, and where the role installs it."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_OUT", HELP)
    build = tmp_path / "bin"
    build.mkdir()
    server = script(build / "ggml-rpc-server", SERVER)
    src = script(build / "llamarpc-fnv1a", HELPER.format(offset=RIGHT))
    dest = tmp_path / "lib" / "llamarpc-fnv1a"  # its directory made by the module

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return server, src, str(dest), calls


def args(server, src, dest, **extra):
    return {"server": server, "flags": ["--cache", "--device"], "helper": dest, "helper_src": src, **extra}


def test_a_first_run_installs_the_helper_in_a_new_directory_and_proves_it_a_rerun_changes_nothing(run_module, bins):
    server, src, dest, calls = bins
    first = run_module(rpc_worker_binaries, args(server, src, dest))
    assert not first.failed and first.result["changed"] and first.result["checked"] == ["flags", "helper"]
    with open(dest, "rb") as installed, open(src, "rb") as brought:
        assert installed.read() == brought.read()
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o755
    assert first.result["diff"][0]["after"]["sha256"] != first.result["diff"][0]["before"]["sha256"]
    assert calls() == [[server, "--help"], [dest, "/dev/stdin"]]
    again = run_module(rpc_worker_binaries, args(server, src, dest))
    assert not again.failed and not again.result["changed"] and again.result["checked"] == ["flags", "helper"]
    # Proven again on the rerun, where nothing was copied.
    assert calls()[-1] == [dest, "/dev/stdin"]


def test_a_flag_the_server_does_not_know_fails_naming_it_and_the_workers_unit(run_module, bins):
    server, src, dest, _calls = bins
    result = run_module(rpc_worker_binaries, args(server, src, dest, flags=["--cache", "--threads-batch"]))
    assert result.failed
    message = result.result["msg"]
    assert message.startswith(f"{server} does not know --threads-batch, which the RPC worker's unit passes")
    assert not os.path.exists(dest)


def test_a_server_whose_help_fails_fails(run_module, bins, monkeypatch):
    server, src, dest, _calls = bins
    monkeypatch.setenv("FAKE_RC", "127")
    result = run_module(rpc_worker_binaries, args(server, src, dest, flags=[]))
    assert result.failed and result.result["msg"].startswith(f"{server} --help failed (rc=127)")


def test_a_helper_that_hashes_otherwise_fails_on_every_run(run_module, bins, tmp_path):
    server, _src, dest, _calls = bins
    wrong = script(tmp_path / "bin" / "wrong-fnv1a", HELPER.format(offset=RIGHT + 1))
    for attempt in range(2):
        result = run_module(rpc_worker_binaries, args(server, wrong, dest))
        assert result.failed, f"run {attempt + 1}"
        assert result.result["msg"].startswith(f"{dest} does not hash as llama.cpp does: the FNV-1a 64 of 'foobar' is")


def test_check_mode_copies_nothing_and_does_not_ask_a_helper_that_a_real_run_replaces(run_module, bins):
    server, src, dest, calls = bins
    result = run_module(rpc_worker_binaries, args(server, src, dest), check_mode=True)
    assert not result.failed and result.result["changed"] and result.result["checked"] == ["flags"]
    assert not os.path.exists(dest)
    assert calls() == [[server, "--help"]]


def test_check_mode_proves_a_helper_in_place(run_module, bins):
    server, src, dest, calls = bins
    run_module(rpc_worker_binaries, args(server, src, dest))
    result = run_module(rpc_worker_binaries, args(server, src, dest), check_mode=True)
    assert not result.failed and not result.result["changed"] and result.result["checked"] == ["flags", "helper"]
    assert calls()[-1] == [dest, "/dev/stdin"]


def test_a_helper_with_other_permissions_gets_its_mode_back(run_module, bins):
    server, src, dest, _calls = bins
    run_module(rpc_worker_binaries, args(server, src, dest))
    os.chmod(dest, 0o700)
    result = run_module(rpc_worker_binaries, args(server, src, dest))
    assert not result.failed and result.result["changed"]
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o755


def test_binaries_not_installed_yet_are_left_to_the_real_run_in_check_mode_and_fail_outside_it(run_module, tmp_path):
    missing = {"server": str(tmp_path / "rpc-server"), "helper": str(tmp_path / "h"), "helper_src": str(tmp_path / "s")}
    checked = run_module(rpc_worker_binaries, missing, check_mode=True)
    assert not checked.failed and checked.result["changed"] and checked.result["checked"] == []
    real = run_module(rpc_worker_binaries, missing)
    assert real.failed and "is not there: the RPC server must be installed" in real.result["msg"]
    only_helper = run_module(rpc_worker_binaries, {**missing, "server": sys.executable})
    assert only_helper.failed and "llama.cpp's binaries do not bring the hashing helper" in only_helper.result["msg"]


def test_a_source_without_a_destination_is_refused(run_module, bins):
    server, src, _dest, _calls = bins
    result = run_module(rpc_worker_binaries, {"server": server, "helper_src": src})
    assert (
        result.failed and result.result["msg"] == "helper is required with helper_src (where the helper is installed)"
    )


@pytest.fixture
def running(tmp_path, monkeypatch):
    """A copy of sleep(1) running as the worker's old RPC server, and a systemctl on PATH that names its PID as the
    service's MainPID (``set_pid(0)``: the service does not run) and the service's ActiveState (the file's second
    word; ``set_pid(pid, "activating")``: a start still checking the cache)."""
    old = tmp_path / "old" / "bin" / "ggml-rpc-server"
    old.parent.mkdir(parents=True)
    shutil.copy(shutil.which("sleep"), old)
    proc = subprocess.Popen([str(old), "60"])
    tools = tmp_path / "tools"
    tools.mkdir()
    pid_file = tmp_path / "main-pid"
    script(
        tools / "systemctl",
        f'pid, state = open({str(pid_file)!r}).read().split()\nprint(f"ActiveState={{state}}\\nMainPID={{pid}}")\n',
    )
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")

    def set_pid(pid, state="active"):
        pid_file.write_text(f"{pid} {state}", encoding="utf-8")

    set_pid(proc.pid)
    yield str(old), set_pid
    proc.kill()
    proc.wait()


def test_the_service_running_another_binary_switches_the_same_one_does_not(run_module, bins, running, tmp_path):
    """switch: the worker's service runs another RPC server than the one this run installs (a new llama.cpp beside
    the old one); the same file, or a link to it, is no switch; a service that does not run is none either."""
    server, src, dest, _calls = bins
    old, set_pid = running
    moved = run_module(rpc_worker_binaries, args(server, src, dest, service="llamarpc-rpc-worker.service"))
    assert not moved.failed and moved.result["running"] == old and moved.result["switch"] is True
    assert moved.result["waits"] is False  # restarted by its role: no cutover asked
    assert "check_unit" not in moved.result
    cutover = run_module(
        rpc_worker_binaries,
        args(server, src, dest, service="llamarpc-rpc-worker.service", cutover=True, check_unit="c.service"),
    )
    assert cutover.result["switch"] is True and cutover.result["waits"] is True
    assert cutover.result["check_unit"] == "c.service"  # the coordinator's cutover starts it; this module does not
    same = run_module(rpc_worker_binaries, {"server": old, "service": "llamarpc-rpc-worker.service", "cutover": True})
    assert not same.failed and same.result["switch"] is False and same.result["waits"] is False
    link = tmp_path / "current-ggml-rpc-server"
    link.symlink_to(old)
    linked = run_module(rpc_worker_binaries, {"server": str(link), "service": "llamarpc-rpc-worker.service"})
    assert not linked.failed and linked.result["switch"] is False
    # A start that still checks the cache: its main process is the verifier, which becomes the RPC server only once
    # the cache is clean; nothing serves, so nothing switches.
    set_pid(os.getpid(), "activating")
    checking = run_module(rpc_worker_binaries, args(server, src, dest, service="llamarpc-rpc-worker.service"))
    assert not checking.failed and checking.result["running"] == "" and checking.result["switch"] is False
    set_pid(0, "inactive")
    idle = run_module(rpc_worker_binaries, args(server, src, dest, service="llamarpc-rpc-worker.service"))
    assert not idle.failed and idle.result["running"] == "" and idle.result["switch"] is False
    # Without the service nothing is asked.
    assert "switch" not in run_module(rpc_worker_binaries, args(server, src, dest)).result
