"""Plan before deploy: plan.yml ran on the fresh hosts at prepare; here site.yml deploys, and what it deployed is what
plan.yml predicted. A model far too big is refused by plan.yml before any byte of a shard leaves the server.

Those two plan with fit first off (the memory plan over workers: node3). With the defaults, fit first, the tiny model
fits on node1 and is served there alone: the last test plans, deploys and serves it with no RPC worker.

Runs after test_lab.py (file order), whose tests need the hosts as bare as converge left them: site.yml installs more.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from labtest import BIN, INVENTORY, REPO, address, ansible_env, http_command, lab
from labtest import recap as play_recap

WORK = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "plan"
PREDICTED = WORK / "llamarpc-plan.json"
HOSTS = ("node1", "node2", "node3")
MODEL_DIR = "/data/models/model"
DEPLOYED = "/etc/llamarpc/coordinator/plan.json"
#: What a plan is, apart from the memory figures of the moment (capacity, headroom) that move on a shared machine.
PLAN_KEYS = ("rpc", "devices", "tensor_split")
ROW_KEYS = ("name", "endpoint", "layers", "output_layer", "weight_bytes", "kv_bytes", "bytes")


def playbook(name, *extra, log):
    command = [str(BIN / "ansible-playbook"), "-i", INVENTORY, str(REPO / "playbooks" / name), *extra]
    with (WORK / log).open("w") as out:
        done = subprocess.run(command, cwd=WORK, stdout=out, stderr=subprocess.STDOUT, env=ansible_env(), check=False)
    return done.returncode, (WORK / log).read_text(encoding="utf-8")


def recap(output):
    """Host -> (changed, unreachable, failed) of the run's PLAY RECAP."""
    return {host: (n["changed"], n["unreachable"], n["failed"]) for host, n in play_recap(output).items()}


@pytest.fixture(scope="module")
def predicted():
    return json.loads(PREDICTED.read_text(encoding="utf-8"))


def test_plan_on_the_fresh_hosts_changed_nothing_there(predicted):
    output = (WORK / "plan-fresh.log").read_text(encoding="utf-8")
    assert {host: recap(output)[host] for host in HOSTS} == dict.fromkeys(HOSTS, (0, 0, 0)), output[-3000:]
    for name in HOSTS:
        assert not lab(name).file(MODEL_DIR).exists, f"plan.yml created {MODEL_DIR} on {name}"
    assert predicted["refusals"] == []


def test_the_plan_shows_shards_memory_load_time_and_speed(predicted):
    manifest = json.loads((WORK / "model" / "llamarpc-tiny-seed0.manifest.json").read_text(encoding="utf-8"))
    sizes = {entry["name"]: entry["size"] for entry in manifest["files"]}
    # node1's /data (256M, 16M kept free) takes all 13.7 MB; the memory goes to node3, the one with the most.
    assert {shard["name"]: shard["host"] for shard in predicted["placement"]} == dict.fromkeys(sizes, "node1")
    assert [row["name"] for row in predicted["memory"]["workers"]] == ["node3"]
    for read in predicted["model"]["header_reads"]:
        assert read["requests"] >= 1 and read["received"] < sizes[read["name"]] / 4, read
    assert predicted["load"]["total_seconds"] > 0 and predicted["speed"]["tokens_per_second"] > 0
    text = "\n".join(predicted["text"])
    print("\n" + text)
    for wanted in ("Shards per host:", "Memory plan (fewest", "Predicted load time:", "Predicted generation:"):
        assert wanted in text


def test_site_deploys_the_predicted_plan(predicted):
    rc, output = playbook(
        "site.yml", "-e", f"@{WORK / 'tiny.yml'}", "-e", "llama_coordinator_fit_first=false", log="site.log"
    )
    assert rc == 0, output[-4000:]
    deployed = json.loads(lab("node1").file(DEPLOYED).content_string)
    memory = predicted["memory"]
    assert {key: deployed["plan"][key] for key in PLAN_KEYS} == {key: memory[key] for key in PLAN_KEYS}
    assert [{key: row[key] for key in ROW_KEYS} for row in deployed["plan"]["workers"]] == [
        {key: row[key] for key in ROW_KEYS} for row in memory["workers"]
    ]
    # The model plan.yml read by Range from the server is the one the coordinator read from the files it received.
    assert deployed["summary"] == predicted["model"]["summary"]
    for shard in predicted["placement"]:
        placed = lab(shard["host"]).file(f"{MODEL_DIR}/{shard['name']}")
        assert placed.is_file and not placed.is_symlink and placed.size == shard["size"], shard


def huge_requests(log_text):
    """(method, file, status, bytes sent, Range) of every request for the huge model in nginx's log (format
    ``ranges``: the combined format and the Range header)."""
    pattern = re.compile(r'"(\w+) /(llamarpc-huge-[^ ]+) [^"]*" (\d+) (\d+) "[^"]*" "[^"]*" "([^"]*)"')
    return [
        (method, name, int(status), int(sent), wanted)
        for method, name, status, sent, wanted in pattern.findall(log_text)
    ]


def test_a_model_too_big_is_refused_before_any_byte_of_a_shard():
    access_log = WORK / "nginx" / "access.log"
    before = access_log.stat().st_size
    rc, output = playbook(
        "plan.yml", "-e", f"@{WORK / 'huge.yml'}", "-e", f"llamarpc_plan_path={WORK / 'huge-plan.json'}", log="huge.log"
    )
    assert rc != 0, output[-3000:]
    assert "The model cannot be deployed; nothing was downloaded" in output, output[-3000:]
    refusals = json.loads((WORK / "huge-plan.json").read_text(encoding="utf-8"))["refusals"]
    # Both planners refuse it, each with site.yml's own message: the disk (shard placement) and the memory plan.
    assert len(refusals) == 2, refusals
    assert "nothing was downloaded: the model does not fit" in refusals[0] and "missing" in refusals[0]
    assert "the model does not fit: it needs" in refusals[1] and "reachable worker(s) offer" in refusals[1]
    with access_log.open(encoding="utf-8") as handle:
        handle.seek(before)
        requests = huge_requests(handle.read())
    offsets = {entry["name"]: entry for entry in json.loads((WORK / "huge-files.json").read_text(encoding="utf-8"))}
    assert {name for _method, name, *_rest in requests} == set(offsets), requests
    for method, name, status, sent, wanted in requests:
        if method == "HEAD":
            assert (status, sent) == (200, 0)
            continue
        # Only Range requests that start inside the header, each answered with a part: never a shard's body.
        assert method == "GET" and status == 206, (method, name, status, wanted)
        start, _dash, end = wanted.removeprefix("bytes=").partition("-")
        assert end and int(start) < offsets[name]["data_offset"], wanted
    for name, entry in offsets.items():
        sent = sum(request[3] for request in requests if request[1] == name)
        print(f"\n{name}: {entry['size']} bytes, header {entry['data_offset']}, {sent} bytes sent")
        assert sent <= max(64 << 10, 2 * entry["data_offset"]), sent
    for host in HOSTS:
        listing = lab(host).run(f"ls -a {MODEL_DIR}").stdout
        assert "llamarpc-huge" not in listing, (host, listing)


SUPERVISOR = "/usr/local/lib/llamarpc/coordinator/llamarpc_supervisor.py"


def test_a_model_that_fits_on_the_coordinator_is_served_there_with_no_rpc_worker():
    """Fit first, the default (issue #22 item 5): plan.yml says "local", site.yml deploys that plan (llama-server
    restarted from the distributed plan above), and llama-server runs without --rpc, answers, and holds no connection
    to any RPC worker."""
    rc, output = playbook(
        "plan.yml",
        "-e",
        f"@{WORK / 'tiny.yml'}",
        "-e",
        f"llamarpc_plan_path={WORK / 'local.json'}",
        log="plan-local.log",
    )
    assert rc == 0, output[-3000:]
    memory = json.loads((WORK / "local.json").read_text(encoding="utf-8"))["memory"]
    assert memory["local"] is True and memory["workers"] == [], memory
    assert "local: the whole model fits on node1 with its headroom" in output, output[-3000:]

    rc, output = playbook("site.yml", "-e", f"@{WORK / 'tiny.yml'}", log="site-local.log")
    assert rc == 0, output[-4000:]
    node1 = lab("node1")
    deployed = json.loads(node1.file(DEPLOYED).content_string)
    assert {key: deployed["plan"][key] for key in (*PLAN_KEYS, "local")} == {
        key: memory[key] for key in (*PLAN_KEYS, "local")
    }
    assert deployed["plan"]["rpc"] == "" and deployed["plan"]["args"] == "--device none --n-gpu-layers 0"

    # The process systemd started: its argv as the kernel holds it (NUL-separated), no --rpc and no empty word.
    pid = node1.check_output("systemctl show -p MainPID --value llamarpc-server.service")
    argv = node1.check_output(f"tr '\\0' '\\n' < /proc/{pid}/cmdline").splitlines()
    assert "--rpc" not in argv and "" not in argv, argv
    assert argv[argv.index("--device") + 1] == "none", argv

    body = json.dumps({"prompt": "Six small machines, one model:", "max_tokens": 8, "temperature": 0})
    answer = json.loads(node1.check_output(http_command(f"http://{address('node1')}:8080/v1/completions", body)))
    assert answer["usage"]["completion_tokens"] > 0, answer

    # No RPC connection: none from llama-server's process, none established on any worker's port.
    held = node1.check_output(f"ss -tnpH state established | grep 'pid={pid},' || true")
    assert held == "", held
    for name in HOSTS:
        sessions = lab(name).check_output("ss -tnH state established '( sport = :50052 )'")
        assert sessions == "", (name, sessions)

    # The supervisor: nothing to wait for or re-plan, and its status says local in words.
    node1.check_output("systemctl start llamarpc-server-supervisor.service")
    record = json.loads(node1.file("/run/llamarpc/coordinator/supervisor.json").content_string)
    assert record["verdict"] == "local", record
    status = json.loads(node1.check_output(f"python3 {SUPERVISOR} status"))
    assert status["verdict"] == "ok" and status["message"].startswith("serving locally"), status
