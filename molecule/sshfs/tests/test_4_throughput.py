"""SSHFS read throughput on the lab link (node2 capped at 100 Mbit/s): module defaults, the seed's direct_io, and
plain ``ssh cat`` of the same file, measured in one run and printed."""

import pytest
from conftest import (
    BIG,
    CLIENT,
    EXPORT_DIR,
    KNOWN_HOSTS,
    MOUNT,
    SERVER,
    address,
    mount_args,
    run_mount,
    timed,
)
from labtest import lab

SEED_MOUNT = "/data/models/node2-direct-io"
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


def test_throughput(shell_key):
    client = lab(CLIENT)
    size = int(lab(SERVER).check_output(f"stat -c %s {EXPORT_DIR}/{BIG}"))
    # Warm the serving host's page cache so every method reads the same bytes from RAM over the same link.
    lab(SERVER).check_output(f"cat {EXPORT_DIR}/{BIG} > /dev/null")

    default = run_mount(mount_args(read_probe=BIG, read_probe_mb=size // MB + 1))
    assert default["health"] == "ok" and default["probe_bytes"] == size

    seed = run_mount(
        mount_args(path=SEED_MOUNT, direct_io=True, read_probe=BIG, read_probe_mb=size // MB + 1), timeout=600
    )
    try:
        assert seed["health"] == "ok" and seed["probe_bytes"] == size, seed
        assert seed["mmap_ok"] is False, "mmap should fail on a direct_io mount"
        assert default["mmap_ok"] is True
    finally:
        removed = run_mount({"path": SEED_MOUNT, "state": "absent"})
        assert removed["changed"] and not removed["failed"]
    assert not client.file("/etc/systemd/system/llamarpc-sshfs-data-models-node2\\x2ddirect\\x2dio.service").exists

    ssh_cmd = (
        f"ssh -i {shell_key} -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile={KNOWN_HOSTS} "
        f"-o StrictHostKeyChecking=yes lab@{address(SERVER)} cat {EXPORT_DIR}/{BIG} > /dev/null"
    )
    ssh_mbps = size / timed(client, ssh_cmd) / MB
    cat_mbps = size / timed(client, f"cat {MOUNT}/{BIG} > /dev/null") / MB

    print(
        f"\nSSHFS read throughput of a {size / MB:.0f} MB file, node1 <- node2 (node2 link capped at 100 Mbit/s):"
        f"\n  module defaults (no direct_io), read probe : {default['throughput_mbps']:.2f} MB/s"
        f"  mmap_ok={default['mmap_ok']}"
        f"\n  module defaults, cat of the file          : {cat_mbps:.2f} MB/s"
        f"\n  seed options (-o direct_io), read probe   : {seed['throughput_mbps']:.2f} MB/s  mmap_ok={seed['mmap_ok']}"
        f"\n  plain ssh cat                             : {ssh_mbps:.2f} MB/s"
    )
    assert default["throughput_mbps"] > 0 and seed["throughput_mbps"] > 0 and ssh_mbps > 0
