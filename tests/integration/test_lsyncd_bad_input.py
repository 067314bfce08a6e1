"""lsyncd_neutralize refuses bad input with a clear error before it scans or changes anything.

The role runs for real (ansible-playbook, this machine as the managed host). Its checks - argument_specs and
preflight.yml - only read, and every case must stop there: the test asserts that no task after the preflight
ran and that nothing changed. Users are checked on the host by sync_hazard itself, before its scan (its unit tests):
that case may reach the module's task, which must fail without a change. Check mode is a second safety net: even a
regression that let bad input through could not change this machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from ansible_run import ansible_playbook

REPO = Path(__file__).resolve().parents[2]
ROLE = "llamarpc.cluster.lsyncd_neutralize"
# The only tasks allowed to run: the argument validation and the read-only checks of preflight.yml.
PREFLIGHT = {
    f"{ROLE} : {task['name']}"
    for task in yaml.safe_load((REPO / "roles/lsyncd_neutralize/tasks/preflight.yml").read_text(encoding="utf-8"))
}

# The module's task: it validates its parameters (users included) before it scans.
SCAN = "Neutralise what can delete in the model directories, mode disable"

PLAY = """\
- name: Apply lsyncd_neutralize to this machine
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: llamarpc.cluster.lsyncd_neutralize
"""


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"lsyncd_neutralize_mode": "purge"},
            "value of lsyncd_neutralize_mode must be one of: disable, exclude, audit, got: purge",
        ),
        (
            {"lsyncd_neutralize_model_dirs": ["data/models"]},
            "lsyncd_neutralize_model_dirs must be a non-empty list of absolute paths other than /",
        ),
        ({"lsyncd_neutralize_model_dirs": ["/data/models", "/"]}, "absolute paths other than /"),
        ({"lsyncd_neutralize_model_dirs": []}, "must be a non-empty list"),
        # site.yml's llama_model_dir goes to the extra list: checked the same way.
        ({"lsyncd_neutralize_extra_model_dirs": ["home/pool/work/models"]}, "absolute paths other than /"),
        ({"lsyncd_neutralize_users": ["root", "no-such-user-llamarpc"]}, "user 'no-such-user-llamarpc' does not exist"),
        ({"lsyncd_neutralize_fail_on_hazard": "sometimes"}, "lsyncd_neutralize_fail_on_hazard"),
    ],
)
def test_bad_input_stops_before_the_scan(tmp_path, variables, message):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY, encoding="utf-8")
    result = ansible_playbook(
        "-i",
        "localhost,",
        playbook,
        "--check",
        "-e",
        json.dumps(variables),
        env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert message in output, output
    tasks = re.findall(r"^TASK \[([^\]]+)\]", output, re.MULTILINE)
    assert tasks, output
    allowed = PREFLIGHT | ({f"{ROLE} : {SCAN}"} if "lsyncd_neutralize_users" in variables else set())
    ran_beyond = [t for t in tasks if t not in allowed and not t.startswith(f"{ROLE} : Validating arguments")]
    assert ran_beyond == [], tasks
    recap = re.search(r"^localhost\s+:.*changed=(\d+).*failed=(\d+)", output, re.MULTILINE)
    assert recap and recap.group(1) == "0" and recap.group(2) == "1", output
