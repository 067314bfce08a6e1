"""Peers: a worker reads a shard it lacks from the host that holds it, over that host's read-only SFTP export, with
its own key - the llama_model role made node2 and node3 readers of each other's export (llama_model_peer_readers, the
RPC workers by default), and tensor_cache_seed asks such a peer before any URL, so the bytes never go through the
coordinator. Real ssh, real sshd with the role's chroot and ``internal-sftp -R``, between two booted hosts."""

from __future__ import annotations

import pytest
from conftest import EXPECTED_HOSTS, MODEL_DIR, sha256
from labtest import adhoc, lab, wait_for
from sshfs_lab import EXPORT_USER, KEY, KNOWN_HOSTS, VIEW, address

HOLDER, READER = "node2", "node3"
SHARD = next(name for name, host in EXPECTED_HOSTS.items() if host == HOLDER)
#: A range inside the shard that no block boundary of the reader's 64 KiB requests meets.
OFFSET, SIZE = 4099, 1_000_003
CACHE = "/root/peer-seed/rpc"
STRANGER_KEY = "/root/peer-seed/stranger"


def seed(identity_file=KEY):
    """tensor_cache_seed on the reader for one tensor of the holder's shard, the holder as its peer."""
    tensors = [{"name": "probe.weight", "file": f"{MODEL_DIR}/{SHARD}", "offset": OFFSET, "size": SIZE}]
    peer = {
        "host": address(HOLDER),
        "user": EXPORT_USER,
        "path": f"{VIEW}/{SHARD}",
        "identity_file": identity_file,
        "known_hosts_file": KNOWN_HOSTS,
    }
    args = {"tensors": tensors, "source_dirs": [MODEL_DIR], "cache_dir": CACHE, "peers": {SHARD: peer}}
    done, result = adhoc(READER, "llamarpc.cluster.tensor_cache_seed", args)
    assert result is not None, done.stdout + done.stderr
    return result


@pytest.fixture
def empty_cache():
    reader = lab(READER)
    reader.run_expect([0], f"rm -rf {CACHE} && mkdir -p {CACHE}")
    yield reader
    reader.run(f"rm -rf {CACHE.rsplit('/', 1)[0]}")


def test_each_worker_key_is_accepted_by_the_other_workers_export_from_its_own_address():
    keys = lab(HOLDER).file(f"/etc/ssh/llamarpc-authorized-keys/{EXPORT_USER}").content_string
    assert f'restrict,from="{address(READER)}" ssh-ed25519 ' in keys
    assert f'restrict,from="{address("node1")}" ssh-ed25519 ' in keys  # the coordinator's mount, as before
    assert lab(READER).file(KEY).mode == 0o600


def _sftp_list(host, identity_file):
    """``ls`` of the holder's export over SFTP from ``host`` with ``identity_file`` alone (no agent, no other key)."""
    return lab(host).run(
        f"printf 'cd {VIEW}\\nls -1\\n' | timeout 60 sftp -b - -i {identity_file} -o IdentitiesOnly=yes "
        f"-o IdentityAgent=none -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={KNOWN_HOSTS} "
        f"-o ConnectTimeout=20 {EXPORT_USER}@{address(HOLDER)}"
    )


@pytest.fixture
def borrowed_key():
    """The reader's private key copied onto the coordinator, which is not the address its from= names; removed after."""
    path = "/root/peer-seed-borrowed/id_ed25519"
    secret = lab(READER).check_output(f"base64 -w0 {KEY}")
    lab("node1").run_expect(
        [0], f"umask 077 && mkdir -p {path.rsplit('/', 1)[0]} && echo {secret} | base64 -d > {path}"
    )
    yield path
    lab("node1").run(f"rm -rf {path.rsplit('/', 1)[0]}")


def test_a_worker_key_from_another_hosts_address_is_refused(borrowed_key):
    """Behaviour of from=: the reader's own key, byte for byte, opens the holder's export from the reader's address
    and is refused from the coordinator's, where the coordinator's own key is accepted (so the refusal is the key's
    source, not the network or the account)."""
    holder = lab(HOLDER)
    since = holder.check_output("date +%s")
    own = _sftp_list(READER, KEY)
    assert own.rc == 0 and SHARD in own.stdout.split(), own.stdout + own.stderr  # positive control: its own address
    coordinator_own = _sftp_list("node1", KEY)
    assert coordinator_own.rc == 0 and SHARD in coordinator_own.stdout.split(), coordinator_own.stderr
    assert lab("node1").check_output(f"ssh-keygen -y -f {borrowed_key}") == lab(READER).check_output(
        f"ssh-keygen -y -f {KEY}"
    )
    borrowed = _sftp_list("node1", borrowed_key)
    assert borrowed.rc != 0 and SHARD not in borrowed.stdout, borrowed.stdout
    assert "Permission denied (publickey)" in borrowed.stderr, borrowed.stderr

    # sshd's own reason: the key matched, its source did not.
    def logged():
        lines = holder.run(f"journalctl -q --no-pager --since @{since} _COMM=sshd").stdout.splitlines()
        reason = "with correct key but not from a permitted host"
        ips = (f"ip={address('node1')},", f"ip={address('node1')})")
        return any(reason in line and any(ip in line for ip in ips) for line in lines)

    assert wait_for(logged, timeout=60), holder.run(f"journalctl -q --no-pager --since @{since} _COMM=sshd").stdout


def test_a_worker_reads_exactly_the_tensor_from_the_holder(empty_cache):
    reader = empty_cache
    assert not reader.file(f"{MODEL_DIR}/{SHARD}").exists  # the reader has no copy: only the peer can give it
    result = seed()
    assert not result.get("failed"), result
    assert (result["written"], result["fetched"], result["unavailable"]) == (1, 1, 0), result["msg"]
    assert (result["bytes_peer"], result["bytes_fetched"], result["shards_peer"]) == (SIZE, 0, [SHARD])
    [row] = result["tensors"]
    assert row["source"] == "peer" and row["state"] == "written"
    expected = lab(HOLDER).check_output(
        f"tail -c +{OFFSET + 1} {MODEL_DIR}/{SHARD} | head -c {SIZE} | sha256sum | cut -d' ' -f1"
    )
    assert sha256(reader, f"{CACHE}/{row['hash']}") == expected
    assert reader.check_output(f"ls -A {CACHE}").split() == [row["hash"]]  # no temporary left behind


def test_a_key_the_export_does_not_know_reads_nothing(empty_cache):
    reader = empty_cache
    reader.run_expect([0], f"ssh-keygen -q -t ed25519 -N '' -f {STRANGER_KEY}")
    result = seed(identity_file=STRANGER_KEY)
    assert not result.get("failed"), result
    assert (result["written"], result["unavailable"], result["bytes_peer"]) == (0, 1, 0)
    assert "Permission denied" in result["tensors"][0]["reason"], result["tensors"][0]
    assert reader.check_output(f"ls -A {CACHE}") == ""
