"""site.yml as an unprivileged controller user: the cluster answers, and the user's own cache holds the build."""

import grp
import json
import pwd
from pathlib import Path

import testinfra.utils.ansible_runner
from labtest import INVENTORY, lab

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
COORDINATOR = RUNNER.get_hosts("coordinator")[0]


def test_the_controller_user_is_unprivileged():
    user = pwd.getpwnam("llamactl")
    assert user.pw_uid != 0
    assert not [group.gr_name for group in grp.getgrall() if "llamactl" in group.gr_mem]  # no sudo, wheel, admin


def test_the_users_controller_cache_holds_the_build_it_shipped():
    records = list(Path("/home/llamactl/.cache/llamarpc/llama-cpp").glob("*/build.json"))
    assert records
    assert all(path.stat().st_uid == pwd.getpwnam("llamactl").pw_uid for path in records)


def test_the_cluster_answers():
    address = RUNNER.get_variables(COORDINATOR)["ansible_host"]
    url = f"http://{address}:8080/health"
    probe = f"import urllib.request; print(urllib.request.urlopen('{url}', timeout=30).read().decode())"
    out = lab(COORDINATOR).check_output(f'python3 -c "{probe}"')
    assert json.loads(out).get("status") == "ok", out
