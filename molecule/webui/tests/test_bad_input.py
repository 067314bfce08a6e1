"""Bad input to Open WebUI's play of site.yml fails with a clear message before anything changes on the host.

The runs are limited to that play (``--tags open_webui``): the coordinator's role does not run, so it publishes no
endpoint, and a run that leaves open_webui_openai_base_url empty has none to take.
"""

import json

import pytest
import testinfra.utils.ansible_runner
from labtest import INVENTORY, address, lab, run_ansible

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
WEBUI = RUNNER.get_hosts("webui")[0]
COORDINATOR = RUNNER.get_hosts("coordinator")[0]
STATE = (
    "md5sum /etc/llamarpc/open-webui.env /etc/systemd/system/llamarpc-open-webui.service; "
    "readlink /opt/llamarpc/open-webui/venv; systemctl show -p MainPID --value llamarpc-open-webui"
)
PASSWORD_MESSAGE = "a strong open_webui_admin_password"  # noqa: S105 (a message, not a password)
ENDPOINT_MESSAGE = "open_webui_openai_base_url must be the coordinator's"


def endpoint():
    return f"http://{address(COORDINATOR)}:8080/v1"


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({}, "published in this run on the first host of group 'coordinator' (none published)"),
        ({"open_webui_openai_base_url": "coordinator:8080"}, ENDPOINT_MESSAGE),
        ({"open_webui_admin_password": ""}, PASSWORD_MESSAGE),
        ({"open_webui_admin_password": "Sh0rt!"}, PASSWORD_MESSAGE),
        ({"open_webui_admin_password": "onlylowercaseletters"}, PASSWORD_MESSAGE),
    ],
    ids=["no-endpoint", "endpoint-without-scheme", "no-password", "short-password", "one-class-password"],
)
def test_bad_input_changes_nothing(variables, message):
    if "open_webui_admin_password" in variables:
        variables = {"open_webui_openai_base_url": endpoint(), **variables}
    before = lab(WEBUI).check_output(STATE)
    result = run_ansible("ansible-playbook", "playbooks/site.yml", "--tags", "open_webui", "-e", json.dumps(variables))
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, result.stdout[-2000:]
    assert message in output, result.stdout[-3000:]
    password = variables.get("open_webui_admin_password")
    if password:
        assert password not in output
    assert lab(WEBUI).check_output(STATE) == before
