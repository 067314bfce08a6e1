"""The lab's own promises, on a one-host lab of its own (needs root, like the lab): a second lab_up changes nothing;
the host's bandwidth cap holds both ways (measured); a host whose systemd-nspawn died (SIGKILL, OOM) - its container
still running without it - is killed, not booted a second time on the same root; lab_down leaves no namespace,
interface, mount, process, cgroup or state behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from ansible_run import ansible_playbook

from ansible_collections.llamarpc.lab.plugins.module_utils._lab import netns_pids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")

NAME = "life"
STATE = Path(f"/var/lib/llamarpc-lab/{NAME}")
HOST = STATE / "hosts" / "node1"
NETNS = f"/run/netns/llrpc-{NAME}-node1"
BRIDGE = "llrpclife0"
CGROUP = Path(f"/sys/fs/cgroup/memory/llamarpc-lab/llrpc-{NAME}-node1")
CAP_BITS = 20_000_000  # the host's bandwidth (lab.yml's ``bandwidth``), below
PORT = 5599  # inside the host's own network namespace
#: Run inside the host's namespace (``ip netns exec``, this machine's python3): ``send ADDR PORT BYTES`` connects and
#: sends; ``recv PORT`` prints "ready", takes one connection and prints the seconds from its first byte to its end.
NETNS_PEER = """
import socket, sys, time
if sys.argv[1] == "send":
    with socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=120) as conn:
        conn.sendall(bytes(int(sys.argv[4])))
else:
    with socket.create_server(("0.0.0.0", int(sys.argv[2]))) as server:
        print("ready", flush=True)
        conn, _ = server.accept()
        first = conn.recv(65536)
        start = time.monotonic()
        while conn.recv(1 << 20):
            pass
        print(time.monotonic() - start, flush=True)
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    inventory = tmp_path_factory.mktemp("life") / "hosts.yml"
    variables = json.dumps(
        {
            "lab_name": NAME,
            "lab_bridge": BRIDGE,
            "lab_subnet": "10.213.30.0/24",
            "lab_inventory_path": str(inventory),
            "lab_hosts": [
                {
                    "name": "node1",
                    "groups": ["coordinator", "rpc_workers"],
                    "data_size": "16M",
                    "memory_max": "1G",
                    "bandwidth": f"{CAP_BITS // 1_000_000}mbit",
                }
            ],
        }
    )

    def run(playbook):
        result = ansible_playbook("-i", "localhost,", f"lab/playbooks/{playbook}.yml", "-e", variables, timeout=900)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        return result.stdout

    run("lab_up")
    yield run
    run("lab_down")  # again after the last test: a no-op then (and the clean-up when a test failed)


def nspawn_pid():
    return int((HOST / "nspawn.pid").read_text(encoding="ascii"))


def wait_gone(pid, within=120):
    """Wait (bounded, not timed) for ``pid`` to exit."""
    deadline = time.monotonic() + within
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, f"process {pid} still there after {within} s"
        time.sleep(0.2)


def container_inits(pids):
    """The processes of ``pids`` whose parent is not among them: one per container (its systemd)."""
    inits = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
        except OSError:
            continue
        ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if ppid not in pids:
            inits.append(pid)
    return inits


def test_a_second_lab_up_changes_nothing(lab):
    out = lab("lab_up")
    assert "localhost                  : ok=" in out and " changed=0 " in out.split("PLAY RECAP")[-1], out[-3000:]


def addresses():
    """(the controller's address on the lab bridge, the host's address)."""
    links = json.loads(
        subprocess.run(["ip", "-j", "addr", "show", BRIDGE], capture_output=True, text=True, check=True).stdout
    )
    bridge = next(a["local"] for a in links[0]["addr_info"] if a["family"] == "inet")
    inside = subprocess.run(
        ["ip", "netns", "exec", Path(NETNS).name, "ip", "-j", "-4", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    host = next(a["local"] for link in json.loads(inside) for a in link["addr_info"])
    return bridge, host


def from_host(size, bridge):
    """Bits per second of ``size`` bytes sent from inside the host to a listener of this test on the bridge."""
    seconds = {}
    with socket.create_server((bridge, 0)) as server:
        port = server.getsockname()[1]

        def receive():
            conn = server.accept()[0]
            with conn:
                conn.recv(65536)
                start = time.monotonic()
                while conn.recv(1 << 20):
                    pass
                seconds["took"] = time.monotonic() - start

        thread = threading.Thread(target=receive, daemon=True)
        thread.start()
        sender = [*netns_exec(), "send", bridge, str(port), str(size)]
        subprocess.run(sender, check=True, timeout=300)
        thread.join(300)
    return size * 8 / seconds["took"]


def to_host(size, host):
    """Bits per second of ``size`` bytes sent from this test to a listener inside the host."""
    with subprocess.Popen([*netns_exec(), "recv", str(PORT)], stdout=subprocess.PIPE, text=True) as receiver:
        assert receiver.stdout.readline().strip() == "ready"
        with socket.create_connection((host, PORT), timeout=120) as conn:
            conn.sendall(bytes(size))
        took = float(receiver.stdout.readline())
    return size * 8 / took


def netns_exec():
    return ["ip", "netns", "exec", Path(NETNS).name, "python3", "-c", NETNS_PEER]


def test_the_bandwidth_cap_holds_both_ways(lab):
    """tbf on both sides of the host's link: 4 MB each way comes through at no more than the cap (a loaded machine
    only slows it; without the cap a veth pair carries gigabits per second), and the kernel holds the cap at exactly
    the rate asked on both ends."""
    del lab
    bridge, host = addresses()
    size = 4_000_000
    up, down = from_host(size, bridge), to_host(size, host)
    print(
        f"cap {CAP_BITS / 1e6:.0f} Mbit/s: host -> controller {up / 1e6:.1f} Mbit/s, "
        f"controller -> host {down / 1e6:.1f} Mbit/s"
    )
    assert up <= CAP_BITS * 1.15, up
    assert down <= CAP_BITS * 1.15, down
    # What the cap is, read from the kernel (a measured lower bound would depend on the machine's load): a tbf at
    # exactly the asked rate at the root of both ends of the host's link.
    assert tbf_rates() == {"controller side": CAP_BITS, "host side": CAP_BITS}


def tbf_rates():
    """The root tbf's rate in bit/s on the controller's end of the host's link and on the host's eth0."""

    def show(*command):
        return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)

    def rate(qdiscs):
        root = [qdisc for qdisc in qdiscs if qdisc.get("root")]
        return root[0]["options"]["rate"] * 8 if root and root[0]["kind"] == "tbf" else root

    (veth,) = [port["ifname"] for port in show("ip", "-j", "link", "show", "master", BRIDGE)]
    return {
        "controller side": rate(show("tc", "-j", "qdisc", "show", "dev", veth)),
        "host side": rate(show("tc", "-n", Path(NETNS).name, "-j", "qdisc", "show", "dev", "eth0")),
    }


def test_a_host_whose_nspawn_died_is_killed_before_it_boots_again(lab):
    os.kill(nspawn_pid(), signal.SIGKILL)
    wait_gone(nspawn_pid())
    orphans = netns_pids(NETNS)
    # The hazard, live: the container's systemd and services run on without their nspawn.
    assert container_inits(orphans), "no process left in the host's namespace after its nspawn was killed"
    lab("lab_up")
    now = netns_pids(NETNS)
    assert set(orphans).isdisjoint(now), f"processes of the dead container still run: {set(orphans) & set(now)}"
    assert len(container_inits(now)) == 1, f"not exactly one container in the host's namespace: {now}"
    assert Path(f"/proc/{nspawn_pid()}").exists()


def test_lab_down_leaves_nothing_even_of_a_container_without_its_nspawn(lab):
    namespace = os.stat(NETNS)
    os.kill(nspawn_pid(), signal.SIGKILL)
    wait_gone(nspawn_pid())
    assert container_inits(netns_pids(NETNS)), "no process left in the host's namespace after its nspawn was killed"
    lab("lab_down")
    left = [pid for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()) if _same_netns(pid, namespace)]
    assert left == [], f"processes still in the removed host's namespace: {left}"
    assert not Path(NETNS).exists()
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True).stdout)
    assert BRIDGE not in {link["ifname"] for link in links}
    assert str(STATE) not in Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    assert not CGROUP.exists()
    assert not STATE.exists()


def _same_netns(pid, namespace):
    try:
        found = os.stat(f"/proc/{pid}/ns/net")
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == (namespace.st_dev, namespace.st_ino)
