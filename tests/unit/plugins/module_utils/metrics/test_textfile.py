"""Metrics for node exporter's textfile collector: the text format, the naming rules, the atomic write, and the one
parser the merging writers use (its own output read back)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _textfile


def families():
    return [
        _textfile.family("llamarpc_worker_up", "gauge", "Up.", [({"worker": "node2"}, True), ({"worker": "n3"}, 0)]),
        _textfile.family("llamarpc_replans_total", "counter", "Re-plans.", [({}, 2)]),
        _textfile.family("llamarpc_x_seconds", "gauge", "A fraction.", [({"path": 'a"b\\c\nd'}, 1.5)]),
    ]


def test_render_writes_help_type_and_sorted_escaped_labels():
    text = _textfile.render(families())
    assert text.splitlines() == [
        "# HELP llamarpc_worker_up Up.",
        "# TYPE llamarpc_worker_up gauge",
        'llamarpc_worker_up{worker="node2"} 1',
        'llamarpc_worker_up{worker="n3"} 0',
        "# HELP llamarpc_replans_total Re-plans.",
        "# TYPE llamarpc_replans_total counter",
        "llamarpc_replans_total 2",
        "# HELP llamarpc_x_seconds A fraction.",
        "# TYPE llamarpc_x_seconds gauge",
        'llamarpc_x_seconds{path="a\\"b\\\\c\\nd"} 1.5',
    ]


def test_parse_reads_back_what_render_wrote():
    parsed = _textfile.parse(_textfile.render(families()))
    assert parsed["llamarpc_x_seconds"] == [({"path": 'a"b\\c\nd'}, 1.5)]
    assert parsed["llamarpc_worker_up"] == [({"worker": "node2"}, 1.0), ({"worker": "n3"}, 0.0)]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (_textfile.family("llamarpc_replans", "counter", "x", []), "ends in _total"),
        (_textfile.family("llamarpc-up", "gauge", "x", []), "no Prometheus metric name"),
        (_textfile.family("llamarpc_up", "histogram", "x", []), "type"),
        (_textfile.family("llamarpc_up", "gauge", "x", [({"__name__": "x"}, 1)]), "no label name"),
    ],
)
def test_names_types_and_labels_that_break_the_conventions_are_refused(bad, message):
    with pytest.raises(_textfile.MetricError, match=message):
        _textfile.render([bad])


def test_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path, sync_trace):
    path = tmp_path / "llamarpc_site.prom"
    path.write_text("old\n")
    _textfile.write(str(path), families())
    sync_trace.assert_durable(path)
    assert sorted(os.listdir(tmp_path)) == ["llamarpc_site.prom"]
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    with pytest.raises(_textfile.MetricError, match=r"\*\.prom"):
        _textfile.write(str(tmp_path / "x.txt"), families())


def test_without_timestamps_ignores_only_time_samples():
    stamped = [_textfile.family("llamarpc_x_timestamp_seconds", "gauge", "When.", [({}, 5)])]
    one, two = (_textfile.render(families() + stamped).replace(" 5\n", f" {n}\n") for n in (5, 6))
    assert one != two and _textfile.without_timestamps(one) == _textfile.without_timestamps(two)


def test_write_quietly_reports_a_missing_directory_and_never_raises(tmp_path):
    assert "does not exist" in _textfile.write_quietly(str(tmp_path / "no" / "a.prom"), families())
    assert _textfile.write_quietly("", families()) is None
    assert _textfile.write_quietly(str(tmp_path / "a.prom"), families()) is None


@pytest.mark.skipif(shutil.which("promtool") is None and not os.environ.get("CI"), reason="promtool not installed")
def test_promtool_accepts_the_text(tmp_path):
    """Prometheus' own linter (tools/setup.sh installs Debian's prometheus for promtool)."""
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=_textfile.render(families()),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
