"""After converge (disable mode): lsyncd started outside any unit is stopped too, and nothing merely named after it.

prepare.yml planted on node3 a line starting lsyncd in pool's crontab and one in /etc/cron.d, an lsyncd started
by hand as pool (``setsid``, in no service), and two processes that only carry the word: ``sleep`` run as
``lsyncd-notes`` (``exec -a``) and ``python3 -c ... lsyncd``. Each process's pid is in /root/NAME.pid. On node2 it
planted syncthing and unison as files only (a system unit, a config.xml folder and a unison profile on the model
directory; neither program is installed): the scan must see them.
"""

from __future__ import annotations

import pytest
from conftest import MODELS, lab, scan, wait_for

MARKER = "# disabled by llamarpc.cluster.lsyncd_neutralize: "
SYNC = "-rsync /data/home/pool/handmade/ /data/home/pool/handmade-copy/"
CRON_LINES = {
    "/var/spool/cron/crontabs/pool": f"@reboot lsyncd {SYNC}",
    "/etc/cron.d/handmade-lsyncd": f"@reboot pool /usr/bin/lsyncd {SYNC}",
}
DECOYS = {"decoy-exec-a": ["lsyncd-notes", "7200"], "decoy-argument": ["python3", "-c"]}
# Seconds the role's SIGTERM has had long before verify; the poll only guards against a slow /proc on a loaded host.
GONE_WITHIN = 30


@pytest.fixture(scope="module")
def node3():
    """node3; the decoys (left running by the role, as the tests check) are ended when this file's tests are done."""
    host = lab("node3")
    yield host
    for name in DECOYS:
        host.run(f"kill $(cat /root/{name}.pid)")


def pid_of(host, name):
    return int(host.check_output(f"cat /root/{name}.pid"))


def argv(host, pid):
    """The process's argv, or None when it is gone."""
    result = host.run(f"tr '\\0' '\\n' < /proc/{pid}/cmdline")
    return result.stdout.split("\n")[:-1] if result.rc == 0 and result.stdout else None


@pytest.mark.parametrize("path", sorted(CRON_LINES))
def test_crontab_lines_that_start_lsyncd_are_disabled_with_the_roles_marker(node3, path):
    lines = node3.file(path).content_string.splitlines()
    line = CRON_LINES[path]
    assert MARKER + line in lines, lines
    assert line not in lines, lines
    found = [h for h in scan("node3")["hazards"] if h["kind"] == "cron" and h["where"].startswith(f"crontab {path}:")]
    lsyncd = [h for h in found if h["tool"] == "lsyncd"]
    assert len(lsyncd) == 1 and lsyncd[0]["neutralised"] and lsyncd[0]["where"].endswith("(disabled)"), found


def test_the_lsyncd_started_by_hand_outside_any_unit_was_ended(node3):
    pid = pid_of(node3, "hand-lsyncd")
    assert wait_for(lambda: argv(node3, pid) is None, timeout=GONE_WITHIN), argv(node3, pid)
    assert [h["id"] for h in scan("node3")["hazards"] if h["tool"] == "lsyncd" and h["kind"] == "process"] == []


@pytest.mark.parametrize("name", sorted(DECOYS))
def test_a_process_only_named_after_lsyncd_still_runs(node3, name):
    found = argv(node3, pid_of(node3, name))
    assert found is not None, f"{name} was ended"
    assert found[:2] == DECOYS[name]
    assert "lsyncd" in found[0] or found[-1] == "lsyncd", found  # it still carries the word the scan must not take


def test_syncthing_and_unison_planted_as_files_are_found():
    hazards = {h["id"]: h for h in scan("node2")["hazards"]}
    unit = hazards.get("syncthing:unit:system:syncthing-pool.service")
    assert unit is not None and unit["tool"] == "syncthing", sorted(hazards)
    folder = hazards.get("syncthing:/data/home/pool/.config/syncthing/config.xml:models")
    assert folder is not None, sorted(hazards)
    assert folder["model_dirs_reached"] == [MODELS] and folder["deletes"] is True
    assert folder["neutralised"] and "is not running" in folder["detail"]
    profile = hazards.get("unison:profile:/data/home/pool/.unison/models.prf")
    assert profile is not None, sorted(hazards)
    assert profile["model_dirs_reached"] == [MODELS] and profile["deletes"] is True
    assert {p["host"] for p in profile["paths"]} == {None, "node1"}
    assert profile["neutralised"] and "is not running" in profile["detail"]
