"""Bad input to the open_webui role fails with a clear message before anything changes on the host."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
from labtest import INVENTORY, lab

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
WEBUI = RUNNER.get_hosts("webui")[0]
SCENARIO = Path(__file__).resolve().parents[1]
STATE = (
    "md5sum /etc/llamarpc/open-webui.env /etc/systemd/system/llamarpc-open-webui.service "
    "/opt/llamarpc/open-webui/venv/.llamarpc-wheels-key; systemctl show -p MainPID --value llamarpc-open-webui"
)
PASSWORD_MESSAGE = "a strong open_webui_admin_password"  # noqa: S105 (a message, not a password)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"open_webui_openai_base_url": ""}, "open_webui_openai_base_url must be the coordinator's"),
        ({"open_webui_openai_base_url": "coordinator:8080"}, "open_webui_openai_base_url must be the coordinator's"),
        ({"open_webui_admin_password": ""}, PASSWORD_MESSAGE),
        ({"open_webui_admin_password": "Sh0rt!"}, PASSWORD_MESSAGE),
        ({"open_webui_admin_password": "onlylowercaseletters"}, PASSWORD_MESSAGE),
    ],
)
def test_bad_input_changes_nothing(variables, message):
    before = lab(WEBUI).check_output(STATE)
    result = subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, str(SCENARIO / "converge.yml"), "-e", json.dumps(variables)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, result.stdout[-2000:]
    assert message in output, result.stdout[-3000:]
    password = variables.get("open_webui_admin_password")
    if password:
        assert password not in output
    assert lab(WEBUI).check_output(STATE) == before
