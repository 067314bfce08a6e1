"""The Hugging Face path through the llama_model role, as site.yml runs it, against a hub stand-in that honours Range.

The play is site.yml's model play (hosts: coordinator, role llamarpc.cluster.llama_model) with
``llama_model_hf_repo``/``llama_model_hf_pattern`` and ``HF_ENDPOINT`` pointing at ``hub_stand_in.HubStandIn`` on
loopback (a hub origin for the API and resolve URLs, a CDN origin for the bytes, as the real hub redirects). The
coordinator is a local "host" whose model directory is on a tmpfs of its own (the fixtures of
test_shard_place_url.py); it is the only candidate, so the role runs whole (no mount: nothing lives elsewhere).

One test walks the download's life: a first run whose download of shard 1 the stand-in stops mid-file while the
test kills the play; a rerun that resumes with ``Range: bytes=<partial size>-`` (206) and places and verifies
every shard; a third run that changes nothing and downloads nothing. The hub token goes to the hub only, never to
the CDN origin. A second test has the stand-in drop the connection mid-file: the same run resumes by Range.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import test_shard_place_url as url_tests
import yaml
from hub_stand_in import HubStandIn
from test_shard_place_url import PLAYBOOK, REPO, kill_tree, sha256

REPO_ID = "llamarpc/tiny-gguf"
TOKEN = "hf_stand_in_token_never_logged"  # noqa: S105 - a test token, never a real one
MIB = 1 << 20
STALL_AT = 2 * MIB + 1000  # the module reads 1 MiB blocks: two are written, the third never completes
HANG_GUARD = 300  # seconds: only against a hang, never a measure

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs mounts)")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return url_tests.make_model(tmp_path_factory)


@pytest.fixture
def hub(model):
    with HubStandIn(REPO_ID, model["files"]) as stand_in:
        yield stand_in


@pytest.fixture
def disk(tmp_path):
    """The coordinator's model filesystem: a 16 MiB tmpfs (the tiny model is 13.7 MB)."""
    base = tmp_path / "disk-a"
    base.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(base)], check=True)
    yield base
    subprocess.run(["umount", "-l", str(base)], check=False)


def write_play(tmp_path, disk):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"a": {"ansible_connection": "local"}},
                    "vars": {
                        "ansible_python_interpreter": sys.executable,
                        "ansible_become_method": "su",  # root to root: no sudo needed on this machine
                        "llama_model_dir": f"{disk}/models/tiny",
                        "llama_model_hf_repo": REPO_ID,
                        "llama_model_hf_pattern": "*tiny*.gguf",
                        "llama_model_hf_token": TOKEN,
                        "llama_model_reserve": "256k",
                        "llama_model_mount_root": "/mnt/llamarpc-test",
                    },
                    "children": {"coordinator": {"hosts": {"a": None}}},
                }
            }
        ),
        encoding="utf-8",
    )
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Model shards on the coordinator (site.yml's play)",
                    "hosts": "coordinator",
                    "gather_facts": False,
                    "roles": [{"role": "llamarpc.cluster.llama_model"}],
                    "post_tasks": [
                        {
                            "name": "Keep the role's public facts",
                            "ansible.builtin.copy": {
                                "content": "{{ {'path': llama_model_path, 'shards': llama_model_shards,"
                                " 'changed': llama_model_changed} | to_json }}",
                                "dest": f"{tmp_path}/facts.json",
                                "mode": "0644",
                            },
                            "diff": False,
                            "changed_when": False,  # test plumbing: the recap counts the role's changes only
                        }
                    ],
                }
            ],
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    return [str(PLAYBOOK), "-i", str(inventory), str(play)]


def env_for(hub):
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_NOCOLOR": "1",
        "HF_ENDPOINT": hub.endpoint,
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def run_role(tmp_path, disk, hub):
    """ansible-playbook to its end; returns (the role's public facts, the PLAY RECAP's counts of host a)."""
    facts = tmp_path / "facts.json"
    facts.unlink(missing_ok=True)
    proc = subprocess.run(
        write_play(tmp_path, disk),
        capture_output=True,
        text=True,
        env=env_for(hub),
        cwd=REPO,
        check=False,
        timeout=HANG_GUARD,
    )
    assert proc.returncode == 0, f"play failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert TOKEN not in proc.stdout + proc.stderr
    recap = proc.stdout.rpartition("PLAY RECAP")[2]
    assert recap, proc.stdout[-3000:]
    counts = dict(item.split("=") for item in recap.split(":", 1)[1].split() if "=" in item)
    return json.loads(facts.read_text(encoding="utf-8")), {key: int(value) for key, value in counts.items()}


def placed_and_verified(model, disk, facts):
    model_dir = disk / "models/tiny"
    assert [shard["name"] for shard in facts["shards"]] == [entry["name"] for entry in model["files"]]
    assert {shard["host"] for shard in facts["shards"]} == {"a"}
    assert facts["path"] == str(model_dir / model["files"][0]["name"])
    manifest = json.loads((model_dir / ".llamarpc-shards.json").read_text(encoding="utf-8"))
    for entry in model["files"]:
        path = model_dir / entry["name"]
        assert sha256(path) == entry["sha256"]
        assert (path.stat().st_mode & 0o777) == 0o444
        assert manifest[entry["name"]]["sha256"] == entry["sha256"]
        assert not (model_dir / f"{entry['name']}.partial").exists()


def blob_gets(hub, entry):
    """The CDN's GETs of one file's bytes, in order."""
    return [req for req in hub.requests("cdn", "GET") if f"/blobs/{entry['sha256']}" in req["path"]]


def token_stays_on_the_hub(hub):
    """Every request to the hub origin carried the token; none to the CDN origin (the real hub's CDN URLs are signed,
    and a token sent there would leak to a third party)."""
    assert hub.requests("hub") and all(req["auth"] for req in hub.requests("hub"))
    assert hub.requests("cdn") and not any(req["auth"] for req in hub.requests("cdn"))


def test_interrupted_download_resumes_by_range_through_the_role(tmp_path, model, hub, disk):
    first = model["files"][0]
    partial = disk / "models/tiny" / f"{first['name']}.partial"

    # 1. The stand-in stops sending shard 1 after STALL_AT bytes; the play is killed while it waits.
    hub.stall_after(first["name"], STALL_AT)
    proc = subprocess.Popen(
        write_play(tmp_path, disk),
        env=env_for(hub),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + HANG_GUARD
    while not (hub.stalled.is_set() and partial.exists() and partial.stat().st_size >= 2 * MIB):
        assert proc.poll() is None, "the play ended before the stand-in stopped the download"
        assert time.monotonic() < deadline, "the download never reached the stall"
        time.sleep(0.05)
    kill_tree(proc)
    hub.release()
    killed_at = partial.stat().st_size
    assert killed_at == 2 * MIB  # what the killed module had written: two whole 1 MiB blocks
    assert not (disk / "models/tiny" / first["name"]).exists()
    interrupted = blob_gets(hub, first)
    assert [(req["range"], req["status"], req["sent"]) for req in interrupted] == [(None, 200, STALL_AT)]
    hub.clear_log()

    # 2. The rerun asks for the rest only: Range from the partial's size, answered 206; every shard verified.
    facts, recap = run_role(tmp_path, disk, hub)
    resumed = blob_gets(hub, first)
    assert [(req["range"], req["status"], req["sent"]) for req in resumed] == [
        (f"bytes={killed_at}-", 206, first["size"] - killed_at)
    ]
    for entry in model["files"][1:]:
        assert [(req["range"], req["status"]) for req in blob_gets(hub, entry)] == [(None, 200)]
    placed_and_verified(model, disk, facts)
    assert facts["changed"] and recap["changed"] > 0 and recap["failed"] == 0
    token_stays_on_the_hub(hub)
    print(f"killed at {killed_at} of {first['size']} bytes; resumed with {resumed[0]['range']}: {resumed[0]}")
    hub.clear_log()

    # 3. A third run changes nothing and fetches no byte (the manifest vouches for the shards; the hub is asked
    #    for metadata only).
    facts, recap = run_role(tmp_path, disk, hub)
    assert recap["changed"] == 0 and recap["failed"] == 0, recap
    assert not facts["changed"]
    assert hub.requests("cdn") == []
    assert {req["method"] for req in hub.requests("hub")} <= {"GET", "HEAD"}
    assert not [req for req in hub.requests("hub", "GET") if "/resolve/" in req["path"]]
    placed_and_verified(model, disk, facts)


def test_dropped_connection_resumes_in_the_same_run(tmp_path, model, hub, disk):
    """The stand-in closes the connection after 1 MiB of shard 2: the same run asks again from there (206)."""
    second = model["files"][1]
    hub.cut_after(second["name"], MIB)
    facts, recap = run_role(tmp_path, disk, hub)
    gets = blob_gets(hub, second)
    assert [(req["range"], req["status"]) for req in gets] == [(None, 200), (f"bytes={MIB}-", 206)]
    assert gets[1]["sent"] == second["size"] - MIB
    placed_and_verified(model, disk, facts)
    assert recap["failed"] == 0
    token_stays_on_the_hub(hub)
