"""The systemd_escape_path filter: the escape of sshfs_masked_mount's units, for a role's mount unit."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llamarpc.cluster.plugins.filter.systemd import FilterModule, systemd_escape_path


def test_the_export_view_names_its_mount_unit():
    assert systemd_escape_path("/srv/llamarpc/export/shards") == "srv-llamarpc-export-shards"
    assert systemd_escape_path("/srv/llama-rpc/my view") == "srv-llama\\x2drpc-my\\x20view"


@pytest.mark.parametrize("path", ["srv/x", "", None])
def test_a_relative_path_is_refused(path):
    with pytest.raises(AnsibleFilterError, match="absolute path"):
        systemd_escape_path(path)


def test_registered():
    assert FilterModule().filters()["systemd_escape_path"] is systemd_escape_path
