"""A download killed mid-way (the play and the module's process on the host, SIGKILL) resumes with an HTTP Range
request on the next run; a shard damaged in place is found and fetched again."""

import subprocess
import time

from conftest import (
    ACCESS_LOG,
    COORDINATOR,
    EXPECTED_HOSTS,
    FETCH_ONLY,
    FILES,
    MODEL_DIR,
    REPO,
    WORK,
    ansible_env,
    kill_tree,
    place,
    place_command,
    sha256,
)
from labtest import lab, wait_for

SHARD = FILES[2]  # on node3, 5.3 MB: about 20 s at nginx's 256 kB/s
HOLDER = EXPECTED_HOSTS[SHARD["name"]]
PARTIAL = f"{MODEL_DIR}/{SHARD['name']}.partial"


def partial_size(host):
    out = host.run(f"stat -c %s {PARTIAL}")
    return int(out.stdout) if out.rc == 0 else 0


def kill_holders(host, path):
    """SIGKILL every process on ``host`` that has ``path`` open (the module's python, whatever its command line)."""
    host.check_output(
        "for fd in /proc/[0-9]*/fd/*; do "
        f'if [ "$(readlink $fd 2>/dev/null)" = "{path}" ]; then pid=${{fd#/proc/}}; kill -KILL ${{pid%%/*}}; fi; '
        "done; true"
    )


def test_a_killed_download_resumes_with_range(tmp_path):
    holder, coordinator = lab(HOLDER), lab(COORDINATOR)
    holder.check_output(f"rm -f {MODEL_DIR}/{SHARD['name']}")
    log_before = ACCESS_LOG.read_text(encoding="utf-8") if ACCESS_LOG.exists() else ""
    command = place_command(*FETCH_ONLY, urls_source=True, tmp_path=tmp_path)
    with (WORK / "killed-play.log").open("w") as log:
        proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=ansible_env())
    try:
        grown = wait_for(lambda: partial_size(holder) >= 1_000_000, interval=0.3)
        assert grown, (WORK / "killed-play.log").read_text()[-4000:]
        kill_holders(holder, PARTIAL)
    finally:
        kill_tree(proc)
    time.sleep(1)
    killed_at = partial_size(holder)
    assert 0 < killed_at < SHARD["size"], killed_at
    assert not holder.file(f"{MODEL_DIR}/{SHARD['name']}").exists

    result, _done = place(*FETCH_ONLY, urls_source=True, tmp_path=tmp_path)
    fetched = result["place"]["per_host"][HOLDER]["fetched"]
    print(f"\nkilled at {killed_at} bytes; rerun: {fetched}")
    assert [entry["name"] for entry in fetched] == [SHARD["name"]]
    assert fetched[0]["resumed_from"] >= killed_at > 0
    assert fetched[0]["resumed_from"] + fetched[0]["downloaded"] == SHARD["size"]
    new_lines = ACCESS_LOG.read_text(encoding="utf-8")[len(log_before) :].splitlines()
    assert any(SHARD["name"] in line and '" 206 ' in line for line in new_lines), new_lines
    assert result["changed"] is True
    assert sha256(coordinator, f"{MODEL_DIR}/{SHARD['name']}") == SHARD["sha256"]
    assert holder.file(f"{MODEL_DIR}/{SHARD['name']}").mode == 0o444
    assert not holder.file(PARTIAL).exists


def test_a_corrupted_shard_is_detected_and_fetched_again():
    shard = FILES[1]
    host = lab(EXPECTED_HOSTS[shard["name"]])
    path = f"{MODEL_DIR}/{shard['name']}"
    host.check_output(
        f"chmod 0644 {path} && printf 'not the bytes you want' | dd of={path} bs=1 seek=4096 conv=notrunc status=none"
    )
    assert sha256(host, path) != shard["sha256"]
    result, _done = place(*FETCH_ONLY)
    per_host = result["place"]["per_host"][EXPECTED_HOSTS[shard["name"]]]
    assert per_host["refetched"] == [shard["name"]], per_host
    assert result["changed"] is True
    assert sha256(lab(COORDINATOR), path) == shard["sha256"]
