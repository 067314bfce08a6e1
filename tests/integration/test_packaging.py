"""The two collections as users get them: built with ``ansible-galaxy collection build``, installed from their
tarballs, used from a directory outside the repository. llamarpc.cluster (the top directory) is what users deploy;
llamarpc.lab (lab/) is the local lab, the demo and the benchmark lab, and nothing of it is in the product's tarball.

The build runs on a copy of the checkout's files (tracked, and untracked but not ignored, like tools/sanity.sh) with
the clutter a working checkout has planted into it: a lab inventory naming the lab's key, benchmark results, test
output, caches at the top and below, a previous build. ``build_ignore`` in galaxy.yml must keep all of it out, and
every file of plugins/, roles/ and playbooks/ must be in (of lab/ for the lab). The installed copies are then used
with no ansible.cfg and only the temporary collections path: every playbook of both passes ``--syntax-check`` by its
FQCN, ``ansible-doc`` documents every module and every role from the installed files, and site.yml's preflight runs
and catches a typo. Only temporary directories; no network (the tarballs are installed offline, without
dependencies).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TIMEOUT = 120

# What a working checkout holds and no user needs (galaxy.yml's build_ignore).
EXCLUDED_PREFIXES = (
    "molecule/",
    "tests/",
    "benchmarks/",
    "lab/",
    "tools/",
    "inventories/lab/",
    "inventories/bench/",
    "llamarpc-benchmarks/",
    "results/",
    ".cache/",
    ".venv/",
    ".collections/",
    ".config/",
    ".ci/",
)
EXCLUDED_FILES = {
    "Makefile",
    "ansible.cfg",
    "pyproject.toml",
    "requirements.txt",
    "requirements-webui.txt",
    ".gitignore",
    ".ansible-lint",
    ".yamllint",
}
CACHE_NAMES = {"__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", ".mypy_cache"}
# Planted into the copy before the build: (path, content).
CLUTTER = (
    ("inventories/lab/hosts.yml", "all: {vars: {ansible_ssh_private_key_file: /var/cache/llamarpc/lab/id_ed25519}}\n"),
    ("inventories/lab/lab.known_hosts", "10.213.0.11 ssh-ed25519 AAAA\n"),
    ("inventories/bench/hosts.yml", "all: {}\n"),
    ("benchmarks/results/20261201T000000Z/results.json", "{}\n"),
    ("llamarpc-benchmarks/20261201T000000Z/report.md", "# report\n"),
    ("tests/output/molecule/worker.log", "log\n"),
    (".cache/real-model/model.gguf", "GGUF\n"),
    (".venv/pyvenv.cfg", "home = /usr/bin\n"),
    (".pytest_cache/v/cache/lastfailed", "{}\n"),
    (".ruff_cache/CACHEDIR.TAG", "Signature\n"),
    (".hypothesis/examples/x", "x\n"),
    ("plugins/modules/__pycache__/preflight.cpython-311.pyc", "pyc\n"),
    ("plugins/module_utils/stray.pyc", "pyc\n"),
    ("lab/roles/lab/.pytest_cache/v/x", "x\n"),
    ("llamarpc-cluster-0.0.1.tar.gz", "old build\n"),
    ("lab/llamarpc-lab-0.0.1.tar.gz", "old build\n"),
    ("lab/plugins/modules/__pycache__/lab_host.cpython-311.pyc", "pyc\n"),
)
# The lab collection's own directory in the checkout, and what of it must never reach the product's tarball.
LAB = REPO / "lab"
LAB_MODULES = sorted(p.stem for p in (LAB / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
LAB_ROLES = sorted(p.name for p in (LAB / "roles").iterdir() if p.is_dir())
LAB_PLAYBOOKS = sorted(p.stem for p in (LAB / "playbooks").glob("*.yml"))


def run(args, cwd, env=None):
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert result.returncode == 0, f"{' '.join(map(str, args))}\n{result.stdout}\n{result.stderr}"
    return result


def checkout_files():
    """The checkout's own files (tracked, and untracked but not ignored), as tools/sanity.sh copies them."""
    out = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], REPO).stdout
    return sorted({name for name in out.split("\0") if name and (REPO / name).exists()})


@pytest.fixture(scope="module")
def source_files():
    return checkout_files()


@pytest.fixture(scope="module")
def src(tmp_path_factory, source_files):
    """A copy of the checkout with the clutter planted."""
    src = tmp_path_factory.mktemp("src") / "cluster"
    for name in source_files:
        path, dest = REPO / name, src / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():  # .collections/ansible_collections/llamarpc/cluster -> ../../..
            dest.symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, dest)
    for name, content in CLUTTER:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(content, encoding="utf-8")
    return src


def build(tmp_path_factory, directory, name):
    """``ansible-galaxy collection build`` of ``directory``; the tarball and its member names."""
    out = tmp_path_factory.mktemp("dist")
    run([BIN / "ansible-galaxy", "collection", "build", "--output-path", out, directory], directory, ansible_env(out))
    (tarball,) = out.glob(f"llamarpc-{name}-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = {member.name + ("/" if member.isdir() else "") for member in archive.getmembers()}
    return tarball, names


@pytest.fixture(scope="module")
def built(tmp_path_factory, src):
    """The product's tarball (llamarpc.cluster, the top directory); its member names."""
    return build(tmp_path_factory, src, "cluster")


@pytest.fixture(scope="module")
def built_lab(tmp_path_factory, src):
    """The lab's tarball (llamarpc.lab, lab/); its member names."""
    return build(tmp_path_factory, src / "lab", "lab")


@pytest.fixture(scope="module")
def installed(tmp_path_factory, built, built_lab):
    """Both tarballs installed offline into a temporary collections path; (collections path, a cwd outside the
    repo)."""
    collections = tmp_path_factory.mktemp("collections")
    cwd = tmp_path_factory.mktemp("user")
    assert not cwd.is_relative_to(REPO)
    for tarball in (built[0], built_lab[0]):
        run(
            [BIN / "ansible-galaxy", "collection", "install", "--offline", "--no-deps", "-p", collections, tarball],
            cwd,
            ansible_env(collections),
        )
    return collections, cwd


def ansible_env(collections):
    """No ansible.cfg, no project settings: only the given collections path (and a throwaway ANSIBLE_HOME)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_HOME=str(Path(collections) / ".ansible-home"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
    )
    return env


def collection_dir(collections, name="cluster"):
    return Path(collections) / "ansible_collections" / "llamarpc" / name


def test_the_tarball_leaves_out_what_users_do_not_need(built):
    names = built[1]
    leaked = sorted(
        name
        for name in names
        if name.startswith(EXCLUDED_PREFIXES)
        or name in EXCLUDED_FILES
        or CACHE_NAMES & set(name.split("/"))
        or name.endswith((".pyc", ".tar.gz"))
    )
    assert leaked == [], f"build_ignore in galaxy.yml lets these into the collection: {leaked}"


def test_the_products_tarball_holds_nothing_of_the_lab(built):
    """No lab module, role or playbook (nor its module_utils, tools or settings) in llamarpc.cluster."""
    names = built[1]
    assert LAB_MODULES and LAB_ROLES and {"lab_up", "lab_down", "demo"} <= set(LAB_PLAYBOOKS)
    lab_files = {f"plugins/modules/{m}.py" for m in LAB_MODULES} | {f"playbooks/{p}.yml" for p in LAB_PLAYBOOKS}
    lab_files |= {f"plugins/module_utils/{p.name}" for p in (LAB / "plugins" / "module_utils").glob("*.py")}
    assert sorted(lab_files & names) == []
    assert sorted(n for n in names if n.startswith(tuple(f"roles/{r}/" for r in LAB_ROLES))) == []
    assert sorted(n for n in names if n.startswith(("lab/", "tools/"))) == []


def test_the_labs_tarball_leaves_out_caches_and_holds_the_lab(built_lab, source_files):
    names = built_lab[1]
    leaked = sorted(n for n in names if CACHE_NAMES & set(n.split("/")) or n.endswith((".pyc", ".tar.gz")))
    assert leaked == [], f"build_ignore in lab/galaxy.yml lets these into the collection: {leaked}"
    wanted = {"README.md", "meta/runtime.yml", "MANIFEST.json", "FILES.json"}
    wanted |= {name.removeprefix("lab/") for name in source_files if name.startswith("lab/")} - {"galaxy.yml"}
    assert sorted(wanted - names) == []


def test_the_tarball_holds_everything_users_run(built, source_files):
    names = built[1]
    wanted = {"README.md", "LICENSE", "meta/runtime.yml", "MANIFEST.json", "FILES.json"}
    wanted |= {name for name in source_files if name.startswith(("plugins/", "roles/", "playbooks/"))}
    assert sorted(wanted - names) == []


@pytest.mark.parametrize("which", ["built", "built_lab"])
def test_what_the_playbooks_run_from_the_collection_ships(which, request):
    """A file a shipped playbook names under ``{{ playbook_dir }}/../`` (demo.yml's tools) is in its tarball."""
    tarball, names = request.getfixturevalue(which)
    referenced = set()
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.startswith("playbooks/") and member.name.endswith(".yml"):
                text = archive.extractfile(member).read().decode("utf-8")
                referenced |= set(re.findall(r"playbook_dir \}\}/\.\./([\w./-]+\.(?:py|sh|ya?ml|j2|json))", text))
    assert sorted(referenced - names) == []


def test_the_installed_collection_works_outside_the_repository(installed):
    collections, cwd = installed
    env = ansible_env(collections)
    root = collection_dir(collections)
    assert (root / "MANIFEST.json").is_file()

    playbooks = sorted(p.stem for p in (REPO / "playbooks").glob("*.yml"))
    assert "site" in playbooks
    run(
        [BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,", *(f"llamarpc.cluster.{p}" for p in playbooks)],
        cwd,
        env,
    )

    modules = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    docs = json.loads(
        run([BIN / "ansible-doc", "--json", *(f"llamarpc.cluster.{m}" for m in modules)], cwd, env).stdout
    )
    assert sorted(docs) == [f"llamarpc.cluster.{m}" for m in modules]
    for name, doc in docs.items():
        assert Path(doc["doc"]["filename"]).is_relative_to(root), (name, doc["doc"]["filename"])
        assert doc["doc"]["short_description"] and doc["examples"], name

    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
    assert len(roles) == len([p for p in (REPO / "roles").iterdir() if p.is_dir()])
    docs = json.loads(
        run([BIN / "ansible-doc", "-t", "role", "--json", *(f"llamarpc.cluster.{r}" for r in roles)], cwd, env).stdout
    )
    assert sorted(docs) == [f"llamarpc.cluster.{r}" for r in roles]
    for name, doc in docs.items():
        assert Path(doc["path"]).is_relative_to(root), (name, doc["path"])
        assert doc["entry_points"]["main"]["short_description"], name


def test_the_installed_lab_works_outside_the_repository(installed):
    """The lab's playbooks, modules and role from the installed llamarpc.lab, beside the installed product."""
    collections, cwd = installed
    env = ansible_env(collections)
    root = collection_dir(collections, "lab")
    assert (root / "MANIFEST.json").is_file()
    run(
        [BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,", *(f"llamarpc.lab.{p}" for p in LAB_PLAYBOOKS)],
        cwd,
        env,
    )
    docs = json.loads(
        run([BIN / "ansible-doc", "--json", *(f"llamarpc.lab.{m}" for m in LAB_MODULES)], cwd, env).stdout
    )
    assert sorted(docs) == [f"llamarpc.lab.{m}" for m in LAB_MODULES]
    for name, doc in docs.items():
        assert Path(doc["doc"]["filename"]).is_relative_to(root), (name, doc["doc"]["filename"])
    docs = json.loads(
        run([BIN / "ansible-doc", "-t", "role", "--json", *(f"llamarpc.lab.{r}" for r in LAB_ROLES)], cwd, env).stdout
    )
    assert sorted(docs) == [f"llamarpc.lab.{r}" for r in LAB_ROLES]


def test_the_installed_site_preflight_catches_a_typo(installed, tmp_path):
    """site.yml's first play, run from the installed copy: its action plugin reads the installed roles' specs."""
    collections, cwd = installed
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "llama_model_files": [str(tmp_path / "model-00001-of-00001.gguf")],
                        "llamarpc_mesh_provder": "tailscale",
                    },
                    "hosts": {"node1": {"ansible_host": "127.0.0.11"}},
                    "children": {"coordinator": {"hosts": {"node1": None}}, "rpc_workers": {"hosts": {"node1": None}}},
                }
            }
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [BIN / "ansible-playbook", "-i", hosts, "llamarpc.cluster.site", "--tags", "site_preflight"],
        cwd=cwd,
        env=ansible_env(collections),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "`llamarpc_mesh_provder`: did you mean `llamarpc_mesh_provider`?" in output, output
    assert "PLAY [Mesh" not in output, output


def test_the_installed_demo_writes_to_the_users_cache_not_the_collection(installed, tmp_path):
    """demo.yml's tiny model, made by the installed lab: into $XDG_CACHE_HOME/llamarpc, and the collections' own
    files stay exactly as installed (an installed collection may be read-only or shared)."""
    collections, cwd = installed
    root = Path(collections) / "ansible_collections" / "llamarpc"
    before = {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}
    cache = tmp_path / "xdg-cache"
    env = dict(ansible_env(collections), XDG_CACHE_HOME=str(cache), HOME=str(tmp_path), PWD=str(cwd))
    command = [BIN / "ansible-playbook", "-i", "localhost,", "-e", "ansible_connection=local"]
    command += ["-e", f"ansible_python_interpreter={sys.executable}"]
    command += ["-e", "llamarpc_demo_model=tiny", "--tags", "demo_model", "llamarpc.lab.demo"]
    run(command, cwd, env)
    assert (cache / "llamarpc" / "demo-model" / "llamarpc-tiny-seed0.manifest.json").is_file()
    assert sorted((cache / "llamarpc" / "demo-model").glob("*.gguf")), list(cache.rglob("*"))
    after = {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert changed == [], f"the demo wrote into the installed collection: {changed}"
