"""The Hugging Face path through the llama_model role, as site.yml runs it, against a hub stand-in that honours Range.

The play is site.yml's model play (hosts: coordinator, role llamarpc.cluster.llama_model) with
``llama_model_hf_repo``/``llama_model_hf_pattern`` and ``HF_ENDPOINT`` pointing at ``hub_stand_in.HubStandIn`` on
loopback (a hub origin for the API and resolve URLs, a CDN origin for the bytes, as the real hub redirects). The
coordinator is a local "host" whose model directory is on a tmpfs of its own (the fixtures of
test_shard_place_url.py); it is the only candidate, so the role runs whole (no mount: nothing lives elsewhere).

One test walks the download's life: a first run whose download of shard 1 the stand-in stops mid-file while the
test kills the play; a rerun that resumes with ``Range: bytes=<partial size>-`` (206) and places and verifies
every shard; a third run that changes nothing and downloads nothing. The hub token goes to the hub only, never to
the CDN origin. A second test has the stand-in drop the connection mid-file: the same run resumes by Range. A third
runs playbooks/plan.yml's model step (fetch=false): the shards' GGUF headers are read by Range, nothing is written.

test_shard_place_hf.py (olah, a real third-party mirror that ignores Range) stays: it proves the same controller code
against a server that is not ours, and the "Range ignored: start over" path.
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


SITE_PLAY = {
    "name": "Model shards on the coordinator (site.yml's play)",
    "hosts": "coordinator",
    "gather_facts": False,
    "roles": [{"role": "llamarpc.cluster.llama_model"}],
}
FACTS = "{{ {'path': llama_model_path, 'shards': llama_model_shards, 'changed': llama_model_changed} | to_json }}"
# playbooks/plan.yml's model step: the role's place.yml with fetch=false (it reads _llama_model_place, as here).
PLAN_PLAY = {
    "name": "The plan (playbooks/plan.yml's model step)",
    "hosts": "coordinator",
    "gather_facts": False,
    "tasks": [
        {
            "name": "Place the shards and read the model from their GGUF headers (nothing fetched)",
            "ansible.builtin.include_role": {"name": "llamarpc.cluster.llama_model", "tasks_from": "place.yml"},
            "vars": {"_llama_model_plan_only": True},
        }
    ],
}
PLAN_FACTS = "{{ _llama_model_place | to_json }}"


def layout_of(disk):
    """The hosts of a play: ``disk`` is the model filesystem of one local coordinator "a", or ``spread``'s hosts."""
    if isinstance(disk, dict):
        return disk
    return {"model_dir": f"{disk}/models/tiny", "interpreters": {"a": sys.executable}, "workers": []}


def write_play(tmp_path, disk, play_data=None, facts=FACTS):
    """The inventory and the play (``play_data``, default site.yml's model play); returns the command line."""
    layout = layout_of(disk)
    play_data = play_data or SITE_PLAY
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        name: {"ansible_connection": "local", "ansible_python_interpreter": interpreter}
                        for name, interpreter in layout["interpreters"].items()
                    },
                    "vars": {
                        "ansible_become_method": "su",  # root to root: no sudo needed on this machine
                        "llama_model_dir": layout["model_dir"],
                        "llama_model_hf_repo": REPO_ID,
                        "llama_model_hf_pattern": "*tiny*.gguf",
                        "llama_model_hf_token": TOKEN,
                        "llama_model_reserve": "256k",
                        "llama_model_mount_root": "/mnt/llamarpc-test",
                    },
                    "children": {
                        "coordinator": {"hosts": {"a": None}},
                        "rpc_workers": {"hosts": dict.fromkeys(layout["workers"])},
                    },
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
                    **play_data,
                    "post_tasks": [
                        {
                            "name": "Keep the facts",
                            "ansible.builtin.copy": {
                                "content": facts,
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
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",  # messages on one line, to be matched
        "HF_ENDPOINT": hub.endpoint,
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def playbook(tmp_path, disk, hub, play=None, facts_of=FACTS, *args):
    """The finished ansible-playbook run of ``play`` (default site.yml's model play), with ``args`` added."""
    (tmp_path / "facts.json").unlink(missing_ok=True)
    proc = subprocess.run(
        [*write_play(tmp_path, disk, play, facts_of), *args],
        capture_output=True,
        text=True,
        env=env_for(hub),
        cwd=REPO,
        check=False,
        timeout=HANG_GUARD,
    )
    assert TOKEN not in proc.stdout + proc.stderr
    return proc


def run_role(tmp_path, disk, hub, play=None, facts_of=FACTS, *args):
    """ansible-playbook to its end; returns (the facts the play kept, the PLAY RECAP's counts, summed over hosts)."""
    facts = tmp_path / "facts.json"
    proc = playbook(tmp_path, disk, hub, play, facts_of, *args)
    assert proc.returncode == 0, f"play failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert "PLAY RECAP" in proc.stdout, proc.stdout[-3000:]
    counts = {}
    for line in proc.stdout.rpartition("PLAY RECAP")[2].splitlines():
        for item in line.partition(":")[2].split():
            key, _equals, value = item.partition("=")
            counts[key] = counts.get(key, 0) + int(value)
    assert "changed" in counts, proc.stdout[-3000:]
    return json.loads(facts.read_text(encoding="utf-8")), counts


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


def test_plan_reads_only_the_headers_by_range(tmp_path, model, hub, disk):
    """plan.yml's model step on the HF path: each shard's GGUF header read by Range through the hub's redirect (206,
    a few KiB of each), the plan made, and nothing written on the host."""
    facts, recap = run_role(tmp_path, disk, hub, PLAN_PLAY, PLAN_FACTS)
    assert recap["changed"] == 0 and recap["failed"] == 0, recap
    assert facts["refusal"] is None
    assert [entry["host"] for entry in facts["plan"]] == ["a", "a", "a"]
    assert facts["model"]["n_layer"] == model["block_count"]
    for entry in model["files"]:
        gets = blob_gets(hub, entry)
        assert gets and all(req["status"] == 206 and req["range"].startswith("bytes=") for req in gets), gets
        read = next(item for item in facts["header_reads"] if item["name"] == entry["name"])
        assert sum(req["sent"] for req in gets) == read["received"] < entry["size"] // 4
    token_stays_on_the_hub(hub)
    assert not (disk / "models").exists()
    print(f"header reads: {[(item['requests'], item['received']) for item in facts['header_reads']]}")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("llama_model_hf_repo=llamarpc/nope", "cannot list llamarpc/nope@main"),
        ("llama_model_hf_revision=v9", f"cannot list {REPO_ID}@v9"),
        ("llama_model_hf_pattern=*q4_k_m*.gguf", f"pattern '*q4_k_m*.gguf' matches no file in {REPO_ID}@main"),
    ],
)
def test_hub_refusals_change_nothing(tmp_path, hub, disk, extra, message):
    """The hub's 404s (RepoNotFound, RevisionNotFound) and a pattern matching nothing stop the role before any host
    is touched or any byte is fetched, with the repository and revision named."""
    proc = playbook(tmp_path, disk, hub, None, FACTS, "-e", extra)
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout[-3000:]
    assert hub.requests("hub") and hub.requests("cdn") == []
    assert not (disk / "models").exists()


@pytest.fixture
def spread(tmp_path):
    """Three local "hosts" a, b, c, each seeing its own tmpfs (a: too small for the model) at one path, ``root``: each
    host's Python runs in a mount namespace of its own where that host's disk is bind-mounted there. The role's one
    llama_model_dir then means a different filesystem on each host, as on real machines."""
    root = tmp_path / "hostroot"
    root.mkdir()
    with url_tests.tmpfs_hosts(tmp_path) as disks:
        interpreters = {}
        for name, disk in disks.items():
            wrapper = tmp_path / f"python-{name}"
            wrapper.write_text(
                "#!/bin/sh\n"
                f"exec unshare --mount --propagation private -- sh -c 'mount --bind {disk} {root} && "
                f'exec {sys.executable} "$@"\' python "$@"\n',
                encoding="utf-8",
            )
            wrapper.chmod(0o755)
            interpreters[name] = str(wrapper)
        yield {
            "model_dir": f"{root}/models/tiny",
            "interpreters": interpreters,
            "workers": ["b", "c"],
            "disks": disks,
        }


def test_shards_spread_over_the_candidates(tmp_path, model, hub, spread):
    """site.yml's model play over three hosts (the role's candidates mode, the other hosts reached by delegation):
    a (7 MiB) takes shard 1, b (12 MiB) shards 2 and 3, each fetched from the hub on its own host and verified there;
    a links them from its mounts (the mount step itself, sshfs between hosts, is the molecule scenarios' part)."""
    facts, recap = run_role(tmp_path, spread, hub, SITE_PLAY, FACTS, "--skip-tags", "mount")
    assert [shard["host"] for shard in facts["shards"]] == ["a", "b", "b"]
    for shard, entry in zip(facts["shards"], model["files"], strict=True):
        path = spread["disks"][shard["host"]] / "models/tiny" / entry["name"]
        assert sha256(path) == entry["sha256"]
        assert (path.stat().st_mode & 0o777) == 0o444
        if shard["host"] != "a":
            link = spread["disks"]["a"] / "models/tiny" / entry["name"]
            assert os.readlink(link) == f"/mnt/llamarpc-test/b/{entry['name']}"
    assert not (spread["disks"]["c"] / "models").exists() or not any((spread["disks"]["c"] / "models").rglob("*.gguf"))
    assert len(hub.requests("cdn", "GET")) == 3
    token_stays_on_the_hub(hub)
    hub.clear_log()
    facts, recap = run_role(tmp_path, spread, hub, SITE_PLAY, FACTS, "--skip-tags", "mount")
    assert recap["changed"] == 0 and recap["failed"] == 0, recap
    assert hub.requests("cdn") == []
