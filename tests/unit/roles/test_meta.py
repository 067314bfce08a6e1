"""The ansible-core releases the collection claims are the ones it tests.

meta/runtime.yml's requires_ansible admits from the oldest release tools/ansible_versions.sh tests (the matrix) and no
older one; every role's min_ansible_version says the same; the project's .venv pins the newest (requirements.txt).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def releases_under_test():
    """(release, python) of every ansible-core release tools/ansible_versions.sh names, and the .venv's pin."""
    text = (REPO / "tools" / "ansible_versions.sh").read_text(encoding="utf-8")
    older = re.search(r'^OLDER_RELEASES="([^"]*)"', text, re.MULTILINE).group(1).split()
    venv_python = re.search(r"^VENV_PYTHON=([0-9.]+)$", text, re.MULTILINE).group(1)
    pin = re.search(r"^ansible-core==([0-9.]+)$", (REPO / "requirements.txt").read_text(), re.MULTILINE).group(1)
    return [tuple(entry.split(":")) for entry in older] + [(pin, venv_python)]


def minor(version):
    return tuple(int(part) for part in version.split(".")[:2])


def requires_minimum():
    spec = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text(encoding="utf-8"))["requires_ansible"]
    match = re.fullmatch(r">=\s*([0-9.]+)", spec)
    assert match, f"requires_ansible {spec!r}: only a lower bound is tested"
    return match.group(1)


def test_requires_ansible_starts_at_the_oldest_tested_release():
    releases = sorted(minor(release) for release, _python in releases_under_test())
    assert minor(requires_minimum()) == releases[0], (requires_minimum(), releases)


def test_every_minor_release_from_the_oldest_to_the_newest_is_tested():
    releases = sorted(minor(release) for release, _python in releases_under_test())
    assert releases == [(2, n) for n in range(releases[0][1], releases[-1][1] + 1)]


@pytest.mark.parametrize("role", sorted(path.parent.parent.name for path in REPO.glob("roles/*/meta/main.yml")))
def test_role_meta_claims_the_same_minimum(role):
    meta = yaml.safe_load((REPO / "roles" / role / "meta" / "main.yml").read_text(encoding="utf-8"))
    assert minor(str(meta["galaxy_info"]["min_ansible_version"])) == minor(requires_minimum())


def required_role_options(argument_specs):
    """(entry point, option) of every top-level option an entry point marks required."""
    return [
        (entry, name)
        for entry, spec in ((argument_specs or {}).get("argument_specs") or {}).items()
        for name, option in ((spec or {}).get("options") or {}).items()
        if (option or {}).get("required")
    ]


def test_required_role_options_finds_a_required_option_of_any_entry_point():
    entry_points = {"main": {"options": {"a": {"type": "str"}}}, "seed": {"options": {"p": {"required": True}}}}
    specs = {"argument_specs": entry_points}
    assert required_role_options(specs) == [("seed", "p")]


@pytest.mark.parametrize("role", sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta").is_dir()))
def test_no_entry_point_requires_a_top_level_option(role):
    """site.yml's preflight checks every host's variables against the union of each role's entry points' options
    (module_utils/preflight/_preflight.role_options): an option an entry point requires would fail every site.yml run
    where it is not set - even when that entry point never runs. A sub-option (an element of a list) may be required."""
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    if path.is_file():
        assert required_role_options(yaml.safe_load(path.read_text(encoding="utf-8"))) == []
