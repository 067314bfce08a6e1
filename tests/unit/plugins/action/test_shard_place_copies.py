"""The controller side of gguf_shard_place: a host that holds its shards costs one module run and no temporary
directory (a rerun's case); only a shard the host lacks brings a temporary directory, the copy and a second run."""

from __future__ import annotations

from action_harness import REMOTE_TMP, run_action

from ansible_collections.llamarpc.cluster.plugins.action import gguf_shard_place as action_module

MODULE = "llamarpc.cluster.gguf_shard_place"
SHARDS = [
    {"name": f"m-0000{n}-of-00002.gguf", "size": 10 * n, "sha256": str(n) * 64, "src": f"/ctl/m-0000{n}-of-00002.gguf"}
    for n in (1, 2)
]
ARGS = {"model_dir": "/data/models/model", "shards": SHARDS}


def run(answers):
    """The action with the host's answers (one per module run, in order); returns (result, calls made)."""
    return run_action(action_module.ActionModule, ARGS, answers, task_vars={"inventory_hostname": "node2"})


def test_a_host_that_holds_its_shards_costs_one_module_run_and_no_temporary_directory():
    assert action_module.ActionModule.TRANSFERS_FILES is False  # else ActionBase makes one before every run
    result, calls = run([{"changed": False, "need_source": [], "fetched": [], "actions": []}])
    assert [call[:2] for call in calls] == [("module", MODULE)]
    assert all(shard["src"] is None for shard in calls[0][2]["shards"])  # the host is asked first, nothing copied
    assert result["changed"] is False


def test_a_shard_the_host_lacks_is_copied_through_a_temporary_directory_and_placed_by_a_second_run():
    second = SHARDS[1]["name"]
    result, calls = run(
        [
            {"changed": False, "need_source": [second], "fetched": [], "actions": []},
            {"changed": True, "fetched": [second], "actions": [f"place {second}"]},
        ]
    )
    assert [call[0] for call in calls] == ["module", "tmp", "transfer", "perms", "module"]
    assert calls[2][1:] == (SHARDS[1]["src"], f"{REMOTE_TMP}/{second}")
    assert [shard["src"] for shard in calls[4][2]["shards"]] == [f"{REMOTE_TMP}/{second}"]
    assert result["changed"] is True and result["fetched"] == [second]
