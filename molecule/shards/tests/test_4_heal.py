"""The role heals a hung mount (sshfs SIGSTOPped, as the seed's deadlocked sshfs): state=mounted in the role."""

from conftest import COORDINATOR, EXPECTED_HOSTS, FILES, MODEL_DIR, MOUNT_ROOT, place, sha256, unit_of, unit_pid
from labtest import lab

SHARD = FILES[2]
HOST = EXPECTED_HOSTS[SHARD["name"]]


def test_a_hung_sshfs_is_healed_by_the_role():
    coordinator = lab(COORDINATOR)
    pid = unit_pid(coordinator, unit_of(HOST))
    coordinator.check_output(f"kill -STOP {pid}")
    # A stat of the mount point now blocks (a shard's attributes may still answer from the kernel's cache).
    assert coordinator.run(f"timeout 3 stat {MOUNT_ROOT}/{HOST}").rc == 124
    result, _done = place()
    mount = next(entry for entry in result["mounts"] if entry["item"] == HOST)
    print(f"\nSIGSTOP heal by the role: {mount['health_before']} -> {mount['health']}, {mount['actions']}")
    assert mount["changed"] and mount["health_before"] in {"stopped", "hung"}
    assert mount["health"] == "ok"
    assert result["changed"] is True
    assert unit_pid(coordinator, unit_of(HOST)) != pid
    assert sha256(coordinator, f"{MODEL_DIR}/{SHARD['name']}") == SHARD["sha256"]
