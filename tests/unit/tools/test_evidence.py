# Copyright: (c) 2026, llamarpc.cluster contributors
# SPDX-License-Identifier: GPL-3.0-or-later
"""molecule/_shared/evidence.py: what a failed lab test saves, host by host, before destroy removes the lab."""

from __future__ import annotations

import evidence


def test_every_host_is_saved_and_one_that_does_not_answer_is_noted(tmp_path, monkeypatch):
    monkeypatch.setattr(evidence, "ROOT", tmp_path)
    monkeypatch.setenv("MOLECULE_SCENARIO_NAME", "default")
    asked = []

    def run(name, script):
        asked.append(name)
        if name == "node2":
            raise ConnectionError("host is powered off")
        return f"journal of {name}\n"

    folder = evidence.collect("tests/test_plan.py::test_local[x]", ["node2", "node1"], run)
    assert folder == tmp_path / "default" / "tests_test_plan.py_test_local_x"
    assert asked == ["node1", "node2"]
    assert (folder / "node1.txt").read_text() == "journal of node1\n"
    assert "could not read node2: ConnectionError: host is powered off" in (folder / "node2.txt").read_text()


def test_the_script_reads_the_units_journals_and_the_supervisors_files():
    for wanted in ("journalctl -b", "llamarpc-*", "/etc/llamarpc/coordinator/plan.json", "/run/llamarpc/coordinator/*"):
        assert wanted in evidence.HOST_SCRIPT
