"""Day 2, a model change (llama_model, site.yml, rollback.yml): the same weights split differently, staged while the
model served now keeps serving; the previous model kept for a rollback and a rollback that downloads nothing; the
model no longer kept removed, a file the collection did not place surviving; a change that cannot be staged refused
before any change. Greedy token ids stay those of a single process on the same files (test_1's reference). Through
the switch and the rollback a client of another host asks every 0.2 s: each answer is a completion or a 503 with
Retry-After from the gate, never a refused, reset or empty one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from clusterlib import (
    api,
    changed_nothing,
    client,
    deployed_plan,
    greedy,
    inventory_copy,
    inventory_vars,
    main_pid,
    playbook,
    started_at,
    through_switch,
)
from labtest import REPO, http_command, inventory_hosts, lab
from test_1_serving import SINGLE_PORT
from test_1_serving import single_process as serving_single_process

RECORD = ".llamarpc-models.json"
FOREIGN = "operator-notes.gguf"  # in the model directory, placed by no one but the operator
PROMPTS = ("The capital of France is", "Six small machines")
STATE = {}
SERVER = "llamarpc-server"
single_process = serving_single_process  # test_1's fixture: the single process on the same files, the reference


def tiny_set(directory, shards):
    """The tiny llama of seed 0 (the weights of demo.yml's tiny model) in ``shards`` files: the controller's paths."""
    subprocess.run(
        [sys.executable, str(REPO / "lab/tools/tiny_gguf.py"), "--out", str(directory), "--preset", "tiny",
         "--shards", str(shards)],
        check=True, capture_output=True,
    )  # fmt: skip
    return sorted(str(path) for path in directory.glob("*-of-*.gguf"))


def record(host="node1"):
    return json.loads(lab(host).file(f"{inventory_vars()['llama_model_dir']}/{RECORD}").content_string)


def served():
    return [entry["model"] for entry in record()["served"]]


def holds(name):
    """Hosts whose model directory holds ``name`` as a regular file."""
    directory = inventory_vars()["llama_model_dir"]
    return [host for host in inventory_hosts() if lab(host).file(f"{directory}/{name}").is_file]


def inodes(names):
    """``{host:name: inode}`` of the regular files ``names`` on every host (a file fetched again is a new inode)."""
    directory = inventory_vars()["llama_model_dir"]
    found = {}
    for host in inventory_hosts():
        for name in names:
            file = lab(host).file(f"{directory}/{name}")
            if file.is_file:
                found[f"{host}:{name}"] = lab(host).run_expect([0], f"stat -c %i {directory}/{name}").stdout.strip()
    return found


def ids():
    key = inventory_vars().get("llama_coordinator_api_key")
    got = {}
    for prompt in PROMPTS:
        status, body = api("/completion", {**greedy(prompt, 32), "return_tokens": True}, key=key)
        assert status == 200, body
        got[prompt] = body["tokens"]
    return got


def with_model(files, **more):
    def edit(data):
        data["vars"].update({"llama_model_files": files, "llama_coordinator_plan_strategy": "all", **more})

    return edit


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("model-change")
    return {shards: tiny_set(root / f"s{shards}", shards) for shards in (2, 4)}


def test_a_new_split_is_staged_and_the_previous_model_kept(tmp_path, sets):
    STATE["before"] = {"served": served(), "ids": ids(), "record": record()}
    previous_files = STATE["before"]["record"]["models"][served()[0]]["files"]
    node1 = lab("node1")
    node1.run_expect([0], f"echo mine > {inventory_vars()['llama_model_dir']}/{FOREIGN}")
    with client(pause=0.2) as answers:
        result = playbook(inventory_copy(tmp_path, with_model(sets[2])), name="site.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    problems = through_switch(answers, started_at(node1, SERVER))
    assert not problems, "\n".join(problems)
    assert served()[1] == STATE["before"]["served"][0] and len(served()) == 2
    assert all(holds(name) for name in previous_files), "the previous model's shards stay for a rollback"
    assert deployed_plan()["model_path"].endswith("-00001-of-00002.gguf")
    assert ids() == STATE["before"]["ids"]  # the same weights: the ids test_1 proved a single process gives


def test_after_the_change_the_ids_are_a_single_processs_on_the_new_files(single_process):  # noqa: F811
    for prompt in PROMPTS:
        body = json.dumps({**greedy(prompt, 32), "return_tokens": True})
        alone = single_process.run_expect([0], http_command(f"http://127.0.0.1:{SINGLE_PORT}/completion", body))
        assert json.loads(alone.stdout)["tokens"] == ids()[prompt]


def test_a_rollback_serves_the_previous_model_without_a_download_and_removes_the_one_not_kept(tmp_path, sets):
    now = served()[0]
    new_files = record()["models"][now]["files"]
    previous = inodes(STATE["before"]["record"]["models"][STATE["before"]["served"][0]]["files"])
    # keep_previous 0 for this run: after the rollback only the model served is kept - the 2-shard set goes.
    inventory = inventory_copy(tmp_path, with_model(sets[2], llama_model_keep_previous=0))
    with client(pause=0.2) as answers:
        result = playbook(inventory, name="rollback.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    problems = through_switch(answers, started_at(lab("node1"), SERVER))
    assert not problems, "\n".join(problems)
    assert served() == [STATE["before"]["served"][0]]
    assert inodes(STATE["before"]["record"]["models"][STATE["before"]["served"][0]]["files"]) == previous
    assert ids() == STATE["before"]["ids"]
    assert not any(holds(name) for name in new_files), "the model no longer kept is removed"
    assert lab("node1").file(f"{inventory_vars()['llama_model_dir']}/{FOREIGN}").content_string == "mine\n"


def test_a_model_that_cannot_be_staged_is_refused_before_any_change(tmp_path, sets):
    node1 = lab("node1")
    pid = main_pid(node1, "llamarpc-server")
    huge = with_model(sets[4], llama_model_reserve="100T")
    result = playbook(inventory_copy(tmp_path, huge), name="site.yml")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "nothing was downloaded" in output and "does not fit" in output, output[-3000:]
    assert changed_nothing(result), output[-3000:]
    assert main_pid(node1, "llamarpc-server") == pid
    assert served() == [STATE["before"]["served"][0]]
    assert not any(holds(name.rsplit("/", 1)[1]) for name in sets[4])
