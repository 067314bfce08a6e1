"""tensor_cache_seed for real: ansible-playbook on this machine seeds a worker's tensor cache, the tensors of the
shard it lacks fetched by HTTP Range from nginx on loopback.

The worker holds shard 2 of the tiny model (lab/tools/tiny_gguf.py); shard 1 is served by nginx (Debian's, our own
config on a free loopback port) whose access log records each request's status, Range header and body bytes sent.

- Fetched by Range, each tensor lands under the same name with the same bytes as a local copy; nginx sent exactly
  each tensor's range, far less than the shard; a second run requests nothing and writes nothing.
- nginx with byte ranges switched off (``max_ranges 0``: it answers 200 with the whole file) leaves the tensors
  unavailable with a reason and one warning; one request, its body not read (nginx, rate-limited, sent a little).
Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_shard_place_url import NGINX, PLAYBOOK, REPO, free_port, stop, wait_listening

from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed as ts

THRESHOLD = 300 * 1024  # the tiny model's FFN matrices, embedding and output are over it
SLOW = "64k"  # the Range-ignoring server's rate: what it manages to send before the seeder hangs up stays small

pytestmark = [pytest.mark.skipif(not Path(NGINX).exists(), reason="needs nginx (apt-get install nginx-light)")]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    sys.path.insert(0, str(REPO / "lab" / "tools"))
    import tiny_gguf  # noqa: PLC0415

    return tiny_gguf.generate(tmp_path_factory.mktemp("model"), preset="tiny", shards=2, seed=4)


@pytest.fixture(scope="module")
def mine(model):
    """One worker with every layer: its tensors over the threshold, from both shards."""
    tensors, n_layer = ts.model_tensors(model["files"][0]["path"])
    return ts.seed_lists(tensors, n_layer, "127.0.0.1:2", "1", threshold=THRESHOLD)["127.0.0.1:2"]


@contextlib.contextmanager
def nginx(root, tmp_path, extra=""):
    """nginx serving ``root`` on 127.0.0.1:PORT; ``access`` lines are ``STATUS "RANGE" BODY_BYTES_SENT``."""
    base = tmp_path / f"nginx-{free_port()}"
    base.mkdir()
    port = free_port()
    conf = base / "nginx.conf"
    conf.write_text(
        f"""
daemon off;
user root root;
worker_processes 1;
pid {base}/nginx.pid;
error_log {base}/error.log;
events {{ worker_connections 64; }}
http {{
    log_format ranges '$status "$http_range" $body_bytes_sent';
    access_log {base}/access.log ranges;
    client_body_temp_path {base}/body;
    proxy_temp_path {base}/proxy;
    fastcgi_temp_path {base}/fastcgi;
    uwsgi_temp_path {base}/uwsgi;
    scgi_temp_path {base}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        {extra}
    }}
}}
""",
        encoding="utf-8",
    )
    proc = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(base)], stdin=subprocess.DEVNULL)
    wait_listening(proc, port, 10, base / "error.log", "nginx")
    try:
        yield {"base": f"http://127.0.0.1:{port}", "log": base / "access.log"}
    finally:
        stop(proc)


def access(server):
    """(status, Range header, body bytes sent) per request nginx logged."""
    lines = server["log"].read_text(encoding="utf-8").splitlines() if server["log"].exists() else []
    return [(int(s), r.strip('"'), int(n)) for s, r, n in (line.split(" ") for line in lines)]


def seed(tmp_path, args):
    """Run tensor_cache_seed with ``args`` through ansible-playbook (local); its result and the play's output."""
    out = tmp_path / "result.json"
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "tasks": [
                {"name": "Seed", "llamarpc.cluster.tensor_cache_seed": args, "register": "seeded"},
                {"name": "Keep", "ansible.builtin.copy": {"content": "{{ seeded | to_json }}", "dest": str(out)}},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play), encoding="utf-8")
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", "localhost,", str(tmp_path / "play.yml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=300,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": str(Path.home()),
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_NOCOLOR": "1",
        },
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    return json.loads(out.read_text(encoding="utf-8")), proc.stdout + proc.stderr


@pytest.fixture
def worker(model, mine, hasher, tmp_path):
    """The worker's disk (shard 2 only), its cache directory and keep file as the role lays them out."""
    disk = tmp_path / "disk"
    disk.mkdir()
    shutil.copy(model["files"][1]["path"], disk)
    cache = tmp_path / "llamarpc-rpc" / "rpc"
    cache.mkdir(parents=True)
    return {
        "tensors": mine,
        "source_dirs": [str(disk)],
        "cache_dir": str(cache),
        "keep_file": str(cache.parent / "seeded-tensors"),
        "hasher": hasher,
    }


def remote_of(model, mine):
    return [t for t in mine if Path(t["file"]).name == model["files"][0]["name"]]


def files_of(directory):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in Path(directory).iterdir()}


def test_tensors_fetched_by_range_equal_local_copies_and_a_rerun_fetches_nothing(model, mine, hasher, worker, tmp_path):
    shard = model["files"][0]
    remote = remote_of(model, mine)
    local_cache = tmp_path / "local-rpc"
    local_cache.mkdir()
    reference, _stale = ts.seed(mine, str(local_cache), hasher)  # every shard on this disk
    with nginx(Path(shard["path"]).parent, tmp_path) as server:
        args = dict(worker, urls={shard["name"]: f"{server['base']}/{shard['name']}"})
        out, _log = seed(tmp_path, args)
        assert out["changed"] and out["unavailable"] == 0 and out["fetched"] == len(remote)
        got = {p.name: p.read_bytes() for p in Path(worker["cache_dir"]).iterdir()}
        assert got == {p.name: p.read_bytes() for p in local_cache.iterdir()}
        assert {t["name"]: t["hash"] for t in out["tensors"]} == {t["name"]: t["hash"] for t in reference}
        assert [t["source"] for t in out["tensors"]].count("url") == len(remote)

        sent = access(server)
        expected = sorted((206, f"bytes={t['offset']}-{t['offset'] + t['size'] - 1}", t["size"]) for t in remote)
        assert sorted(sent) == expected
        assert out["bytes_fetched"] == sum(n for _s, _r, n in sent) == sum(t["size"] for t in remote) < shard["size"]
        print(f"fetched {out['bytes_fetched']} bytes in {len(sent)} Range requests of a {shard['size']}-byte shard")

        before = files_of(worker["cache_dir"])
        keep = Path(worker["keep_file"]).read_text(encoding="utf-8")
        again, _log = seed(tmp_path, args)
        assert not again["changed"] and again["written"] == again["fetched"] == again["bytes_fetched"] == 0
        assert again["present"] == len(mine) and access(server) == sent
        assert files_of(worker["cache_dir"]) == before
        assert Path(worker["keep_file"]).read_text(encoding="utf-8") == keep


def test_a_server_that_ignores_range_leaves_the_tensors_unavailable_and_sends_little(model, mine, worker, tmp_path):
    shard = model["files"][0]
    remote = remote_of(model, mine)
    with nginx(Path(shard["path"]).parent, tmp_path, f"max_ranges 0; limit_rate {SLOW};") as server:
        out, log = seed(tmp_path, dict(worker, urls={shard["name"]: f"{server['base']}/{shard['name']}"}))
    rows = [t for t in out["tensors"] if t["state"] == "unavailable"]
    assert [t["name"] for t in rows] == [t["name"] for t in remote] and out["unavailable"] == len(remote)
    assert "ignores Range" in rows[0]["reason"] and out["bytes_fetched"] == 0
    assert log.count("did not answer a Range request") == 1
    sent = access(server)
    assert len(sent) == 1 and sent[0][0] == 200
    print(f"nginx ignoring Range sent {sent[0][2]} bytes of a {shard['size']}-byte shard before the seeder hung up")
    assert sent[0][2] < min(t["size"] for t in remote)
    cached = {p.name for p in Path(worker["cache_dir"]).iterdir()}
    assert cached == {t["hash"] for t in out["tensors"] if t["source"] == "local"}
