"""_dpkg: dpkg-query's status and apt-get's simulation read as apt_packages reports them (recorded Debian 12 output)."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.packages import _dpkg

# dpkg-query --show --showformat='${Package}\t${db:Status-Status}\t${Version}\n' bash nftables rsync libgomp1
DPKG = "bash\tinstalled\t5.2.15-2+b7\nrsync\tconfig-files\t3.2.7-1\nlibgomp1\tinstalled\t12.2.0-14\n"

# apt-get install --simulate ... -- nftables rsync gcc-12-base (on a host with an older gcc-12-base)
SIMULATION = """\
NOTE: This is only a simulation!
      apt-get needs root privileges for real execution.
Reading package lists...
The following NEW packages will be installed:
  libjansson4 libnftables1 libnftnl11 libpopt0 libxxhash0 nftables rsync
Inst gcc-12-base [12.2.0-13] (12.2.0-14 Debian:12.9/stable [amd64])
Inst libjansson4 (2.14-2 Debian:12.9/stable [amd64])
Inst libnftnl11 (1.2.4-2 Debian:12.9/stable [amd64])
Inst libnftables1 (1.0.6-2+deb12u2 Debian:12.9/stable [amd64])
Inst nftables (1.0.6-2+deb12u2 Debian:12.9/stable [amd64])
Inst libpopt0 (1.19+dfsg-1 Debian:12.9/stable [amd64])
Inst libxxhash0 (0.8.1-1 Debian:12.9/stable [amd64])
Inst rsync (3.2.7-1 Debian:12.9/stable [amd64])
Conf gcc-12-base (12.2.0-14 Debian:12.9/stable [amd64])
Conf nftables (1.0.6-2+deb12u2 Debian:12.9/stable [amd64])
"""


def test_only_installed_counts_and_each_missing_name_once():
    states = _dpkg.installed_states(DPKG)
    assert states["bash"] == ("installed", "5.2.15-2+b7")
    # rsync removed but not purged (config-files) is not installed; nftables is unknown to dpkg.
    assert _dpkg.missing(["bash", "nftables", "rsync", "nftables", "libgomp1"], states) == ["nftables", "rsync"]


def test_simulation_lists_what_would_be_unpacked_in_order():
    packages = _dpkg.simulated(SIMULATION)
    assert [p["name"] for p in packages] == [
        "gcc-12-base",
        "libjansson4",
        "libnftnl11",
        "libnftables1",
        "nftables",
        "libpopt0",
        "libxxhash0",
        "rsync",
    ]
    assert packages[0] == {"name": "gcc-12-base", "version": "12.2.0-14", "upgrade": True}
    assert packages[1]["upgrade"] is False


def test_simulate_command_reads_only():
    argv = _dpkg.simulate_command(["nftables"], install_recommends=False)
    assert argv[:3] == ["apt-get", "install", "--simulate"]
    assert "Dir::Cache::pkgcache=" in argv and "Dir::Cache::srcpkgcache=" in argv and "Debug::NoLocking=true" in argv
    assert argv[-3:] == ["--no-install-recommends", "--", "nftables"]
    assert "--install-recommends" not in _dpkg.simulate_command(["x"])


def test_summary():
    assert _dpkg.summary(["bash"], [], []) == "already installed: bash"
    would = _dpkg.simulated(SIMULATION)
    text = _dpkg.summary(["nftables", "rsync"], ["nftables", "rsync"], would)
    assert text.startswith("would install nftables rsync (8 package(s) in all; with gcc-12-base libjansson4")
    failed = _dpkg.summary(["nftables"], ["nftables"], [], "E: Unable to locate package nftables")
    assert failed == (
        "would install nftables (their dependencies are not known: apt-get --simulate said "
        "E: Unable to locate package nftables)"
    )


def test_simulation_entries_carry_the_installed_version_and_architecture():
    # The one parser of "Inst" lines (lab_apt_repo's parse_simulation reads through it too).
    entries = _dpkg.simulation_entries(SIMULATION)
    assert entries[0] == ("gcc-12-base", "12.2.0-13", "12.2.0-14", "amd64")
    assert entries[-1] == ("rsync", None, "3.2.7-1", "amd64")
    assert len(entries) == len(_dpkg.simulated(SIMULATION)) == 8
