"""tensor_cache_seed with ``urls``: a tensor whose shard the worker lacks is fetched by one Range request for exactly
its bytes (served on loopback), lands under the same hash as a local copy, and a rerun with the keep file fetches
nothing; a server that ignores Range or answers another range, and a refused connection, leave it unavailable."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ansible.module_utils import basic
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.metrics import _seed_metrics as seed_metrics
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _fnv1a
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed as ts
from ansible_collections.llamarpc.cluster.plugins.modules import tensor_cache_seed

THRESHOLD = 300 * 1024  # the tiny model's FFN matrices, embedding and output are over it


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("model"), preset="tiny", shards=2, seed=3)


@pytest.fixture(scope="module")
def mine(model):
    """One worker with every layer: its tensors over the threshold, from both shards."""
    tensors, n_layer = ts.model_tensors(model["files"][0]["path"])
    return ts.seed_lists(tensors, n_layer, "127.0.0.1:2", "1", threshold=THRESHOLD)["127.0.0.1:2"]


@pytest.fixture
def seeding(model, mine, hasher, tmp_path):
    """The worker holds the second shard; the first is to fetch. Its cache and keep file as the role lays them out."""
    disk = tmp_path / "disk"
    disk.mkdir()
    shutil.copy(model["files"][1]["path"], disk)
    cache = tmp_path / "cache" / "rpc"
    cache.mkdir(parents=True)
    return {
        "tensors": mine,
        "source_dirs": [str(disk)],
        "cache_dir": str(cache),
        "keep_file": str(cache.parent / "seeded-tensors"),
        "hasher": hasher,
        "_ansible_diff": True,
    }


@pytest.fixture
def warnings(monkeypatch):
    said = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: said.append(text))
    return said


def remote_of(model, mine):
    return [t for t in mine if Path(t["file"]).name == model["files"][0]["name"]]


def url_for(model, server):
    name = model["files"][0]["name"]
    return {name: f"http://127.0.0.1:{server.server_address[1]}/{name}"}


def expected_hash(tensor):
    return _fnv1a.hash_ranges([(tensor["file"], tensor["offset"], tensor["size"])])[0]


def test_a_tensor_fetched_by_range_is_cached_as_a_local_copy_would_be(run_module, model, mine, seeding, range_server):
    server = range_server(Path(model["files"][0]["path"]).parent)
    remote = remote_of(model, mine)
    assert remote and len(remote) < len(mine)
    given = dict(seeding, urls=url_for(model, server))
    out = run_module(tensor_cache_seed, given).result
    assert out["changed"] and out["unavailable"] == 0 and out["fetched"] == len(remote)
    fetched = [t for t in out["tensors"] if t["source"] == "url"]
    assert [t["name"] for t in fetched] == [t["name"] for t in remote]
    assert {t["state"] for t in out["tensors"]} == {"written"}
    for row, tensor in zip(fetched, remote, strict=True):
        assert row["hash"] == expected_hash(tensor)
        with open(tensor["file"], "rb") as handle:
            handle.seek(tensor["offset"])
            assert (Path(seeding["cache_dir"]) / row["hash"]).read_bytes() == handle.read(tensor["size"])
    # One request per tensor, for exactly its bytes: never the shard.
    asked = sorted((wanted, sent) for _path, wanted, sent in server.settled())
    assert asked == sorted((f"bytes={t['offset']}-{t['offset'] + t['size'] - 1}", t["size"]) for t in remote)
    assert out["bytes_fetched"] == sum(t["size"] for t in remote) < model["files"][0]["size"]
    # Which shard gave which bytes, and the summary a caller gathers per worker (the role's llama_coordinator_seeded).
    assert (out["shards_local"], out["shards_fetched"]) == ([model["files"][1]["name"]], [model["files"][0]["name"]])
    assert out["summary"] == {key: out[key] for key in ts.SUMMARY_KEYS}
    lines = Path(seeding["keep_file"]).read_text(encoding="utf-8").splitlines()
    assert {line.split()[0] for line in lines} == {t["hash"] for t in out["tensors"]}

    requests = len(server.requests)
    again = run_module(tensor_cache_seed, given).result
    assert not again["changed"] and not again["keep_file_changed"] and again["present"] == len(mine)
    assert (again["summary"]["shards_local"], again["summary"]["shards_fetched"]) == ([], [])  # nothing written
    assert (again["fetched"], again["bytes_fetched"], len(server.requests)) == (0, 0, requests)
    checked = run_module(tensor_cache_seed, given, check_mode=True).result
    assert not checked["changed"] and len(server.requests) == requests

    # Without the keep file the hash is known only from the bytes: fetched again, nothing written.
    blind = run_module(tensor_cache_seed, {k: v for k, v in given.items() if k != "keep_file"}).result
    assert not blind["changed"] and blind["written"] == 0 and len(server.requests) == 2 * requests


def test_a_recorded_tensor_whose_cache_file_is_gone_or_wrong_is_fetched_again(
    run_module, model, mine, seeding, range_server
):
    server = range_server(Path(model["files"][0]["path"]).parent)
    given = dict(seeding, urls=url_for(model, server))
    out = run_module(tensor_cache_seed, given).result
    first, second = [Path(seeding["cache_dir"]) / t["hash"] for t in out["tensors"] if t["source"] == "url"][:2]
    good = second.read_bytes()
    first.unlink()
    second.write_bytes(b"\0" * len(good))  # right size, wrong bytes: only the hash tells
    requests = len(server.requests)
    mended = run_module(tensor_cache_seed, given).result
    assert mended["changed"] and mended["written"] == 2 and mended["fetched"] == 2
    assert not mended["keep_file_changed"] and len(server.requests) == requests + 2
    assert first.exists() and second.read_bytes() == good


def test_check_mode_fetches_nothing_and_says_the_keep_file_would_change(run_module, model, mine, seeding, range_server):
    server = range_server(Path(model["files"][0]["path"]).parent)
    out = run_module(tensor_cache_seed, dict(seeding, urls=url_for(model, server)), check_mode=True).result
    remote = remote_of(model, mine)
    assert out["changed"] and out["keep_file_changed"] and out["fetched"] == len(remote)
    assert server.requests == [] and list(Path(seeding["cache_dir"]).iterdir()) == []
    assert not Path(seeding["keep_file"]).exists()
    assert all(t["hash"] is None and t["state"] == "missing" for t in out["tensors"] if t["source"] == "url")


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ({"honour_range": False}, "HTTP 200 to a Range request, the server ignores Range"),
        ({"wrong_start": True}, "server answered 'bytes 0-"),
    ],
    ids=["range-ignored", "another-range"],
)
def test_a_server_that_does_not_send_the_range_leaves_the_tensors_unavailable(
    run_module, model, mine, seeding, range_server, warnings, how, reason
):
    server = range_server(Path(model["files"][0]["path"]).parent, **how)
    out = run_module(tensor_cache_seed, dict(seeding, urls=url_for(model, server)))
    assert not out.failed
    remote = remote_of(model, mine)
    rows = [t for t in out.result["tensors"] if t["state"] == "unavailable"]
    assert [t["name"] for t in rows] == [t["name"] for t in remote] and out.result["unavailable"] == len(remote)
    assert reason in rows[0]["reason"] and all("not tried" in t["reason"] for t in rows[1:])
    assert len(server.requests) == 1 and out.result["bytes_fetched"] == 0  # one request, its body never read
    assert len(warnings) == 1 and "honours Range" in warnings[0]
    cached = {p.name for p in Path(seeding["cache_dir"]).iterdir()}
    assert cached == {t["hash"] for t in out.result["tensors"] if t["source"] == "local"}
    kept = Path(seeding["keep_file"]).read_text(encoding="utf-8").splitlines()
    assert {line.split()[0] for line in kept} == cached


def test_a_failed_request_is_reported_per_tensor_not_as_a_failure(
    run_module, model, mine, seeding, closed_port, warnings
):
    urls = {model["files"][0]["name"]: f"http://127.0.0.1:{closed_port}/{model['files'][0]['name']}"}
    out = run_module(tensor_cache_seed, dict(seeding, urls=urls))
    assert not out.failed and out.result["unavailable"] == len(remote_of(model, mine))
    rows = [t for t in out.result["tensors"] if t["state"] == "unavailable"]
    assert "refused" in rows[0]["reason"] and all(t["source"] == "url" for t in rows)
    assert warnings == []


def test_a_shard_without_a_url_stays_unavailable_with_a_reason(run_module, model, mine, seeding):
    out = run_module(tensor_cache_seed, dict(seeding, urls={"other.gguf": "http://127.0.0.1:1/other.gguf"})).result
    rows = [t for t in out["tensors"] if t["state"] == "unavailable"]
    assert len(rows) == len(remote_of(model, mine))
    assert all(t["source"] is None and "and no peer or URL for it" in t["reason"] for t in rows)


@pytest.mark.parametrize(
    ("urls", "message"),
    [
        ({"a.gguf": "ftp://host/a.gguf"}, "must be an http:// or https:// URL"),
        ({"dir/a.gguf": "http://host/a.gguf"}, "keyed by a shard's file name"),
    ],
)
def test_bad_urls_are_refused(run_module, seeding, urls, message):
    out = run_module(tensor_cache_seed, dict(seeding, urls=urls))
    assert out.failed and message in out.result["msg"]


def test_the_url_headers_go_with_the_requests_and_are_not_logged(run_module, model, seeding, range_server):
    assert ts.ARGUMENT_SPEC["url_headers"]["no_log"] is True
    server = range_server(Path(model["files"][0]["path"]).parent)
    given = dict(seeding, urls=url_for(model, server), url_headers={"Authorization": "Bearer s3cret"})
    run_module(tensor_cache_seed, given)
    assert server.requests and {auth for _path, _range, auth in server.requests} == {"Bearer s3cret"}


@pytest.fixture
def peer_of(model, monkeypatch, sftp_server):
    """``peers`` naming the first shard on a peer, and the argvs the module started: the peer is OpenSSH's own
    sftp-server over a pipe, read-only (what ``ssh -s USER@HOST sftp`` starts at the far end; the lab's shards
    scenario runs the real ssh). ``argv`` replaces that server, to make the peer fail."""
    started = []

    def fake_ssh_argv(host, user, **_keys):
        started.append((host, user))
        return peer_of.argv

    peer_of.argv = [sftp_server, "-R"]
    monkeypatch.setattr(ts, "ssh_argv", fake_ssh_argv)
    peer = {
        "host": "10.77.0.13",
        "user": "llamarpc-shards",
        "path": model["files"][0]["path"],
        "identity_file": "/etc/llamarpc/sshfs/id_ed25519",
        "known_hosts_file": "/etc/llamarpc/sshfs/known_hosts",
    }
    peer_of.peers = {model["files"][0]["name"]: peer}
    peer_of.started = started
    return peer_of


def test_a_peer_that_holds_the_shard_gives_the_bytes_before_any_url(
    run_module, model, mine, seeding, range_server, peer_of
):
    server = range_server(Path(model["files"][0]["path"]).parent)
    out = run_module(tensor_cache_seed, dict(seeding, peers=peer_of.peers, urls=url_for(model, server))).result
    remote = remote_of(model, mine)
    assert out["changed"] and out["unavailable"] == 0 and out["fetched"] == len(remote)
    fetched = [t for t in out["tensors"] if t["source"] == "peer"]
    assert [t["name"] for t in fetched] == [t["name"] for t in remote]
    for row, tensor in zip(fetched, remote, strict=True):
        assert row["hash"] == expected_hash(tensor)
        with open(tensor["file"], "rb") as handle:
            handle.seek(tensor["offset"])
            assert (Path(seeding["cache_dir"]) / row["hash"]).read_bytes() == handle.read(tensor["size"])
    assert (out["bytes_peer"], out["bytes_fetched"]) == (sum(t["size"] for t in remote), 0)
    assert (out["shards_peer"], out["shards_fetched"]) == ([model["files"][0]["name"]], [])
    assert server.requests == []  # the nearer copy came first: the URL was never asked
    assert peer_of.started == [("10.77.0.13", "llamarpc-shards")]  # one session for every tensor of the peer


def test_a_peer_that_fails_is_asked_once_and_the_url_gives_the_bytes(
    run_module, model, mine, seeding, range_server, peer_of
):
    peer_of.argv = ["sh", "-c", "echo 'llamarpc-shards@10.77.0.13: Permission denied (publickey).' >&2; exit 255"]
    server = range_server(Path(model["files"][0]["path"]).parent)
    out = run_module(tensor_cache_seed, dict(seeding, peers=peer_of.peers, urls=url_for(model, server))).result
    remote = remote_of(model, mine)
    assert out["unavailable"] == 0 and [t["source"] for t in out["tensors"]].count("url") == len(remote)
    assert (out["bytes_peer"], out["bytes_fetched"]) == (0, sum(t["size"] for t in remote))
    assert len(peer_of.started) == 1 and len(server.requests) == len(remote)


def test_a_failed_peer_without_a_url_leaves_the_tensors_unavailable_saying_why(
    run_module, model, mine, seeding, peer_of
):
    peer_of.argv = ["sh", "-c", "echo 'Host key verification failed.' >&2; exit 255"]
    out = run_module(tensor_cache_seed, dict(seeding, peers=peer_of.peers))
    assert not out.failed and out.result["unavailable"] == len(remote_of(model, mine))
    rows = [t for t in out.result["tensors"] if t["state"] == "unavailable"]
    assert "10.77.0.13: the SFTP session ended: Host key verification failed." in rows[0]["reason"]
    assert all("not tried" in t["reason"] for t in rows[1:]) and len(peer_of.started) == 1


@pytest.mark.parametrize(
    ("peers", "message"),
    [
        ({"dir/a.gguf": {}}, "keyed by a shard's file name"),
        ({"a.gguf": {"host": "h", "user": "u", "path": "/a"}}, "needs host, user, path, identity_file"),
        (
            {"a.gguf": {"host": "h", "user": "u", "path": "a", "identity_file": "/k", "known_hosts_file": "/kh"}},
            "must be absolute",
        ),
    ],
)
def test_bad_peers_are_refused(run_module, seeding, peers, message):
    out = run_module(tensor_cache_seed, dict(seeding, peers=peers))
    assert out.failed and message in out.result["msg"]


def test_the_seeding_records_its_bytes_by_source_for_node_exporter_and_check_mode_writes_nothing(
    run_module, model, mine, seeding, range_server, peer_of, tmp_path
):
    """The worker's own shard (local), the other from a peer: the textfile gets each source's bytes and files, the
    tensors by state and the time; a rerun finds them present and wrote nothing; a check run leaves the file alone."""
    server = range_server(Path(model["files"][0]["path"]).parent)
    metrics = tmp_path / "textfile" / "llamarpc_tensor_cache_seed.prom"
    metrics.parent.mkdir()
    given = dict(seeding, peers=peer_of.peers, urls=url_for(model, server), metrics_file=str(metrics))
    checked = run_module(tensor_cache_seed, given, check_mode=True).result
    assert checked["written"] > 0 and not metrics.exists() and list(metrics.parent.iterdir()) == []

    out = run_module(tensor_cache_seed, given).result
    found = seed_metrics._textfile.parse(metrics.read_text(encoding="utf-8"))
    by_source = {labels["source"]: value for labels, value in found[seed_metrics.BYTES]}
    remote = remote_of(model, mine)
    local = [t for t in out["tensors"] if t["source"] == "local"]
    assert by_source == {
        "local": sum({t["hash"]: t["size"] for t in local}.values()),
        "peer": out["bytes_peer"],
        "url": 0,
    }
    assert by_source["peer"] == sum(t["size"] for t in remote) > 0 and by_source["local"] > 0
    assert sum(by_source.values()) == out["bytes_written"]
    files = {labels["source"]: value for labels, value in found[seed_metrics.FILES]}
    assert files == {"local": len({t["hash"] for t in local}), "peer": len(remote), "url": 0}
    states = {labels["state"]: value for labels, value in found[seed_metrics.TENSORS]}
    assert states == {"present": 0, "written": len(mine), "unavailable": 0}
    assert found[seed_metrics.FINISHED] == [({}, out["finished_at"])] and out["summary"]["finished_at"]
    assert [p.name for p in metrics.parent.iterdir()] == [metrics.name]  # no temporary left beside it

    again = run_module(tensor_cache_seed, given).result
    assert not again["changed"]
    found = seed_metrics._textfile.parse(metrics.read_text(encoding="utf-8"))
    assert {labels["source"]: value for labels, value in found[seed_metrics.BYTES]} == {"local": 0, "peer": 0, "url": 0}
    assert {labels["state"]: value for labels, value in found[seed_metrics.TENSORS]}["present"] == len(mine)
    before = metrics.read_text(encoding="utf-8")
    run_module(tensor_cache_seed, given, check_mode=True)
    assert metrics.read_text(encoding="utf-8") == before


def test_unavailable_tensors_are_counted_and_a_metrics_file_that_cannot_be_written_only_warns(
    run_module, seeding, warnings, tmp_path
):
    """No copy of the first shard and no source for it: its tensors are unavailable in the metrics; a metrics file in
    a missing directory is a warning, the seeding still done."""
    metrics = tmp_path / "m.prom"
    out = run_module(tensor_cache_seed, dict(seeding, metrics_file=str(metrics))).result
    states = {
        labels["state"]: v for labels, v in seed_metrics._textfile.parse(metrics.read_text())[seed_metrics.TENSORS]
    }
    assert states["unavailable"] == out["unavailable"] > 0 and states["written"] == len(
        [t for t in out["tensors"] if t["state"] == "written"]
    )
    nowhere = dict(seeding, metrics_file=str(tmp_path / "nowhere" / "m.prom"))
    again = run_module(tensor_cache_seed, nowhere).result
    assert again["present"] > 0 and any("seeding metrics not written" in text for text in warnings)
