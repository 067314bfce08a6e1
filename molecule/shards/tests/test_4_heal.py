"""The role heals a hung mount (sshfs SIGSTOPped, as the seed's deadlocked sshfs): state=mounted in the role."""

from conftest import COORDINATOR, EXPECTED_HOSTS, FILES, MODEL_DIR, MOUNT_ROOT, place, sha256, unit_of, unit_pid
from labtest import lab

SHARD = FILES[2]
HOST = EXPECTED_HOSTS[SHARD["name"]]


def test_a_hung_sshfs_is_healed_by_the_role():
    coordinator = lab(COORDINATOR)
    pid = unit_pid(coordinator, unit_of(HOST))
    coordinator.check_output(f"kill -STOP {pid}")
    try:
        # Listing the mount point now blocks: an opendir always reaches sshfs (a stat may be answered from the
        # kernel's attribute cache, and then the outcome depends on how fast the machine is).
        assert coordinator.run(f"timeout 3 ls {MOUNT_ROOT}/{HOST}").rc == 124
        result, _done = place()
    finally:
        coordinator.run(f"kill -CONT {pid}")  # a failed heal must not leave the next test a stopped sshfs
    mount = next(entry for entry in result["mounts"] if entry["item"] == HOST)
    print(f"\nSIGSTOP heal by the role: {mount['health_before']} -> {mount['health']}, {mount['actions']}")
    assert mount["changed"] and mount["health_before"] in {"stopped", "hung"}
    assert mount["health"] == "ok"
    assert result["changed"] is True
    assert unit_pid(coordinator, unit_of(HOST)) != pid
    assert sha256(coordinator, f"{MODEL_DIR}/{SHARD['name']}") == SHARD["sha256"]
