"""The coordinator's status record (llama_coordinator_status): a mount's state from its bounded listing's exit code
(chained regex_replace in the role's status.yml before), the SSHFS mounts from mountinfo, /health and the workers'
memory."""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _coordinator_status as status

GIB = 1 << 30


@pytest.mark.parametrize(
    ("rc", "state"),
    [
        (0, "ok"),
        (124, "HUNG (no answer within 5 s)"),  # timeout: the listing did not finish
        (137, "HUNG (no answer within 5 s)"),  # killed by the KILL signal
        (-9, "HUNG (no answer within 5 s)"),
        (2, "ERROR"),  # ls: no such directory, permission denied, transport endpoint not connected
        (1, "ERROR"),
        (125, "ERROR"),  # timeout itself failed
    ],
)
def test_mount_state(rc, state):
    assert status.mount_state(rc) == state


MOUNTINFO = """\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
61 22 0:52 / /mnt/llamarpc/node2 rw,nosuid,nodev,relatime shared:30 - fuse.sshfs pool@10.0.0.2:/shards rw,user_id=0
62 22 0:53 / /mnt/llamarpc/node\\0403 rw,nosuid,nodev,relatime shared:31 - fuse.sshfs pool@10.0.0.3:/shards rw
63 22 0:54 / /srv/other rw,relatime shared:32 - fuse.sshfs x@y:/z rw
64 22 0:55 / /mnt/llamarpc/tmp rw,relatime shared:33 - tmpfs tmpfs rw
65 22 0:56 / /mnt/llamarpcx rw,relatime shared:34 - fuse.sshfs x@y:/z rw
"""


def test_sshfs_mounts_below_the_root_from_mountinfo():
    assert status.sshfs_mounts(MOUNTINFO, "/mnt/llamarpc") == ["/mnt/llamarpc/node2", "/mnt/llamarpc/node 3"]
    assert status.sshfs_mounts(MOUNTINFO, "/mnt/llamarpc/") == ["/mnt/llamarpc/node2", "/mnt/llamarpc/node 3"]
    assert status.sshfs_mounts("", "/mnt/llamarpc") == []


def test_health_text():
    assert status.health_text(200, '{"status": "ok"}') == "200 ok"
    assert status.health_text(503, '{"error": {"code": 503, "message": "Loading model"}}') == "503 Loading model"
    assert status.health_text(500, "not json") == "500 "
    assert status.health_text("Connection refused", None) == "no answer: Connection refused"


def test_memory_available_lists_the_workers_that_did_not_answer_last():
    memory = {"n1": {"available": 4 * GIB}, "n2": {}, "n3": {"available": 512 << 20}}
    assert status.memory_available(["n1", "n2", "n3", "n4"], memory) == [
        "n1: 4.00 GB",
        "n3: 512.00 MB",
        "n2: no answer",
        "n4: no answer",
    ]


def test_the_record():
    deployed = {"url": "http://10.0.0.1:8080", "plan": {"table": ["node  endpoint"]}}
    supervisor = {"verdict": "ok", "workers": {"n1": "serving"}}
    doc = status.record(
        deployed, "200 ok", supervisor, [("/mnt/llamarpc/n2", "ok")], ["n1"], {"n1": {"available": GIB}}
    )
    assert doc == {
        "api": "http://10.0.0.1:8080",
        "health": "200 ok",
        "supervisor": supervisor,
        "plan": ["node  endpoint"],
        "mounts": ["/mnt/llamarpc/n2: ok"],
        "workers": {"n1": "serving"},
        "memory_available": ["n1: 1.00 GB"],
    }
