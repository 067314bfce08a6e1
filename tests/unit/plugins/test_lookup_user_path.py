"""The user_path lookup: the user's cache or working directory, never a path that climbs out of it; and no shipped
playbook or role default writes beside the playbooks (inside an installed collection)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils import _paths

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"XDG_CACHE_HOME": "/x/cache", "HOME": "/home/me"}, "/x/cache/llamarpc/real-model"),
        ({"XDG_CACHE_HOME": "", "HOME": "/home/me"}, "/home/me/.cache/llamarpc/real-model"),
        ({"HOME": "/home/me"}, "/home/me/.cache/llamarpc/real-model"),
    ],
)
def test_the_cache_follows_xdg_then_home(environ, expected):
    assert _paths.user_path("real-model", environ=environ) == expected


def test_the_working_directory_is_the_shells_pwd():
    environ = {"PWD": "/home/me/cluster", "HOME": "/home/me"}
    assert _paths.user_path("inventories/lab/hosts.yml", base="cwd", environ=environ) == (
        "/home/me/cluster/inventories/lab/hosts.yml"
    )


def test_without_pwd_the_processs_own_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert _paths.user_path("x", base="cwd", environ={"HOME": "/home/me"}) == str(tmp_path / "x")


@pytest.mark.parametrize("part", ["../escape", "a/../../b", "/etc/passwd", ".."])
def test_parts_cannot_leave_the_base(part):
    with pytest.raises(ValueError, match="relative path without"):
        _paths.user_path(part, environ={"HOME": "/home/me"})


def test_the_lookup_as_ansible_runs_it(tmp_path):
    """Through ansible itself (its options from the plugin's docs): the default base, base=cwd, a refusal."""
    env = {**os.environ, "XDG_CACHE_HOME": "/x/cache", "PWD": "/work/here", "ANSIBLE_NOCOLOR": "1"}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(REPO / ".collections")
    env.pop("ANSIBLE_CONFIG", None)
    expr = (
        "{{ [lookup('llamarpc.cluster.user_path', 'real-model', 'shards'),"
        " lookup('llamarpc.cluster.user_path', base='cwd')] | to_json }}"
    )

    def debug(msg):
        command = [str(BIN / "ansible"), "localhost", "-c", "local", "-m", "ansible.builtin.debug", "-a", f"msg={msg}"]
        return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)

    good = debug(expr)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "/x/cache/llamarpc/real-model/shards" in good.stdout and "/work/here" in good.stdout, good.stdout
    bad = debug("{{ lookup('llamarpc.cluster.user_path', '../up') }}")
    assert bad.returncode != 0 and "user_path: each part must be a relative path" in bad.stdout + bad.stderr


# `{{ playbook_dir }}/../X` or `playbook_dir ~ '/../X'`: a path beside the playbooks, inside an installed collection.
BESIDE_PLAYBOOKS = re.compile(r"playbook_dir(?:\s*\}\}\s*|\s*~\s*['\"])/\.\./([\w.-]+)")


def test_shipped_playbooks_and_roles_reach_beside_the_playbooks_only_to_read_tools():
    """Output paths come from the user_path lookup; the one thing a shipped playbook may name beside itself is a
    shipped script in tools/ (read, never written): only the lab's do (lab/tools), the product's name nothing."""
    shipped = []
    for root in (REPO, REPO / "lab"):
        shipped += [*root.glob("playbooks/*.yml"), *root.glob("roles/*/defaults/*.yml")]
        shipped += [*root.glob("roles/*/vars/*.yml"), *root.glob("roles/*/meta/argument_specs.yml")]
        shipped += [*root.glob("roles/*/tasks/*.yml")]
    assert len(shipped) > 20
    reaches = {
        (str(path.relative_to(REPO)), target)
        for path in shipped
        for target in BESIDE_PLAYBOOKS.findall(path.read_text(encoding="utf-8"))
    }
    assert ("lab/playbooks/demo.yml", "tools") in reaches  # the pattern sees demo.yml's tools/tiny_gguf.py
    assert sorted(item for item in reaches if item[1] != "tools" or not item[0].startswith("lab/")) == []
