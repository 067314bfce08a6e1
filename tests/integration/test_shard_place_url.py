"""gguf_shard_place for real: ansible-playbook on this machine, shards served by nginx (Range) on loopback.

Three inventory "hosts" (all ``ansible_connection=local``) each get a model directory on its own small tmpfs,
so the free space the module gathers is real and small: the coordinator cannot hold the whole tiny model and
some shards land on another host, linked from the coordinator's directory. nginx (Debian's, with our own
config on a free loopback port, rate-limited so a download takes seconds) serves the shards; the tests kill
the whole play mid-download and check the rerun resumes, corrupt a shard and check it is fetched again,
and check that bad input changes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
RATE = "1m"  # bytes per second per connection: a ~5 MB shard takes about 5 s

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs mounts)"),
    pytest.mark.skipif(not os.path.exists(NGINX), reason="needs nginx (apt-get install nginx-light)"),
]


def free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def make_model(tmp_path_factory):
    """The tiny model in 3 shards (lab/tools/tiny_gguf.py), with sizes and sha256."""
    sys.path.insert(0, str(REPO / "lab" / "tools"))
    import tiny_gguf  # noqa: PLC0415

    out = tmp_path_factory.mktemp("model")
    return tiny_gguf.generate(out, preset="tiny", shards=3)


@contextlib.contextmanager
def tmpfs_hosts(tmp_path):
    """Three hosts' model directories, each on a tmpfs of its own size (coordinator a: too small)."""
    sizes = {"a": "7m", "b": "12m", "c": "4m"}
    dirs = {}
    try:
        for name, size in sizes.items():
            base = tmp_path / f"disk-{name}"
            base.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(base)], check=True)
            dirs[name] = base
        yield dirs
    finally:
        for base in dirs.values():
            subprocess.run(["umount", "-l", str(base)], check=False)


def wait_listening(proc, port, timeout, log, what):
    """Wait until ``proc`` (a test server) accepts connections on 127.0.0.1:``port``; kill it and fail otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"{what} did not start: {Path(log).read_text()}") from None
            time.sleep(0.1)


def stop(proc):
    """Terminate a test server, killing it when it does not go within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model(tmp_path_factory)


@pytest.fixture(scope="module")
def nginx(model, tmp_path_factory):
    """nginx serving the model's directory on 127.0.0.1:PORT, rate-limited; stopped after the module."""
    root = tmp_path_factory.mktemp("nginx")
    port = free_port()
    conf = root / "nginx.conf"
    conf.write_text(
        f"""
daemon off;
user root root;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {Path(model["files"][0]["path"]).parent};
        limit_rate {RATE};
    }}
}}
""",
        encoding="utf-8",
    )
    proc = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(root)], stdin=subprocess.DEVNULL)
    wait_listening(proc, port, 10, root / "error.log", "nginx")
    yield {"port": port, "base": f"http://127.0.0.1:{port}", "access_log": root / "access.log"}
    stop(proc)


@pytest.fixture
def hosts(tmp_path):
    with tmpfs_hosts(tmp_path) as dirs:
        yield dirs


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text(encoding="utf-8")
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def kill_tree(proc):
    """SIGKILL ansible-playbook and every process below it (workers detach into sessions of their own).

    The tree is frozen first (SIGSTOP) so that no process can start a child or be reparented in between.
    """
    pids = descendants(proc.pid)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    proc.wait()


def urls_of(model, nginx):
    return [{"url": f"{nginx['base']}/{entry['name']}", "sha256": entry["sha256"]} for entry in model["files"]]


PLAN_ONLY = (
    "coordinator",
    "candidates",
    "hf_repo",
    "hf_revision",
    "hf_pattern",
    "hf_endpoint",
    "urls",
    "files",
    "reserve",
    "tensor_caches",
    "mount_root",
    "mount_paths",
    "link",
    "fetch",
)
PLACE_ONLY = ("verify", "retries")
OUTCOMES = ("fetched", "verified", "refetched", "actions")


def steps(task):
    """The old one-task form split into the three modules' tasks: every host reports and fetches its own shards
    (the play's hosts are the candidates), or with ``candidates`` each host drives them by delegation (the role's
    way)."""
    plan = {key: value for key, value in task.items() if key not in PLACE_ONLY}
    place = {key: value for key, value in task.items() if key not in PLAN_ONLY}
    mine = "shard_plan.place[item]" if "candidates" in task else "shard_plan.place[inventory_hostname]"
    place.update({key: f"{{{{ {mine}.{key} }}}}" for key in ("shards", "links", "drop")})
    facts = {
        "name": "Report the model directory",
        "llamarpc.cluster.gguf_shard_facts": {"model_dir": task["model_dir"]},
    }
    plan_task = {"name": "Plan", "llamarpc.cluster.gguf_shard_plan": plan, "register": "shard_plan"}
    place_task = {"name": "Fetch", "llamarpc.cluster.gguf_shard_place": place, "register": "placed"}
    if "candidates" not in task:
        # A failed run_once task fails every host, but the block's rescue runs on the first one only: every host
        # takes the plan's failure to its own rescue.
        plan_task.update({"run_once": True, "ignore_errors": True})
        stop = {
            "name": "Stop on the plan's failure",
            "ansible.builtin.fail": {"msg": "{{ shard_plan.msg }}"},
            "when": "shard_plan is failed",
        }
        return [facts, plan_task, stop, place_task]
    coordinator = task.get("coordinator", "{{ inventory_hostname }}")
    hosts = f"([{coordinator!r}] + {task['candidates']!r}) | unique | select('in', groups['all']) | list"
    facts.update({"delegate_to": "{{ item }}", "delegate_facts": True, "loop": f"{{{{ {hosts} }}}}"})
    place_task.update({"delegate_to": "{{ item }}", "loop": "{{ shard_plan.place | list }}"})
    place_task["loop_control"] = {"break_when": "placed is failed"}
    return [facts, plan_task, place_task]


def combined(raw, task, host):
    """One host's result in the shape of the old one-task form: the plan, and what was done on the host (or, with
    ``candidates``, per candidate host in ``per_host``, the coordinator's outcome at the top)."""
    if raw["failure"]:
        return raw["failure"]
    plan, placed = raw["plan"], raw["placed"]
    if "candidates" not in task:
        out = {**plan, **placed, "changed": bool(placed.get("changed"))}
        diffs = [part for part in (plan.get("diff"), placed.get("diff")) if part]
    else:
        items = placed.get("results", [])
        per_host = {item["item"]: {key: item.get(key, []) for key in OUTCOMES} for item in items}
        for name, entry in per_host.items():
            entry["assigned"] = [shard["name"] for shard in plan["place"][name]["shards"]]
        mine = per_host.get(task.get("coordinator", host), {})
        out = {**plan, **{key: mine.get(key, []) for key in OUTCOMES}, "per_host": per_host}
        out["changed"] = any(item.get("changed") for item in items)
        diffs = [plan.get("diff")] + [item.get("diff") for item in items]
        diffs = [part for part in diffs if part]
    out.pop("diff", None)
    if diffs:
        out["diff"] = diffs[0] if len(diffs) == 1 else diffs
    return out


def write_play(tmp_path, hosts, task):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {name: {"ansible_connection": "local", "disk": str(path)} for name, path in hosts.items()},
                    "vars": {"ansible_python_interpreter": sys.executable},
                }
            }
        ),
        encoding="utf-8",
    )
    play = tmp_path / "play.yml"
    (tmp_path / "task.json").write_text(json.dumps(task), encoding="utf-8")
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Place the shards",
                    "hosts": "all",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Place",
                            "block": steps(task),
                            "rescue": [
                                {
                                    "name": "Keep the failure",
                                    "ansible.builtin.set_fact": {"failure": "{{ ansible_failed_result }}"},
                                }
                            ],
                        },
                        {
                            "name": "Keep the result",
                            "ansible.builtin.copy": {
                                "content": "{{ {'plan': shard_plan | default({}), 'placed': placed | default({}),"
                                " 'failure': failure | default(None)} | to_json }}",
                                "dest": f"{tmp_path}/result-{{{{ inventory_hostname }}}}.json",
                                "mode": "0644",
                            },
                            "check_mode": False,
                            "diff": False,
                        },
                    ],
                }
            ],
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    return inventory, play


def run_play(tmp_path, hosts, task, *extra, check=True):
    inventory, play = write_play(tmp_path, hosts, task)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_LOCALHOST_WARNING": "0",
    }
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), str(play), *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(f"play failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
    task = json.loads((tmp_path / "task.json").read_text(encoding="utf-8"))
    results = {
        name: combined(json.loads((tmp_path / f"result-{name}.json").read_text(encoding="utf-8")), task, name)
        for name in hosts
    }
    for path in tmp_path.glob("result-*.json"):
        path.unlink()
    failed = any(result.get("failed") for result in results.values())
    if check and failed:
        raise AssertionError(f"task failed: {json.dumps(results, indent=1)[-6000:]}")
    return int(failed), results, proc.stdout


def start_play(tmp_path, hosts, task):
    """The play started in the background, in a session of its own (for ``kill_tree``); returns its process."""
    inventory, play = write_play(tmp_path, hosts, task)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
    }
    return subprocess.Popen(
        [str(PLAYBOOK), "-i", str(inventory), str(play)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def task_for(model, nginx, **more):
    return {
        "model_dir": "{{ disk }}/models/tiny",
        "coordinator": "a",
        "urls": urls_of(model, nginx),
        "reserve": "256k",
        "mount_root": "/mnt/llamarpc-test",
        **more,
    }


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def placed_ok(model, hosts, results):
    plan = results["a"]["plan"]
    assert sorted(entry["name"] for entry in plan) == [entry["name"] for entry in model["files"]]
    for entry, expected in zip(plan, model["files"], strict=True):
        path = hosts[entry["host"]] / "models/tiny" / entry["name"]
        assert sha256(path) == expected["sha256"]
        assert (path.stat().st_mode & 0o777) == 0o444
        link = hosts["a"] / "models/tiny" / entry["name"]
        if entry["host"] != "a":
            assert os.readlink(link) == f"/mnt/llamarpc-test/{entry['host']}/{entry['name']}"
    return plan


def test_check_mode_plans_and_changes_nothing(tmp_path, model, nginx, hosts):
    code, results, _stats = run_play(tmp_path, hosts, task_for(model, nginx), "--check", "--diff")
    assert code == 0
    plan = results["a"]["plan"]
    # a (7 MiB - reserve) takes shard 1 (5.3 MB); 2 and 3 do not fit beside it; b (12 MiB) takes both.
    assert [entry["host"] for entry in plan] == ["a", "b", "b"]
    assert results["a"]["changed"] is True
    assert "shard placement" in results["a"]["diff"]["after_header"]
    for path in hosts.values():
        assert not (path / "models").exists()
    assert nginx["access_log"].read_text(encoding="utf-8").count("GET") == 0


def test_apply_rerun_corrupt_and_full_verify(tmp_path, model, nginx, hosts):
    _code, results, _stats = run_play(tmp_path, hosts, task_for(model, nginx))
    plan = placed_ok(model, hosts, results)
    assert [entry["host"] for entry in plan] == ["a", "b", "b"]
    assert results["a"]["changed"] and results["b"]["changed"] and not results["c"]["changed"]
    assert results["a"]["model_path"].endswith("-00001-of-00003.gguf")
    manifest = json.loads((hosts["b"] / "models/tiny/.llamarpc-shards.json").read_text(encoding="utf-8"))
    assert set(manifest) == {plan[1]["name"], plan[2]["name"]}

    # A rerun changes nothing and hashes nothing (the manifest vouches for the files).
    _code, results, _stats = run_play(tmp_path, hosts, task_for(model, nginx))
    assert not any(result["changed"] for result in results.values())
    assert not any(result["verified"] for result in results.values())

    # Corrupt shard 3 on b (content and mtime change): detected, fetched again, verified.
    victim = hosts["b"] / "models/tiny" / plan[2]["name"]
    victim.chmod(0o644)
    with victim.open("r+b") as handle:
        handle.seek(1000)
        handle.write(b"\xff" * 16)
    _code, results, _stats = run_play(tmp_path, hosts, task_for(model, nginx))
    assert results["b"]["refetched"] == [plan[2]["name"]]
    assert results["b"]["changed"]
    placed_ok(model, hosts, results)

    # Silent corruption with the mtime put back: only verify=full notices.
    stamp = victim.stat()
    victim.chmod(0o644)
    with victim.open("r+b") as handle:
        handle.seek(2000)
        handle.write(b"\x00" * 16)
    victim.chmod(0o444)
    os.utime(victim, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    _code, results, _stats = run_play(tmp_path, hosts, task_for(model, nginx))
    assert not results["b"]["changed"]
    _code, results, _stats = run_play(tmp_path, hosts, task_for(model, nginx, verify="full"))
    assert results["b"]["refetched"] == [plan[2]["name"]]
    placed_ok(model, hosts, results)


def test_killed_play_resumes(tmp_path, model, nginx, hosts):
    """Kill the whole ansible-playbook process group mid-download; the rerun resumes with Range."""
    proc = start_play(tmp_path, hosts, task_for(model, nginx))
    first = model["files"][0]["name"]
    partial = hosts["a"] / "models/tiny" / f"{first}.partial"
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size >= 2 * 1024 * 1024):
        assert time.monotonic() < deadline, "the download did not start"
        assert proc.poll() is None, "the play ended before it could be killed"
        time.sleep(0.05)
    kill_tree(proc)
    killed_at = partial.stat().st_size
    assert 0 < killed_at < model["files"][0]["size"]
    sidecar = json.loads((hosts["a"] / "models/tiny" / f"{first}.partial.json").read_text(encoding="utf-8"))
    assert sidecar["sha256"] == model["files"][0]["sha256"]
    assert not (hosts["a"] / "models/tiny" / first).exists()

    start = time.monotonic()
    _code, results, _stats = run_play(tmp_path, hosts, task_for(model, nginx))
    rerun_s = time.monotonic() - start
    fetched = {entry["name"]: entry for entry in results["a"]["fetched"]}
    assert fetched[first]["resumed_from"] >= killed_at
    assert fetched[first]["resumed_from"] + fetched[first]["downloaded"] == model["files"][0]["size"]
    placed_ok(model, hosts, results)
    log = nginx["access_log"].read_text(encoding="utf-8")
    assert " 206 " in log
    print(f"killed at {killed_at} bytes; resumed from {fetched[first]['resumed_from']}: {fetched[first]}")
    if os.environ.get("LLAMARPC_RESUME_RESULT"):  # the cluster scenario's fault report runs this test and reads it
        outcome = {"killed_at": killed_at, "size": model["files"][0]["size"], "rerun_s": rerun_s, "http_206": True}
        outcome.update(resumed_from=fetched[first]["resumed_from"], downloaded=fetched[first]["downloaded"])
        Path(os.environ["LLAMARPC_RESUME_RESULT"]).write_text(json.dumps(outcome), encoding="utf-8")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_dir": "models/tiny"}, "model_dir must be an absolute path"),
        ({"coordinator": "nosuchhost"}, "unknown coordinator 'nosuchhost'"),
        ({"mount_paths": {"zz": "/mnt/zz"}}, "mount_paths names unknown host 'zz'"),
        ({"reserve": "1T"}, "the model does not fit"),
        ({"urls": "BAD_SHA"}, "checksum mismatch"),
        ({"urls": "MISSING"}, "incomplete split set"),
        ({"candidates": ["b", "zz"]}, "candidates not in the inventory: zz"),
    ],
)
def test_bad_input_changes_nothing(tmp_path, model, nginx, hosts, change, message):
    task = task_for(model, nginx)
    if change.get("urls") == "BAD_SHA":
        task["urls"][1]["sha256"] = "0" * 64
        change = {}
    elif change.get("urls") == "MISSING":
        task["urls"] = task["urls"][:2]
        change = {}
    task.update(change)
    code, results, _stats = run_play(tmp_path, hosts, task, check=False)
    assert code != 0
    messages = " ".join(str(result.get("msg", "")) for result in results.values())
    assert message in messages, messages
    if message != "checksum mismatch":
        for path in hosts.values():
            assert not (path / "models").exists()
    else:
        # The bad shard was downloaded, found wrong and discarded: never visible under its name.
        names = [entry["name"] for entry in model["files"]]
        for path in hosts.values():
            assert not (path / "models/tiny" / names[1]).exists() or (path / "models/tiny" / names[1]).is_symlink()
            assert not (path / "models/tiny" / f"{names[1]}.partial").exists()


def test_controller_files(tmp_path, model, hosts):
    """Files on the controller: hashed there, copied only to the host each is planned for, rerun unchanged."""
    task = {
        "model_dir": "{{ disk }}/models/tiny",
        "coordinator": "a",
        "files": [entry["path"] for entry in model["files"]],
        "reserve": "256k",
        "mount_root": "/mnt/llamarpc-test",
    }
    _code, results, _stdout = run_play(tmp_path, hosts, task, "--diff")
    placed_ok(model, hosts, results)
    assert "absent" in results["a"]["diff"]["before"]
    _code, results, _stdout = run_play(tmp_path, hosts, task)
    assert not any(result["changed"] for result in results.values())
