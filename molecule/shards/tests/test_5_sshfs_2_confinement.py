"""The key the collection made on the client can read the export over SFTP and nothing else."""

from conftest import sha256
from labtest import lab
from sshfs_lab import (
    CLIENT,
    EXPORT_DIR,
    EXPORT_ROOT,
    EXPORT_USER,
    FILES,
    KEY,
    KNOWN_HOSTS,
    SERVER,
    VIEW,
    address,
    sftp_batch,
    shell_quote,
    ssh_as_export_user,
)


def test_private_key_was_made_on_the_client_and_stays_there():
    client, server = lab(CLIENT), lab(SERVER)
    key = client.file(KEY)
    assert key.exists and key.user == "root" and key.mode == 0o600
    # The serving host has a key of its own there (a worker, it reads the other holders' exports: test_2_peers.py),
    # never the client's.
    assert not server.file(KEY).exists or sha256(server, KEY) != sha256(client, KEY)
    keys = lab(SERVER).file(f"/etc/ssh/llamarpc-authorized-keys/{EXPORT_USER}").content_string
    assert f'restrict,from="{address(CLIENT)}" ssh-ed25519 ' in keys


def test_a_shell_command_is_refused():
    client, server = lab(CLIENT), lab(SERVER)
    status, out, err = ssh_as_export_user(
        client, f"{EXPORT_USER}@{address(SERVER)} 'id; touch /root/pwned; echo ran-a-shell'"
    )
    assert "uid=" not in out and "ran-a-shell" not in out, (status, out, err)
    assert not server.file("/root/pwned").exists
    status, out, err = ssh_as_export_user(client, f"-tt {EXPORT_USER}@{address(SERVER)}")
    assert "uid=" not in out
    assert "PTY allocation request failed" in err


def test_forwarding_is_refused():
    status, out, err = ssh_as_export_user(lab(CLIENT), f"-W 127.0.0.1:22 {EXPORT_USER}@{address(SERVER)}", timeout=10)
    assert "SSH-2.0" not in out
    assert status != 0, (status, out, err)


def test_reading_works():
    client = lab(CLIENT)
    result = sftp_batch(client, ["ls -l /", f"get {VIEW}/{FILES[0]} /root/sftp-read-check"])
    assert result.rc == 0, result.stderr
    assert sha256(client, "/root/sftp-read-check") == sha256(lab(SERVER), f"{EXPORT_DIR}/{FILES[0]}")
    client.run("rm -f /root/sftp-read-check")


def test_writing_fails():
    client, server = lab(CLIENT), lab(SERVER)
    # In the model directory's view: the directory is writable by its owner, the view and the SFTP server are not.
    for command in (
        f"put /etc/hostname {VIEW}/planted",
        f"mkdir {VIEW}/planted-dir",
        f"rm {VIEW}/{FILES[0]}",
        f"rename {VIEW}/{FILES[0]} {VIEW}/x",
        "put /etc/hostname /planted",
    ):
        result = sftp_batch(client, [command])
        assert result.rc != 0, command
    assert not server.file(f"{EXPORT_DIR}/planted").exists
    assert not server.file(f"{EXPORT_ROOT}/planted").exists
    assert not server.file(f"{EXPORT_DIR}/planted-dir").exists
    assert server.file(f"{EXPORT_DIR}/{FILES[0]}").exists


def test_nothing_outside_the_export_is_visible():
    client = lab(CLIENT)
    assert sftp_batch(client, ["ls /etc/passwd"]).rc != 0
    listing = sftp_batch(client, ["cd /..", "ls -1"])
    assert listing.rc == 0
    assert [line.strip() for line in listing.stdout.splitlines() if not line.startswith("sftp>")] == [VIEW.strip("/")]
    inside = sftp_batch(client, [f"ls -1 {VIEW}"])
    assert inside.rc == 0 and FILES[0] in inside.stdout


def test_the_match_block_applies_to_the_export_user_only():
    server = lab(SERVER)
    addr = address(CLIENT)
    export = server.check_output(f"sshd -T -C user={EXPORT_USER},host=node1,addr={addr}")
    assert f"forcecommand internal-sftp -R -d {VIEW}" in export
    assert f"chrootdirectory {EXPORT_ROOT}" in export
    admin = server.check_output(f"sshd -T -C user=lab,host=node1,addr={addr}")
    assert "forcecommand none" in admin
    assert "chrootdirectory none" in admin


def test_the_view_is_a_read_only_bind_mount_of_the_model_directory():
    server = lab(SERVER)
    view = f"{EXPORT_ROOT}{VIEW}"
    assert "ro" in server.check_output(f"findmnt -n -o OPTIONS --mountpoint {view}").split(",")
    same = server.check_output(f"stat -c %d:%i {EXPORT_DIR} {view}").split()
    assert same[0] == same[1]
    root = server.file(EXPORT_ROOT)
    assert root.user == "root" and root.mode == 0o755
    assert server.run(f"touch {view}/written-by-root").rc != 0  # read-only for root too


def test_the_sftp_server_itself_refuses_writes_where_the_filesystem_would_allow_them():
    """``internal-sftp -R`` on its own: a directory in the chroot that the export user owns (its bind mount is not
    read-only and its mode allows writing) still takes no file, no directory and no removal over SFTP."""
    server = lab(SERVER)
    probe = f"{EXPORT_ROOT}/writable-probe"
    server.run_expect(
        [0],
        f"install -d -o {EXPORT_USER} -m 0755 {probe} && install -m 0644 -o {EXPORT_USER} /etc/hostname {probe}/old",
    )
    try:
        # The filesystem lets the export user write there: only the SFTP server's read-only mode stands in the way.
        writable = server.run(f"setpriv --reuid={EXPORT_USER} --regid={EXPORT_USER} --clear-groups touch {probe}/by-fs")
        assert writable.rc == 0, writable.stderr
        for command in (
            "put /etc/hostname /writable-probe/planted",
            "mkdir /writable-probe/dir",
            "rm /writable-probe/old",
        ):
            result = sftp_batch(lab(CLIENT), [command])
            assert result.rc != 0, (command, result.stdout, result.stderr)
        assert not server.file(f"{probe}/planted").exists
        assert not server.file(f"{probe}/dir").exists
        assert server.file(f"{probe}/old").exists
        # Reading there works (the refusal is the mode's, not a missing directory).
        assert sftp_batch(lab(CLIENT), ["ls -1 /writable-probe"]).rc == 0
    finally:
        server.run(f"rm -rf {probe}")


def test_the_key_opens_nothing_from_any_other_host():
    """``from=`` in the authorised key: the client's own key and pinned host key, copied to another lab host, are
    refused there, and sshd says why; the same key from the client is accepted in the same test."""
    client, thief, server = lab(CLIENT), lab("node3"), lab(SERVER)
    stolen, pinned = "/root/llamarpc-stolen-key", "/root/llamarpc-stolen-known-hosts"
    since = server.check_output("date +%s")
    thief.run_expect([0], f"printf %s {shell_quote(client.file(KEY).content_string)} > {stolen} && chmod 0600 {stolen}")
    thief.run_expect([0], f"printf %s {shell_quote(client.file(KNOWN_HOSTS).content_string)} > {pinned}")
    try:
        refused = sftp_batch(thief, ["ls -1 /"], key=stolen, known_hosts=pinned)
        accepted = sftp_batch(client, ["ls -1 /"])
    finally:
        thief.run(f"rm -f {stolen} {pinned}")
    assert accepted.rc == 0, accepted.stderr
    assert refused.rc != 0, refused.stdout
    assert "Permission denied" in refused.stderr, refused.stderr
    log = server.check_output(f"journalctl --quiet --no-pager --since @{since} --grep 'not from a permitted host'")
    assert f"ip={address('node3')}" in log, log
