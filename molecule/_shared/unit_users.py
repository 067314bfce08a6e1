"""Who the collection's units run as, and what the few root ones may do: "every service runs as its own unprivileged
user" and each root unit's stated reason, read from the units systemd loaded and the processes the kernel runs
(cluster fault 12, the shards scenario's served cluster, the mesh's wireguard-go)."""

from __future__ import annotations

#: The collection's units that run as root: their reason, and the capability bounding set that reason allows (systemd's
#: CapabilityBoundingSet, lower-case names). Every other llamarpc unit must name a user of its own (User=), not root.
ROOT_UNITS = {
    "llamarpc-server-supervisor.service": (
        "restarts llamarpc-server.service and writes its override under /run/llamarpc (systemctl needs root); it only "
        "probes workers, with no capabilities",
        frozenset(),
    ),
    "llamarpc-rpc-worker-firewall.service": (
        "loads the worker's nftables rules: CAP_NET_ADMIN in the host's network namespace, nothing else",
        frozenset({"cap_net_admin"}),
    ),
    "llamarpc-node-exporter-firewall.service": (
        "loads node exporter's nftables rules (only Prometheus may scrape): CAP_NET_ADMIN in the host's network "
        "namespace, nothing else",
        frozenset({"cap_net_admin"}),
    ),
    "llamarpc-sshfs-<mount>.service": (
        "mounts FUSE with allow_other at the coordinator's mount root with the root-only key of /etc/llamarpc/sshfs: "
        "CAP_SYS_ADMIN only",
        frozenset({"cap_sys_admin"}),
    ),
    "llamarpc-wireguard-go@<interface>.service": (
        "creates the mesh's TUN device and configures it: CAP_NET_ADMIN only",
        frozenset({"cap_net_admin"}),
    ),
}
#: Units that share another unit's user by design, the unit whose user they share: the cache pruner works on the
#: worker's tensor cache; the gate answers llama-server's clients while a play restarts it.
SHARES_USER_OF = {
    "llamarpc-rpc-worker-cache-prune.service": "llamarpc-rpc-worker.service",
    "llamarpc-server-gate.service": "llamarpc-server.service",
}
#: Capability numbers (linux/capability.h) of the names ROOT_UNITS allows, to read a process's CapBnd mask.
CAPABILITY_BITS = {"cap_net_admin": 12, "cap_net_raw": 13, "cap_sys_admin": 21}


def units(host):
    """The collection's services on ``host``; the lab's own units (llamarpc-lab-*, made by lab_host) are not ours."""
    listed = host.run("systemctl list-units 'llamarpc*' --all --plain --no-legend --type=service").stdout
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    return sorted(name for name in names if not name.startswith("llamarpc-lab-"))


def properties(host, names, *props):
    """Unit -> {property: value} as systemd has them loaded."""
    if not names:
        return {}
    out = host.run_expect([0], "systemctl show -p Id " + " ".join(f"-p {p}" for p in props) + " " + " ".join(names))
    # One block per unit, separated by an empty line; within a block systemd orders the properties its own way.
    blocks = [
        dict(line.split("=", 1) for line in block.splitlines() if "=" in line) for block in out.stdout.split("\n\n")
    ]
    return {block["Id"]: block for block in blocks if "Id" in block}


def template(unit):
    """A unit name with its per-mount or per-interface part folded (one row per kind of unit)."""
    if unit.startswith("llamarpc-sshfs-"):
        return "llamarpc-sshfs-<mount>.service"
    if unit.startswith("llamarpc-wireguard-go@"):
        return "llamarpc-wireguard-go@<interface>.service"
    return unit


def process_bounding_set(host, pid):
    """The bounding-set bits of a running process (/proc/PID/status CapBnd) as a set of capability numbers; None when
    the process has ended since its unit named it (a oneshot run by its timer, such as the supervisor, may finish
    between the two reads, more often on a loaded machine)."""
    result = host.run(f"cat /proc/{pid}/status")
    if result.rc != 0 and "No such file or directory" in result.stderr:
        return None
    assert result.rc == 0, f"cat /proc/{pid}/status: rc {result.rc}: {result.stderr.strip()}"
    status = result.stdout
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapBnd:")), 16)
    return {bit for bit in range(64) if mask >> bit & 1}


def root_unit_findings(host, name):
    """What contradicts ROOT_UNITS on ``host`` (a list of sentences): a root unit with a User=, a bounding set wider
    or other than its reason, a running main process whose kernel bounding set is not that; and the kinds seen."""
    wrong, seen = [], set()
    loaded = properties(host, units(host), "User", "CapabilityBoundingSet", "MainPID")
    for unit, props in loaded.items():
        kind = template(unit)
        if kind not in ROOT_UNITS:
            continue
        seen.add(kind)
        reason, allowed = ROOT_UNITS[kind]
        if props.get("User", "") not in ("", "root"):
            wrong.append(f"{unit} on {name}: User={props['User']}, expected root ({reason})")
        bounding = frozenset(props.get("CapabilityBoundingSet", "").split())
        if bounding != allowed:
            wrong.append(
                f"{unit} on {name}: CapabilityBoundingSet {' '.join(sorted(bounding)) or '(none)'}, "
                f"its reason allows {' '.join(sorted(allowed)) or 'none'} ({reason})"
            )
        pid = props.get("MainPID", "0")
        if pid not in ("", "0"):
            running = process_bounding_set(host, pid)
            expected = {CAPABILITY_BITS[cap] for cap in allowed}
            if running is not None and running != expected:
                wrong.append(f"{unit} on {name}: main PID {pid} has bounding set bits {sorted(running)}")
    return wrong, seen


def service_users(host, name):
    """{user: [units]} of the non-root llamarpc units on ``host`` (a unit that shares by design is counted as the unit
    it shares with), and the sentences for units that run as root without being one of ROOT_UNITS."""
    wrong, by_user = [], {}
    for unit, props in properties(host, units(host), "User").items():
        if template(unit) in ROOT_UNITS:
            continue
        user = props.get("User", "")
        if user in ("", "root"):
            wrong.append(f"{unit} on {name}: runs as root and is not one of the units that must")
            continue
        by_user.setdefault(user, set()).add(SHARES_USER_OF.get(unit, unit))
    return {user: sorted(owners) for user, owners in by_user.items()}, wrong


def distinct_user_findings(host, name, accounts=()):
    """Every service's user is its own: one service per user, and every user (with ``accounts``, users that are not
    units', such as the SFTP export's) a distinct non-zero uid with its own primary group. Sentences of what is not."""
    by_user, wrong = service_users(host, name)
    for user, owners in by_user.items():
        if len(owners) > 1:
            wrong.append(f"{user} on {name} runs several services: {', '.join(owners)}")
        if user in accounts:
            wrong.append(f"{user} on {name} runs {', '.join(owners)} and is also an account of its own")
    ids = {}
    for user in sorted(set(by_user) | set(accounts)):
        found = host.run(f"id -u {user}; id -g {user}")
        if found.rc != 0:
            wrong.append(f"{user} on {name}: no such user ({found.stderr.strip()})")
            continue
        uid, gid = found.stdout.split()
        if uid == "0" or gid == "0":
            wrong.append(f"{user} on {name}: uid {uid} gid {gid} (root)")
        ids[user] = (uid, gid)
    uids = [uid for uid, _gid in ids.values()]
    gids = [gid for _uid, gid in ids.values()]
    if len(set(uids)) != len(uids) or len(set(gids)) != len(gids):
        wrong.append(f"users on {name} share a uid or a primary group: {ids}")
    return by_user, ids, wrong
