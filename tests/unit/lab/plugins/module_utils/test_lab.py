"""The lab's pure helpers: request validation, address plans, sizes, rates, apt sources, mount table."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.llamarpc.lab.plugins.module_utils import _lab as lab


def test_default_hosts_follow_the_seed_layout():
    hosts = lab.default_hosts(6)
    assert [h["name"] for h in hosts] == [f"node{i}" for i in range(1, 7)]
    assert hosts[0]["groups"] == ["coordinator", "rpc_workers"]
    assert all(h["groups"] == ["rpc_workers"] for h in hosts[1:])


@pytest.mark.parametrize("count", [0, -1, True, "3", 2.5])
def test_default_hosts_rejects_bad_counts(count):
    with pytest.raises(lab.LabError, match="lab_host_count"):
        lab.default_hosts(count)


def test_plan_assigns_addresses_and_unique_kernel_names():
    planned = lab.plan("demo", lab.default_hosts(3), "10.213.0.0/24")
    assert planned["bridge_address"] == "10.213.0.1/24"
    assert [h["address"] for h in planned["hosts"]] == ["10.213.0.11", "10.213.0.12", "10.213.0.13"]
    assert len({h["veth"] for h in planned["hosts"]}) == 3
    assert all(len(h["veth"]) <= 15 for h in planned["hosts"])
    assert planned["hosts"][0]["netns"] == "llrpc-demo-node1"


def test_plan_applies_defaults_and_parses_limits():
    hosts = [{"name": "a", "data_size": "1G"}, {"name": "b"}]
    planned = lab.plan("x", hosts, "10.0.0.0/24", {"memory_max": "512M", "bandwidth": "100mbit"})
    a, b = planned["hosts"]
    assert a["data_size"] == 1024**3 and b["data_size"] == 0
    assert a["memory_max"] == b["memory_max"] == 512 * 1024**2
    assert a["bandwidth"] == 100_000_000


def test_plan_capacity_is_the_subnet_less_reserved_addresses():
    # /28 has 14 usable addresses: .1 for the controller and 10 reserved leave 4 for hosts.
    assert len(lab.plan("x", lab.default_hosts(4), "10.0.0.0/28")["hosts"]) == 4
    with pytest.raises(lab.LabError, match="do not fit"):
        lab.plan("x", lab.default_hosts(5), "10.0.0.0/28")


@pytest.mark.parametrize(
    ("hosts", "subnet", "message"),
    [
        ([], "10.0.0.0/24", "at least one host"),
        ([{"name": "Node1"}], "10.0.0.0/24", "invalid lab host name"),
        ([{"name": "node_1"}], "10.0.0.0/24", "invalid lab host name"),
        ([{"name": "-x"}], "10.0.0.0/24", "invalid lab host name"),
        ([{"name": "a" * 33}], "10.0.0.0/24", "invalid lab host name"),
        ([{"name": "a"}, {"name": "a"}], "10.0.0.0/24", "used twice"),
        ([{"name": "a", "address": "10.0.1.5"}], "10.0.0.0/24", "not a host address"),
        ([{"name": "a", "address": "10.0.0.1"}], "10.0.0.0/24", "already taken"),
        ([{"name": "a", "address": "10.0.0.20"}, {"name": "b", "address": "10.0.0.20"}], "10.0.0.0/24", "taken"),
        ([{"name": "a", "address": "nope"}], "10.0.0.0/24", "invalid address"),
        ([{"name": "a"}], "8.8.8.0/24", "private IPv4"),
        ([{"name": "a"}], "10.0.0.1/24", "invalid lab subnet"),
        ([{"name": "a"}], "fd00::/64", "private IPv4"),
        ([{"name": "a", "groups": "coordinator"}], "10.0.0.0/24", "groups must be a list"),
        ([{"name": "a", "data_size": "-1G"}], "10.0.0.0/24", "invalid data_size"),
        ([{"name": "a", "memory_max": "lots"}], "10.0.0.0/24", "invalid memory_max"),
        ([{"name": "a", "bandwidth": "fast"}], "10.0.0.0/24", "invalid bandwidth"),
        (["a"], "10.0.0.0/24", "must be a mapping"),
    ],
)
def test_plan_rejects_bad_requests(hosts, subnet, message):
    with pytest.raises(lab.LabError, match=message):
        lab.plan("x", hosts, subnet)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0), ("", 0), (None, 0), (4096, 4096), ("1K", 1024), ("2G", 2 * 1024**3), ("3GB", 3 * 1024**3)],
)
def test_parse_size(text, expected):
    assert lab.parse_size(text) == expected


@pytest.mark.parametrize(("text", "bits"), [("100mbit", 10**8), ("1gbit", 10**9), ("20mbps", 160 * 10**6)])
def test_parse_rate(text, bits):
    assert lab.parse_rate(text) == bits


def test_parse_rate_rejects_tiny_rates():
    with pytest.raises(lab.LabError, match="at least"):
        lab.parse_rate("10bit")


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_A", max_size=40))
def test_validate_name_accepts_exactly_rfc1123_labels(name):
    ok = (
        0 < len(name) <= 32
        and name[0].isalpha()
        and name[0].islower()
        and not name.endswith("-")
        and all(c.islower() or c.isdigit() or c == "-" for c in name)
    )
    if ok:
        assert lab.validate_name(name) == name
    else:
        with pytest.raises(lab.LabError):
            lab.validate_name(name)


def test_image_key_changes_with_content_not_order():
    base = lab.image_key("bookworm", "minbase", ["a", "b"], "x86_64", "lab")
    assert base == lab.image_key("bookworm", "minbase", ["b", "a", "a"], "x86_64", "lab")
    assert base != lab.image_key("bookworm", "minbase", ["a", "b", "c"], "x86_64", "lab")
    assert base != lab.image_key("trixie", "minbase", ["a", "b"], "x86_64", "lab")
    assert base != lab.image_key("bookworm", "minbase", ["a", "b"], "aarch64", "lab")


DEB822 = """\
Types: deb
URIs: http://mirror.test/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.test/debian-security
Suites: bookworm-security
Components: main
"""


def test_mirror_from_deb822_sources():
    assert lab.mirror_from_sources(DEB822, "bookworm") == "http://mirror.test/debian"
    assert lab.mirror_from_sources(DEB822, "trixie") is None


def test_mirror_from_one_line_sources():
    text = (
        "# comment\ndeb-src http://a.test/debian bookworm main\ndeb [arch=amd64] http://b.test/debian bookworm main\n"
    )
    assert lab.mirror_from_sources(text, "bookworm") == "http://b.test/debian"


def test_mirror_skips_disabled_stanzas():
    text = "Types: deb\nURIs: http://off.test/debian\nSuites: bookworm\nEnabled: no\n\n" + DEB822
    assert lab.mirror_from_sources(text, "bookworm") == "http://mirror.test/debian"


def test_mount_points_decode_escapes():
    text = "22 1 8:1 / / rw - ext4 /dev/vda rw\n40 22 0:50 / /var/lib/lab/with\\040space rw - overlay overlay rw\n"
    assert lab.mount_points(text) == ["/", "/var/lib/lab/with space"]


def test_nspawn_argv_has_the_measured_flags():
    argv = lab.nspawn_argv("/usr/bin/systemd-nspawn", "n1", "/r", "/run/netns/x", binds=[("/d", "/data")])
    assert argv[0] == "/usr/bin/systemd-nspawn"
    for flag in (
        "--boot",
        "--register=no",
        "--keep-unit",
        "--network-namespace-path=/run/netns/x",
        "--bind=/dev/fuse",
        "--bind=/dev/net/tun",
        "--capability=CAP_NET_ADMIN",
        "--bind=/d:/data",
    ):
        assert flag in argv
    assert argv[argv.index("-M") + 1] == "n1"


def test_tbf_burst_grows_with_rate():
    assert lab.tbf_args(8_000_000)[4] == str(32 * 1024)
    assert int(lab.tbf_args(10**9)[4]) == 10**9 // 8 // 100


def test_netns_pids_finds_the_processes_of_one_namespace(tmp_path):
    mine, other = tmp_path / "netns-mine", tmp_path / "netns-other"
    mine.write_text("")
    other.write_text("")
    proc = tmp_path / "proc"
    for pid, target in (("12", mine), ("345", other), ("6789", mine)):
        (proc / pid / "ns").mkdir(parents=True)
        (proc / pid / "ns" / "net").symlink_to(target)
    (proc / "self").mkdir()  # not a PID
    (proc / "99" / "ns").mkdir(parents=True)  # a process that exited meanwhile: no ns/net any more
    assert lab.netns_pids(str(mine), proc=str(proc)) == [12, 6789]
    assert lab.netns_pids(str(tmp_path / "deleted-netns"), proc=str(proc)) == []


def test_netns_pids_on_this_machine_includes_this_process():
    assert os.getpid() in lab.netns_pids("/proc/self/ns/net")


def _proc_with_children(proc, pid, children_by_task):
    for task, children in children_by_task.items():
        (proc / str(pid) / "task" / str(task)).mkdir(parents=True)
        (proc / str(pid) / "task" / str(task) / "children").write_text(" ".join(map(str, children)) + " ")


def test_container_init_is_the_only_child_of_nspawn_in_any_thread(tmp_path):
    _proc_with_children(tmp_path, 40, {40: [], 41: [512]})
    assert lab.container_init(40, proc=str(tmp_path)) == 512


@pytest.mark.parametrize("children_by_task", [{70: []}, {70: [71], 72: [73]}, {}])
def test_container_init_is_none_without_exactly_one_child(tmp_path, children_by_task):
    _proc_with_children(tmp_path, 70, children_by_task)
    assert lab.container_init(70, proc=str(tmp_path)) is None


def test_container_init_is_none_for_a_process_that_is_gone(tmp_path):
    assert lab.container_init(99999, proc=str(tmp_path)) is None


def test_container_init_on_this_machine_finds_the_child_of_a_real_process():
    with subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True) as parent:
        child = int(parent.stdout.readline())
        try:
            assert lab.container_init(parent.pid) == child
        finally:
            os.kill(child, signal.SIGKILL)
