"""Open WebUI on node2 in front of a real llama-server on node1: service, hardening, configuration, and a real
headless Chromium on the controller signing in, choosing the cluster's model and reading the rendered answer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import testinfra.utils.ansible_runner
import yaml
from labtest import INVENTORY, REPO, lab

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
WEBUI = RUNNER.get_hosts("webui")[0]
COORDINATOR = RUNNER.get_hosts("coordinator")[0]
SCENARIO = Path(__file__).resolve().parents[1]
VARS = yaml.safe_load((SCENARIO / "vars" / "webui.yml").read_text(encoding="utf-8"))
TOOLS_PYTHON = REPO / ".cache" / "webui-tools" / "bin" / "python"
ARTIFACTS = REPO / "tests" / "output" / "webui"
SERVICE = "llamarpc-open-webui"
PORT = 8080


def address(name):
    return RUNNER.get_variables(name)["ansible_host"]


def url(path=""):
    return f"http://{address(WEBUI)}:{PORT}{path}"


def http(target, body=None, token=None, timeout=120):
    """(status, body text) of a GET, or a JSON POST when ``body`` is given, to a lab host (http only)."""
    assert target.startswith("http://"), target
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(target, data=data, headers=headers)  # noqa: S310 (http checked above)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (scheme checked above)
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def llama_metric(name):
    """A counter of the coordinator stand-in's /metrics (llama-server --metrics), read from the controller."""
    status, text = http(
        f"http://{address(COORDINATOR)}:{VARS['webui_llama_port']}/metrics", token=VARS["webui_llama_api_key"]
    )
    assert status == 200, text[:500]
    match = re.search(rf"^llamacpp:{name} (\S+)$", text, re.MULTILINE)
    assert match, text[:2000]
    return float(match.group(1))


def test_service_runs_unprivileged_and_hardened():
    host = lab(WEBUI)
    assert host.service(f"{SERVICE}.service").is_running
    assert host.service(f"{SERVICE}.service").is_enabled
    props = host.check_output(
        f"systemctl show {SERVICE} -p User -p NoNewPrivileges -p ProtectSystem -p ProtectHome -p PrivateTmp "
        "-p CapabilityBoundingSet -p ReadWritePaths -p RestrictSUIDSGID"
    )
    assert "User=open-webui" in props
    assert "NoNewPrivileges=yes" in props
    assert "ProtectSystem=strict" in props
    assert "ProtectHome=yes" in props
    assert "PrivateTmp=yes" in props
    assert "CapabilityBoundingSet=\n" in props + "\n"
    assert "ReadWritePaths=/var/lib/llamarpc/open-webui" in props
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    assert host.check_output(f"ps -o user= -p {pid}") == "open-webui"


def test_listens_on_the_mesh_address_only():
    host = lab(WEBUI)
    listening = host.check_output("ss -Htlnp")
    assert f"{address(WEBUI)}:{PORT}" in listening
    assert f"0.0.0.0:{PORT}" not in listening
    assert f"*:{PORT}" not in listening


def test_secrets_are_root_only():
    host = lab(WEBUI)
    env = host.file("/etc/llamarpc/open-webui.env")
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    content = env.content_string
    assert f'OPENAI_API_KEY="{VARS["webui_llama_api_key"]}"' in content
    assert f'OPENAI_API_BASE_URL="http://{address(COORDINATOR)}:{VARS["webui_llama_port"]}/v1"' in content
    assert 'WEBUI_AUTH="true"' in content
    assert 'OFFLINE_MODE="true"' in content
    key = host.file("/var/lib/llamarpc/open-webui/.webui_secret_key")
    assert (key.user, key.mode) == ("open-webui", 0o600)
    assert key.size >= 48


def test_data_directory_is_persistent():
    host = lab(WEBUI)
    data = host.file("/var/lib/llamarpc/open-webui")
    assert data.is_directory and data.user == "open-webui" and data.mode == 0o750
    assert host.file("/var/lib/llamarpc/open-webui/webui.db").size > 0


def test_installed_offline_from_the_copied_wheels_only():
    host = lab(WEBUI)
    python = "/opt/llamarpc/open-webui/venv/bin/python -c 'import importlib.metadata as m; print(m.version(\"{}\"))'"
    assert host.check_output(python.format("open-webui")) == "0.12.4"
    assert host.check_output(python.format("torch")) == "2.13.0+cpu"
    assert not host.file("/opt/llamarpc/open-webui/wheels").exists
    # The host has no route beyond the lab: the install cannot have come from anywhere else.
    assert host.run("ip -4 route show default").stdout.strip() == ""


def test_sign_in_is_required():
    status, _text = http(url("/api/models"))
    assert status in (401, 403)
    status, _text = http(url("/api/v1/auths/signin"), {"email": VARS["webui_admin_email"], "password": "not-it"})
    assert status in (400, 401, 403)


def test_admin_sees_the_clusters_model():
    credentials = {"email": VARS["webui_admin_email"], "password": VARS["webui_admin_password"]}
    status, text = http(url("/api/v1/auths/signin"), credentials)
    assert status == 200, text[:500]
    session = json.loads(text)
    assert session["role"] == "admin"
    status, text = http(url("/api/models"), token=session["token"])
    assert status == 200, text[:500]
    assert VARS["webui_model_alias"] in [model["id"] for model in json.loads(text)["data"]]


def test_chat_in_a_real_browser():
    """Chromium: sign in, choose the model, send a prompt, the coordinator's answer is rendered; screenshot kept."""
    assert TOOLS_PYTHON.exists(), f"{TOOLS_PYTHON} missing: run `make test-webui` (it installs chromium and Playwright)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "chat.png"
    screenshot.unlink(missing_ok=True)
    predicted_before = llama_metric("tokens_predicted_total")
    prompt = "Hello from the llamarpc lab"
    result = subprocess.run(
        [
            str(TOOLS_PYTHON),
            str(Path(__file__).with_name("webui_browser.py")),
            "--url",
            url(),
            "--email",
            VARS["webui_admin_email"],
            "--model",
            VARS["webui_model_alias"],
            "--prompt",
            prompt,
            "--screenshot",
            str(screenshot),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "WEBUI_TEST_PASSWORD": VARS["webui_admin_password"]},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    (ARTIFACTS / "chat.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps(report["steps"]))
    assert screenshot.stat().st_size > 10_000
    assert report["selected_model"] == f"Selected model: {VARS['webui_model_alias']}"
    assert report["user_message"].startswith(prompt)
    assert report["answer_model"] == VARS["webui_model_alias"]
    # The rendered answer is the coordinator's completion as Open WebUI stored it (markdown aside), and it is new
    # work of the llama-server (its predicted-token counter grew).
    assert report["stored"]["models"] == [VARS["webui_model_alias"]]
    assert report["stored"]["user"] == [prompt]
    stored = report["stored"]["assistant"][-1]
    words = re.findall(r"[A-Za-z]{3,}", report["answer"])
    assert words, report["answer"]
    assert all(word in stored for word in words), (report["answer"][:500], stored[:500])
    assert llama_metric("tokens_predicted_total") > predicted_before
