"""Open WebUI and a real llama-server on the coordinator's host (node1), both deployed by site.yml, with an RPC worker
on node2: service, hardening, ports, the endpoint, key and model taken from the coordinator, a readiness check that
tells Open WebUI from llama-server, and a real headless Chromium on the controller signing in, choosing the cluster's
model and reading the rendered answer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import testinfra.utils.ansible_runner
from labtest import INVENTORY, REPO, address, adhoc, lab, run_ansible

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
WEBUI = RUNNER.get_hosts("webui")[0]
COORDINATOR = RUNNER.get_hosts("coordinator")[0]
VARS = RUNNER.get_variables(WEBUI)
TOOLS_PYTHON = REPO / ".cache" / "webui-tools" / "bin" / "python"
ARTIFACTS = REPO / "tests" / "output" / "webui"
SERVICE = "llamarpc-open-webui"
PORT = 3000  # the open_webui role's default
LLAMA_PORT = 8080  # the llama_coordinator role's default
KEY = VARS["llama_coordinator_api_key"]
VERSION = "0.12.4"  # the open_webui role's default release


def url(path=""):
    return f"http://{address(WEBUI)}:{PORT}{path}"


def llama_url(path=""):
    return f"http://{address(COORDINATOR)}:{LLAMA_PORT}{path}"


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


def served_model():
    """The one model llama-server serves (its alias), as it answers /v1/models."""
    status, text = http(llama_url("/v1/models"), token=KEY)
    assert status == 200, text[:500]
    models = [model["id"] for model in json.loads(text)["data"]]
    assert len(models) == 1, models
    return models[0]


def llama_metric(name):
    """A counter of the coordinator's /metrics (llama-server --metrics), read from the controller."""
    status, text = http(llama_url("/metrics"), token=KEY)
    assert status == 200, text[:500]
    match = re.search(rf"^llamacpp:{name} (\S+)$", text, re.MULTILINE)
    assert match, text[:2000]
    return float(match.group(1))


def ready_check(**variables):
    """The role's readiness check alone (tasks_from: ready.yml) against the webui host: the completed run."""
    return run_ansible(
        "ansible",
        WEBUI,
        "-m",
        "ansible.builtin.include_role",
        "-a",
        "name=llamarpc.cluster.open_webui tasks_from=ready.yml",
        "-e",
        json.dumps(variables),
    )


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


def test_open_webui_and_llama_server_share_the_coordinators_host_on_their_default_ports():
    assert WEBUI == COORDINATOR
    for name in ("open_webui_port", "llama_coordinator_port", "open_webui_listen_address", "llama_coordinator_address"):
        assert name not in VARS, f"{name} is set: the defaults are under test"
    listening = lab(WEBUI).check_output("ss -Htlnp")
    lines = {port: [line for line in listening.splitlines() if f":{port} " in line] for port in (PORT, LLAMA_PORT)}
    assert len(lines[PORT]) == 1 and f"{address(WEBUI)}:{PORT} " in lines[PORT][0], listening
    assert "open-webui" in lines[PORT][0] or "python" in lines[PORT][0], lines[PORT]
    assert len(lines[LLAMA_PORT]) == 1 and f"{address(COORDINATOR)}:{LLAMA_PORT} " in lines[LLAMA_PORT][0], listening
    assert "llama-server" in lines[LLAMA_PORT][0], lines[LLAMA_PORT]
    status, text = http(url("/api/config"))
    assert status == 200, text[:300]
    assert (json.loads(text)["name"], json.loads(text)["version"]) == ("Open WebUI", VERSION), text[:300]
    status, text = http(llama_url("/health"))
    assert status == 200, text[:300]


def test_endpoint_key_and_model_come_from_the_coordinator():
    for name in ("open_webui_openai_base_url", "open_webui_openai_api_key", "open_webui_default_model"):
        assert name not in VARS, f"{name} is set: the coordinator's values are under test"
    content = lab(WEBUI).file("/etc/llamarpc/open-webui.env").content_string
    assert f'OPENAI_API_BASE_URL="http://{address(COORDINATOR)}:{LLAMA_PORT}/v1"' in content
    assert f'OPENAI_API_KEY="{KEY}"' in content
    assert f'DEFAULT_MODELS="{served_model()}"' in content


def test_ready_means_open_webui_itself_not_any_server_on_the_port():
    """llama-server answers /health with 200 on its port: the readiness check pointed there must still fail."""
    status, _text = http(llama_url("/health"))
    assert status == 200
    done = ready_check(open_webui_port=LLAMA_PORT, open_webui_start_timeout=10)
    assert done.returncode != 0, done.stdout[-2000:]
    assert f"Nothing that identifies as Open WebUI {VERSION} answered" in done.stdout
    done = ready_check(open_webui_start_timeout=60)
    assert done.returncode == 0, done.stdout[-3000:]


def test_secrets_are_root_only():
    host = lab(WEBUI)
    env = host.file("/etc/llamarpc/open-webui.env")
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    content = env.content_string
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
    assert host.check_output(python.format("open-webui")) == VERSION
    assert host.check_output(python.format("torch")) == "2.13.0+cpu"
    # redis' dependency for Python < 3.11.3, which a resolution for the controller's Python left out
    assert host.check_output("/usr/bin/python3 -c 'import platform; print(platform.python_version())'") == "3.11.2"
    assert host.check_output(python.format("async-timeout"))
    assert not host.file("/opt/llamarpc/open-webui/wheels.tar").exists
    assert not host.file("/opt/llamarpc/open-webui/wheels-staging").exists
    venv = host.file("/opt/llamarpc/open-webui/venv")
    assert venv.is_symlink and re.fullmatch(r"/opt/llamarpc/open-webui/releases/[0-9a-f]{16}", venv.linked_to)
    # The host has no route beyond the lab: the install cannot have come from anywhere else.
    assert host.run("ip -4 route show default").stdout.strip() == ""


def test_a_failed_install_leaves_the_running_release():
    """A wheel set the host's pip refuses (its lock names a wheel the archive lacks): the module says why, removes its
    new virtualenv, and the link and the running service stay on the installed release."""
    host = lab(WEBUI)
    before = host.file("/opt/llamarpc/open-webui/venv").linked_to
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    host.check_output(
        "rm -rf /root/llamarpc-broken && mkdir -p /root/llamarpc-broken/wheels && "
        "printf 'nothing-here==1.0 --hash=sha256:%064d\\n' 0 > /root/llamarpc-broken/wheels/requirements.lock && "
        "tar -C /root/llamarpc-broken -cf /root/llamarpc-broken.tar wheels"
    )
    args = {"archive": "/root/llamarpc-broken.tar", "prefix": "/opt/llamarpc/open-webui", "release": "broken"}
    done, result = adhoc(WEBUI, "llamarpc.cluster.wheel_set_install", args)
    assert done.returncode != 0 and result is not None, done.stdout[-2000:]
    assert f"the previous install ({before}) is left as it was" in result["msg"], result["msg"]
    assert "nothing-here" in result["msg"]
    assert host.file("/opt/llamarpc/open-webui/venv").linked_to == before
    assert not host.file("/opt/llamarpc/open-webui/releases/broken").exists
    assert host.check_output(f"systemctl show -p MainPID --value {SERVICE}") == pid
    status, _text = http(url("/api/config"))
    assert status == 200
    host.check_output("rm -rf /root/llamarpc-broken /root/llamarpc-broken.tar")


def test_sign_in_is_required():
    status, _text = http(url("/api/models"))
    assert status in (401, 403)
    status, _text = http(url("/api/v1/auths/signin"), {"email": VARS["open_webui_admin_email"], "password": "not-it"})
    assert status in (400, 401, 403)


def test_admin_sees_the_clusters_model():
    credentials = {"email": VARS["open_webui_admin_email"], "password": VARS["open_webui_admin_password"]}
    status, text = http(url("/api/v1/auths/signin"), credentials)
    assert status == 200, text[:500]
    session = json.loads(text)
    assert session["role"] == "admin"
    status, text = http(url("/api/models"), token=session["token"])
    assert status == 200, text[:500]
    assert served_model() in [model["id"] for model in json.loads(text)["data"]]


def test_chat_in_a_real_browser():
    """Chromium: sign in, choose the model, send a prompt, the coordinator's answer is rendered; screenshot kept."""
    assert TOOLS_PYTHON.exists(), f"{TOOLS_PYTHON} missing: run `make test-webui` (it installs chromium and Playwright)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "chat.png"
    screenshot.unlink(missing_ok=True)
    model = served_model()
    predicted_before = llama_metric("tokens_predicted_total")
    prompt = "Hello from the llamarpc lab"
    result = subprocess.run(
        [
            str(TOOLS_PYTHON),
            str(Path(__file__).with_name("webui_browser.py")),
            "--url",
            url(),
            "--email",
            VARS["open_webui_admin_email"],
            "--model",
            model,
            "--prompt",
            prompt,
            "--screenshot",
            str(screenshot),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "WEBUI_TEST_PASSWORD": VARS["open_webui_admin_password"]},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    (ARTIFACTS / "chat.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps(report["steps"]))
    assert screenshot.stat().st_size > 10_000
    assert report["selected_model"] == f"Selected model: {model}"
    assert report["user_message"].startswith(prompt)
    assert report["answer_model"] == model
    # The rendered answer is the coordinator's completion as Open WebUI stored it (markdown aside), and it is new
    # work of the llama-server (its predicted-token counter grew).
    assert report["stored"]["models"] == [model]
    assert report["stored"]["user"] == [prompt]
    stored = report["stored"]["assistant"][-1]
    words = re.findall(r"[A-Za-z]{3,}", report["answer"])
    assert words, report["answer"]
    assert all(word in stored for word in words), (report["answer"][:500], stored[:500])
    assert llama_metric("tokens_predicted_total") > predicted_before
