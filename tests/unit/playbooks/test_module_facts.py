"""The facts the collection's modules return (``ansible_facts``) are read as ``ansible_facts.NAME``, never as injected
top-level variables: ansible-core 2.20 deprecates that injection (INJECT_FACTS_AS_VARS; its default turns off in
2.24), and 2.21 warns on every read.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SOURCES = ["roles/*/tasks/*.yml", "roles/*/vars/*.yml", "roles/*/handlers/*.yml", "roles/*/defaults/*.yml"]
SOURCES += ["roles/*/templates/*.j2", "playbooks/*.yml", "playbooks/tasks/*.yml", "molecule/*/*.yml"]


def module_facts():
    """Names of the facts any module or action plugin of the collection returns under ``ansible_facts``."""
    names = set()
    for path in [
        *REPO.glob("plugins/modules/*.py"),
        *REPO.glob("plugins/action/*.py"),
        *REPO.glob("plugins/module_utils/**/*.py"),
        *REPO.glob("lab/plugins/modules/*.py"),
        *REPO.glob("lab/plugins/module_utils/*.py"),
    ]:
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"""ansible_facts["']?\s*[=:]\s*\{\s*["']([a-z_]+)["']""", text))
    return names


def top_level_reads(text, names):
    """``NAME.x``, ``NAME[``, ``NAME |`` or ``NAME is ...`` for a fact NAME not reached through ``ansible_facts``."""
    found = set()
    for name in names:
        pattern = rf"(?<![\w./'\"-]){name}(?=\.[a-z_]|\[|\s*\||\s+is\s+(?:not\s+)?(?:defined|undefined|none)\b)"
        for match in re.finditer(pattern, text):
            before = text[max(0, match.start() - 14) : match.start()]
            if not before.endswith("ansible_facts."):
                found.add(name)
    return found


def test_the_modules_facts_are_found():
    assert {"llamarpc_platform", "llamarpc_memory", "sync_hazards", "tailscale", "rpc_endpoints"} <= module_facts()


def test_top_level_reads_tells_a_fact_from_its_namespace():
    names = {"sync_hazards", "llamarpc_platform"}
    assert top_level_reads("that: sync_hazards.unresolved | length == 0", names) == {"sync_hazards"}
    assert top_level_reads("when: llamarpc_platform is not defined", names) == {"llamarpc_platform"}
    assert top_level_reads("when: hostvars[h].llamarpc_platform is not defined", names) == set()  # a host's, below
    assert top_level_reads("that: ansible_facts.sync_hazards.unresolved | length == 0", names) == set()
    assert top_level_reads("dest: /etc/sync_hazards.list\nname: llamarpc_platform", names) == set()
    assert top_level_reads("msg: llamarpc_platform is not installed", names) == set()


def test_no_role_or_playbook_reads_a_module_fact_as_a_variable():
    names = module_facts()
    hostvars_reads = re.compile(rf"hostvars\[[^\]]+\]\.({'|'.join(names)})\b")
    found = {}
    for pattern in SOURCES:
        for path in REPO.glob(pattern):
            text = path.read_text(encoding="utf-8")
            reads = top_level_reads(text, names) | set(hostvars_reads.findall(text))
            if reads:
                found[str(path.relative_to(REPO))] = sorted(reads)
    assert found == {}, "read these as ansible_facts.NAME (or hostvars[host].ansible_facts.NAME)"
