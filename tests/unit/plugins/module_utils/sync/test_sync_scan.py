"""The readable summary of a scan."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _sync_scan


def test_summary_lines_put_unresolved_first():
    def hazard(name, reached, neutralised):
        return {
            "id": name,
            "where": name.upper(),
            "detail": "d",
            "model_dirs_reached": reached,
            "overlaps_model_dir": bool(reached),
            "neutralised": neutralised,
        }

    hazards = [hazard("b", [], False), hazard("a", ["/m"], True), hazard("c", ["/m"], False)]
    lines = _sync_scan.summary_lines(hazards, ["/m"])
    assert [line.split("]", maxsplit=1)[0] for line in lines] == ["[HAZARD", "[neutralised", "[elsewhere"]
    assert _sync_scan.summary_lines([], ["/m"]) == ["no deleting syncer found that could reach /m"]
