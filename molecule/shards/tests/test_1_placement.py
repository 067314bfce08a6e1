"""The converged model: shards spread by free space, every one readable byte-exact through the coordinator's model
directory (a local file or a symlink into a masked SSHFS mount), the facts the coordinator role relies on."""

from conftest import (
    COORDINATOR,
    EXPECTED_HOSTS,
    FILES,
    HOSTS,
    MODEL_DIR,
    MOUNT_ROOT,
    PORT,
    USER,
    controller_address,
    place,
    recap_changed,
    sha256,
    unit_of,
)
from labtest import lab


def test_shards_are_spread_by_free_space_coordinator_first(converged):
    result, done = converged
    assert {entry["name"]: entry["host"] for entry in result["shards"]} == EXPECTED_HOSTS
    for name, host in EXPECTED_HOSTS.items():
        shard = lab(host).file(f"{MODEL_DIR}/{name}")
        assert shard.is_file and not shard.is_symlink, f"{name} is not a file on {host}"
        assert shard.mode == 0o444 and shard.user == USER  # the directory's owner's, as the README says
        for other in set(HOSTS) - {host, COORDINATOR}:
            assert not lab(other).file(f"{MODEL_DIR}/{name}").exists, f"{name} also on {other}"
    assert recap_changed(done.stdout) == 0


def test_every_shard_reads_byte_exact_through_the_coordinators_model_directory():
    coordinator = lab(COORDINATOR)
    for entry in FILES:
        path = f"{MODEL_DIR}/{entry['name']}"
        host = EXPECTED_HOSTS[entry["name"]]
        if host == COORDINATOR:
            assert not coordinator.file(path).is_symlink
        else:
            assert coordinator.file(path).linked_to == f"{MOUNT_ROOT}/{host}/{entry['name']}"
        assert sha256(coordinator, path) == entry["sha256"], entry["name"]


def test_facts_for_the_coordinator_role(converged):
    result, _done = converged
    assert result["path"] == f"{MODEL_DIR}/{FILES[0]['name']}"
    assert [(s["name"], s["size"], s["sha256"]) for s in result["shards"]] == [
        (entry["name"], entry["size"], entry["sha256"]) for entry in FILES
    ]
    assert all(s["path"] == f"{MODEL_DIR}/{s['name']}" for s in result["shards"])
    # The mounts use direct_io (the seed's option): mmap fails there, so llama.cpp must not mmap.
    assert result["mmap_ok"] is False
    assert all(mount["mmap_ok"] is False for mount in result["mounts"])
    assert result["changed"] is False


def test_mounts_are_supervised_read_only_and_masked():
    coordinator = lab(COORDINATOR)
    for host in ("node2", "node3"):
        unit = unit_of(host)
        assert coordinator.service(unit).is_running and coordinator.service(unit).is_enabled
        options = coordinator.check_output(f"findmnt -n -o FSTYPE,OPTIONS {MOUNT_ROOT}/{host}")
        assert options.startswith("fuse.sshfs") and "ro" in options.split()[1].split(",")
        pid = coordinator.check_output(f"systemctl show -p MainPID --value {unit}")
        mask = int(coordinator.check_output(f"grep ^SigIgn: /proc/{pid}/status").split()[1], 16)
        assert all(mask >> (sig - 1) & 1 for sig in (1, 2, 3, 15)), hex(mask)


def test_check_mode_changes_nothing_and_shows_the_plan():
    result, done = place("--check", "--diff")
    assert recap_changed(done.stdout) == 0
    for name, host in EXPECTED_HOSTS.items():
        assert f"{name} -> {host}" in done.stdout  # the plan, shown by the role
    assert {entry["name"]: entry["host"] for entry in result["shards"]} == EXPECTED_HOSTS


def test_a_model_that_does_not_fit_fails_before_any_download(tmp_path):
    """A second copy of the model in another directory has no room left: the role says what is missing where."""
    other = "/data/models/tiny-again"
    _result, done = place(model_dir=other, expect_ok=False, tmp_path=tmp_path)
    assert done.returncode != 0
    assert "nothing was downloaded" in done.stdout
    assert "missing" in done.stdout
    for host in HOSTS:
        assert not lab(host).file(other).exists, host


def test_a_tensor_cache_on_the_model_disk_is_counted_before_any_download(tmp_path):
    """Issue #17 item 5. A one-file model (shard 2's bytes, 3.2 MB) fits on node2's /data (about 4.7 MB free after
    converge) but not beside a 1G RPC tensor cache on that same disk: refused before any download, the cache named.
    The same cache on /var/cache (the overlay root, another filesystem: the lab's layout) changes nothing."""
    other = "/data/models/cache-test"
    source = FILES[1]
    single = [
        {
            "url": f"http://{controller_address()}:{PORT}/{source['name']}",
            "sha256": source["sha256"],
            "size": source["size"],
            "name": "cache-test.gguf",
        }
    ]
    workers = ("node2", "node3")
    plan_only = ("--tags", "preflight,place,facts")
    try:
        # Separate filesystems: the plan is the one without any cache (checked in check mode: nothing is written).
        elsewhere = {host: {"path": "/var/cache/llamarpc/rpc-worker", "max_size": "1G"} for host in workers}
        result, done = place(
            "--check",
            *plan_only,
            model_dir=other,
            tmp_path=tmp_path,
            extra_vars={"shards_urls": single, "llama_model_tensor_caches": elsewhere},
        )
        assert [(entry["name"], entry["host"]) for entry in result["place"]["plan"]] == [("cache-test.gguf", "node2")]
        assert all("tensor_cache" not in entry for entry in result["place"]["hosts"].values())
        # The cache on /data (its directory does not exist yet: /data, its nearest existing parent, decides).
        on_data = {host: {"path": "/data/llamarpc-cache/rpc-worker", "max_size": "1G"} for host in workers}
        _result, done = place(
            *plan_only,
            model_dir=other,
            tmp_path=tmp_path,
            expect_ok=False,
            extra_vars={"shards_urls": single, "llama_model_tensor_caches": on_data},
        )
        assert done.returncode != 0
        output = " ".join((done.stdout + done.stderr).split())  # the callback wraps long messages
        assert "nothing was downloaded" in output
        assert f"node2: needs {source['size'] / 1e6:.1f} MB for shards" in output, output[-3000:]
        assert "tensor cache (/data/llamarpc-cache/rpc-worker, same filesystem as /data/models/cache-test)" in output
        for host in HOSTS:
            assert not lab(host).file(other).exists, host
            assert not lab(host).file("/data/llamarpc-cache").exists, host
    finally:
        for host in HOSTS:
            lab(host).run(f"rm -rf {other} /data/llamarpc-cache")
