"""_seed_metrics: a seeding's rows as node exporter textfile families - bytes and files by source (a file shared by two
tensors of identical bytes counted once), tensors by state, every label value present."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _seed_metrics, _textfile

ROWS = [
    {"name": "a", "state": "written", "source": "local", "hash": "00000000000000aa", "size": 100},
    {"name": "b", "state": "written", "source": "local", "hash": "00000000000000aa", "size": 100},  # a's bytes
    {"name": "c", "state": "written", "source": "url", "hash": "00000000000000cc", "size": 30},
    {"name": "d", "state": "present", "source": "peer", "hash": "00000000000000dd", "size": 70},
    {"name": "e", "state": "unavailable", "source": None, "hash": None, "size": 50},
]


def values(found, name, label):
    return {labels[label]: value for labels, value in found[name]}


def test_bytes_and_files_by_source_count_a_shared_file_once_and_tensors_by_state(tmp_path):
    path = tmp_path / "llamarpc_tensor_cache_seed.prom"
    text = _seed_metrics.write(str(path), ROWS, 1700000000.5)
    assert path.read_text(encoding="utf-8") == text
    found = _textfile.parse(text)
    assert values(found, _seed_metrics.BYTES, "source") == {"local": 100, "peer": 0, "url": 30}
    assert values(found, _seed_metrics.FILES, "source") == {"local": 1, "peer": 0, "url": 1}
    assert values(found, _seed_metrics.TENSORS, "state") == {"present": 1, "written": 3, "unavailable": 1}
    assert found[_seed_metrics.FINISHED] == [({}, 1700000000.5)]
    assert "# TYPE llamarpc_tensor_cache_seeded_bytes gauge" in text


def test_a_seeding_with_nothing_to_seed_still_says_so_with_zeros():
    found = _textfile.parse(_textfile.render(_seed_metrics.families([], 5.0)))
    assert values(found, _seed_metrics.BYTES, "source") == {"local": 0, "peer": 0, "url": 0}
    assert values(found, _seed_metrics.TENSORS, "state") == {"present": 0, "written": 0, "unavailable": 0}
