"""Targets of syncers and their relation to the model directories."""

from __future__ import annotations

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _sync_paths


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/data/models/", {"kind": "local", "host": None, "path": "/data/models/"}),
        ("node2:/data/x", {"kind": "ssh", "host": "node2", "path": "/data/x"}),
        ("pool@10.0.0.2:/data/x", {"kind": "ssh", "host": "10.0.0.2", "path": "/data/x"}),
        ("[fd00::2]:/data/x", {"kind": "ssh", "host": "[fd00::2]", "path": "/data/x"}),
        ("node2::models/x", {"kind": "rsyncd", "host": "node2", "path": None, "module": "models/x"}),
        ("rsync://u@node2/models", {"kind": "rsyncd", "host": "node2", "path": None, "module": "models"}),
        (None, {"kind": "unknown", "host": None, "path": None}),
    ],
)
def test_split_target(target, expected):
    assert _sync_paths.split_target(target) == expected


# -- paths and protection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/data/models", "same"),
        ("/data/models/", "same"),
        ("/data", "contains"),
        ("/", "contains"),
        ("/data/models/qwen", "inside"),
        ("/data/modelsx", None),
        ("relative/path", None),
        ("{host}/x", None),
    ],
)
def test_relation(path, expected):
    assert _sync_paths.relation(path, "/data/models") == expected


def test_reached_is_conservative_for_unknown_paths():
    assert _sync_paths.reached("$DST", ["/a", "/b"]) == ["/a", "/b"]
    assert _sync_paths.reached("/c", ["/a", "/b"]) == []
