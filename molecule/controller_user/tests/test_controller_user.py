"""site.yml as an unprivileged controller user: the cluster answers, and the user's own cache holds the build."""

import grp
import json
import pwd
import re
from pathlib import Path

import testinfra.utils.ansible_runner
import yaml
from labtest import INVENTORY, REPO, host_state, lab

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
COORDINATOR = RUNNER.get_hosts("coordinator")[0]


def test_the_controller_user_is_unprivileged():
    user = pwd.getpwnam("llamactl")
    assert user.pw_uid != 0
    assert not [group.gr_name for group in grp.getgrall() if "llamactl" in group.gr_mem]  # no sudo, wheel, admin


def test_the_build_the_workers_run_came_from_the_users_own_cache():
    # The key of the build each worker runs (its directory under llama_cpp_install_dir) must be one the user's
    # cache records: site.yml as llamactl shipped from there, not from a root-owned cache.
    records = list(Path("/home/llamactl/.cache/llamarpc/llama-cpp").glob("*/build.json"))
    assert records and all(path.stat().st_uid == pwd.getpwnam("llamactl").pw_uid for path in records)
    keys = {json.loads(path.read_text())["key"] for path in records}
    for name in RUNNER.get_hosts("rpc_workers"):
        exec_start = lab(name).check_output("systemctl show -p ExecStart --value llamarpc-rpc-worker")
        running = re.search(r"/opt/llamarpc/llama\.cpp/([^/]+)/bin/", exec_start)
        assert running, exec_start
        assert running.group(1) in keys, f"{name} runs build {running.group(1)}, not one of {sorted(keys)}"


def test_the_cluster_answers():
    address = RUNNER.get_variables(COORDINATOR)["ansible_host"]
    url = f"http://{address}:8080/health"
    probe = f"import urllib.request; print(urllib.request.urlopen('{url}', timeout=30).read().decode())"
    out = lab(COORDINATOR).check_output(f'python3 -c "{probe}"')
    assert json.loads(out).get("status") == "ok", out


def _installed(host):
    """The packages dpkg holds as installed on ``host``."""
    listing = host.check_output("dpkg-query -W -f='${db:Status-Status} ${Package}\\n'")
    return {line.split()[1] for line in listing.splitlines() if line.startswith("installed ")}


def test_a_cache_hit_installs_no_toolchain_on_any_host():
    """The README's "a cache hit does not touch the build host": converge found the build in the user's cache (the test
    above), so no host got a compiler - neither llama_cpp's build packages nor the worker's helper's (its helper ships
    with the build). What the roles did install (llama.cpp's runtime packages, on every host that runs a build) shows
    the comparison sees it."""
    defaults = yaml.safe_load((REPO / "roles" / "llama_cpp" / "defaults" / "main.yml").read_text())
    toolchain = set(defaults["llama_cpp_build_packages"]) | {"gcc", "cpp", "build-essential", "ccache"}
    assert {"cmake", "g++", "make"} <= toolchain, toolchain
    added = {}
    for name in RUNNER.get_hosts("all"):
        host = lab(name)
        # host_state's record: package -> "<dpkg status abbreviation> <version>", "ii" when installed.
        record = host_state(host, "before-check")["packages"]
        before = {package for package, state in record.items() if state[:2] == "ii"}
        added[name] = _installed(host) - before
    # libgomp1 at least: a bare host has libstdc++6 and libgcc-s1 already (apt needs them).
    runtime = set(defaults["llama_cpp_runtime_packages"])
    for name in {COORDINATOR, *RUNNER.get_hosts("rpc_workers")}:
        assert added[name] & runtime, (name, sorted(added[name]))
    assert {name: sorted(packages & toolchain) for name, packages in added.items()} == dict.fromkeys(added, [])
