"""The README's "secrets are no_log": site.yml, status.yml and plan.yml at -vvv with --diff, given an API key and a
Hugging Face token made for this run, and neither shows up in their output, the controller's ~/.ansible or any lab
host's journal. site.yml deploys the new key (a change, so the key file's template and llama-server's restart run),
then the key file is readable by llama-server's user and by no other account on the host.

Runs after test_plan.py (file order): the cluster it leaves serves the tiny model; this run changes only the key.
"""

from __future__ import annotations

import re
import secrets
import time

from labtest import lab
from leaks import controller_files, journal, leaks
from test_plan import HOSTS, WORK, playbook

KEY_FILE = "/etc/llamarpc/coordinator/api-keys"
SERVER_USER = "llamarpc-server"
SECRETS = {
    "API key": f"llamarpc-test-key-{secrets.token_hex(12)}",
    "Hugging Face token": f"hf_llamarpcTest{secrets.token_hex(12)}",
}


def test_no_secret_reaches_any_output_file_or_journal():
    node1 = lab("node1")
    before = node1.check_output("systemctl show -p MainPID --value llamarpc-server.service")
    since = time.time() - 1
    given = [
        "-e",
        f"@{WORK / 'tiny.yml'}",
        "-e",
        f"llama_coordinator_api_key={SECRETS['API key']}",
        "-e",
        f"llama_model_hf_token={SECRETS['Hugging Face token']}",
        "-vvv",
        "--diff",
    ]
    outputs = {}
    for name in ("site.yml", "status.yml", "plan.yml"):
        rc, output = playbook(name, *given, log=f"secrets-{name}.log")
        assert rc == 0, output[-4000:]
        outputs[f"{name} -vvv --diff"] = output
    places = {**outputs, **controller_files()}
    places.update({f"{name}'s journal": journal(name, since) for name in HOSTS})
    # The positive control: these runs handled the new key (site.yml deployed it: llama-server restarted); -vvv
    # printed every result whole, and each module logged its arguments into the host's journal ("Invoked with ..."),
    # where an unmasked secret would be.
    assert node1.check_output("systemctl show -p MainPID --value llamarpc-server.service") != before
    assert all("=> {" in output for output in outputs.values())
    assert "Invoked with " in places["node1's journal"]
    assert leaks(SECRETS, places) == []
    # The key file's task kept its result hidden (no_log), and it changed.
    assert re.search(r"censored.*no_log: true.*\n?.*\"changed\": true", outputs["site.yml -vvv --diff"])


def test_the_key_file_is_read_by_llama_servers_user_alone():
    node1 = lab("node1")
    key = node1.file(KEY_FILE)
    assert (key.user, key.group, key.mode) == ("root", SERVER_USER, 0o640)
    # Every account of the host, with its own groups (setpriv --init-groups), tries to open the file for reading.
    readers = node1.check_output(
        "getent passwd | cut -d: -f1,3,4 | while IFS=: read -r user uid gid; do "
        f"setpriv --reuid=$uid --regid=$gid --init-groups head -c0 {KEY_FILE} 2>/dev/null && echo $user; "
        "done"
    ).split()
    assert sorted(readers) == sorted(["root", SERVER_USER]), readers
