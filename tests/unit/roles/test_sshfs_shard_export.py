"""The sshfs_shard_export role's bind mount: when it is mounted anew, rendered by Ansible's own templating from the
role's task. The README promises that a view which shows another directory than the export directory (the directory
was removed and made again: the old bind still shows the removed one) is mounted anew, and that a second run with
an unchanged unit and a current view restarts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "sshfs_shard_export"
DIR = {"exists": True, "isdir": True, "inode": 1234, "dev": 2049}


def mount_task():
    tasks = yaml.safe_load((ROLE / "tasks" / "server.yml").read_text(encoding="utf-8"))
    block = next(task for task in tasks if "block" in task)["block"]
    return next(task for task in block if "ansible.builtin.systemd_service" in task)


def state(unit_changed, view):
    """The state the mount task asks systemd for: the export directory is DIR, its view ``view`` (a stat)."""
    task = mount_task()
    context = {
        "_sshfs_shard_export_bind_unit": {"changed": unit_changed},
        "_sshfs_shard_export_views": {"results": [{"stat": DIR}, {"stat": view}]},
    }
    templar = Templar(loader=DataLoader(), variables=context)
    for name, expression in task["vars"].items():  # task vars, in order (the later ones use the earlier)
        context[name] = templar.template(trust_as_template(expression))
        templar = Templar(loader=DataLoader(), variables=context)
    return templar.template(trust_as_template(task["ansible.builtin.systemd_service"]["state"]))


def test_a_current_view_and_an_unchanged_unit_restart_nothing():
    assert state(False, dict(DIR)) == "started"


@pytest.mark.parametrize(
    "view",
    [
        {**DIR, "inode": 99},  # the directory was removed and made again: the bind still shows the removed one
        {**DIR, "dev": 2050},  # another filesystem's directory (a disk mounted on the directory since)
        {"exists": True, "isdir": True, "inode": 777, "dev": 2049},  # the bare mount point: not mounted
    ],
    ids=["directory-made-again", "other-filesystem", "not-mounted"],
)
def test_a_view_of_another_directory_is_mounted_anew(view):
    assert state(False, view) == "restarted"


def test_a_changed_unit_is_mounted_anew():
    assert state(True, dict(DIR)) == "restarted"


def test_a_first_run_starts_the_unit_it_wrote():
    # No view yet (systemd makes the mount point when it mounts); the unit was just written.
    assert state(True, {"exists": False}) == "restarted"
    assert state(False, {"exists": False}) == "started"


def test_the_unit_is_a_read_only_bind_of_the_directory_named_after_its_mount_point():
    unit = (ROLE / "templates" / "bind.mount.j2").read_text(encoding="utf-8")
    assert "Options=bind,ro\n" in unit
    assert "What={{ sshfs_shard_export_dir }}\n" in unit
    assert "Where={{ _sshfs_shard_export_view }}\n" in unit
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    assert "llamarpc.cluster.systemd_escape_path" in variables["_sshfs_shard_export_unit"]
