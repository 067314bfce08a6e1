"""SSHFS read throughput on the lab link (node2 capped at 100 Mbit/s): the role's mount with the seed's direct_io,
a page-cached mount (module defaults), and plain ``ssh cat`` of the same shard, measured in one run and printed.
Also what a second read (a model reload) costs on the link: the module's default ``auto_cache`` serves it from the
coordinator's page cache, ``direct_io`` fetches the whole shard again."""

import pytest
from labtest import lab
from sshfs_lab import (
    BIG,
    CLIENT,
    EXPORT_DIR,
    EXPORT_ROOT,
    KNOWN_HOSTS,
    MOUNT,
    SERVER,
    VIEW,
    address,
    mount_args,
    run_mount,
    timed,
)

CACHED_MOUNT = "/mnt/llamarpc/node2-cached"
CACHED_UNIT = "llamarpc-sshfs-mnt-llamarpc-node2\\x2dcached.service"
BENCH_KEY = "/root/.ssh/llamarpc-bench"
MB = 1000 * 1000


@pytest.fixture
def shell_key():
    """A throw-away key for the lab admin user of the serving host, removed afterwards (the SFTP-only key cannot
    run cat)."""
    client, server = lab(CLIENT), lab(SERVER)
    client.check_output(f"install -d -m 0700 /root/.ssh && rm -f {BENCH_KEY} {BENCH_KEY}.pub")
    client.check_output(f"ssh-keygen -q -t ed25519 -N '' -C llamarpc-bench -f {BENCH_KEY}")
    public = client.check_output(f"cat {BENCH_KEY}.pub")
    keys = f"{server.user('lab').home}/.ssh/authorized_keys"
    server.check_output(f"echo {public!r} >> {keys}")
    yield BENCH_KEY
    server.check_output(f"sed -i '/llamarpc-bench$/d' {keys}")
    client.check_output(f"rm -f {BENCH_KEY} {BENCH_KEY}.pub")


def received_bytes(host):
    """Bytes received so far on ``host``'s network interfaces other than loopback (/proc/net/dev)."""
    lines = host.check_output("cat /proc/net/dev").splitlines()[2:]
    return sum(int(line.split(":", 1)[1].split()[0]) for line in lines if line.split(":", 1)[0].strip() != "lo")


def reread_bytes(host, path):
    """Bytes that crossed ``host``'s links while ``path`` was read a second time (the first read fills any cache)."""
    host.check_output(f"cat {path} > /dev/null")
    before = received_bytes(host)
    host.check_output(f"cat {path} > /dev/null")
    return received_bytes(host) - before


def test_throughput(shell_key):
    client = lab(CLIENT)
    size = int(lab(SERVER).check_output(f"stat -c %s {EXPORT_DIR}/{BIG}"))
    # Warm the serving host's page cache so every method reads the same bytes from RAM over the same link.
    lab(SERVER).check_output(f"cat {EXPORT_DIR}/{BIG} > /dev/null")

    seed = run_mount(mount_args(read_probe=BIG, read_probe_mb=size // MB + 1))
    assert seed["health"] == "ok" and seed["probe_bytes"] == size

    cached = run_mount(
        mount_args(path=CACHED_MOUNT, direct_io=False, read_probe=BIG, read_probe_mb=size // MB + 1), timeout=600
    )
    try:
        assert cached["health"] == "ok" and cached["probe_bytes"] == size, cached
        assert seed["mmap_ok"] is False, "mmap should fail on a direct_io mount"
        assert cached["mmap_ok"] is True
        assert "auto_cache" in cached["options"], cached["options"]
        # A reload through the default mount reads the shard from the coordinator's page cache, not the link.
        cached_reread = reread_bytes(client, f"{CACHED_MOUNT}/{BIG}")
        assert cached_reread < size // 10, f"{cached_reread} bytes crossed the link to re-read a {size}-byte shard"
    finally:
        removed = run_mount({"path": CACHED_MOUNT, "state": "absent"})
        assert removed["changed"] and not removed["failed"]
    assert not client.file(f"/etc/systemd/system/{CACHED_UNIT}").exists

    ssh_cmd = (
        f"ssh -i {shell_key} -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile={KNOWN_HOSTS} "
        # Through the export's root-owned view: the admin user cannot search pool's home (mode 0700).
        f"-o StrictHostKeyChecking=yes lab@{address(SERVER)} cat {EXPORT_ROOT}{VIEW}/{BIG} > /dev/null"
    )
    ssh_mbps = size / timed(client, ssh_cmd) / MB
    cat_mbps = size / timed(client, f"cat {MOUNT}/{BIG} > /dev/null") / MB
    # The seed's direct_io mount has no page cache: every read crosses the link again (the check of the check).
    direct_reread = reread_bytes(client, f"{MOUNT}/{BIG}")
    assert direct_reread >= size, f"only {direct_reread} bytes crossed the link to re-read a {size}-byte shard"

    print(
        f"\nSSHFS read throughput of a {size / MB:.1f} MB shard, node1 <- node2 (node2 link capped at 100 Mbit/s):"
        f"\n  role's mount (-o direct_io, as the seed), read probe : {seed['throughput_mbps']:.2f} MB/s"
        f"  mmap_ok={seed['mmap_ok']}"
        f"\n  role's mount, cat of the file                       : {cat_mbps:.2f} MB/s"
        f"\n  page cache (no direct_io), read probe               : {cached['throughput_mbps']:.2f} MB/s"
        f"  mmap_ok={cached['mmap_ok']}"
        f"\n  plain ssh cat                                       : {ssh_mbps:.2f} MB/s"
        f"\nBytes over the link for a second read: auto_cache {cached_reread}, direct_io {direct_reread}"
    )
    assert seed["throughput_mbps"] > 0 and cached["throughput_mbps"] > 0 and ssh_mbps > 0
