"""_llama_install: what a node has of a build (marker, packages, RPC server's name), what a run does about it, and an
unpack that is durable and leaves no marker when it fails. A decision per test; the node is a temporary directory and
dpkg/apt-get answer through a stand-in module."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_builds as lb
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_install as li

KEY = "930e0fe5fb03f4f0c82e7c44f6ac122e"
# dpkg-query's answer for the runtime packages (libgomp1 missing on a bare host) and apt-get's simulation.
DPKG_ALL = "libgomp1\tinstalled\t12.2.0-14\nlibstdc++6\tinstalled\t12.2.0-14\n"
DPKG_NO_GOMP = "libstdc++6\tinstalled\t12.2.0-14\n"
SIMULATION = (
    "Inst libgomp1 (12.2.0-14 Debian:12.9/stable [amd64])\nConf libgomp1 (12.2.0-14 Debian:12.9/stable [amd64])\n"
)
PACKAGES = ["libgomp1", "libstdc++6"]


class Exit(Exception):
    def __init__(self, result, failed):
        super().__init__(result)
        self.result, self.failed = result, failed


class FakeModule:
    """What run() uses of AnsibleModule; dpkg-query and apt-get answer from ``dpkg`` and SIMULATION."""

    def __init__(self, params, check_mode=False, diff=False, dpkg=DPKG_ALL):
        self.params = {spec_name: spec.get("default") for spec_name, spec in li.ARGUMENT_SPEC.items()}
        self.params.update(params)
        self.check_mode, self._diff, self.dpkg, self.commands = check_mode, diff, dpkg, []

    def get_bin_path(self, name, required=False):
        del required
        return f"/usr/bin/{name}"

    def run_command(self, argv):
        self.commands.append(argv)
        if argv[0].endswith("dpkg-query"):
            return 0, self.dpkg, ""
        return 0, SIMULATION, ""

    def exit_json(self, **result):
        raise Exit(result, False)

    def fail_json(self, msg, **result):
        raise Exit({**result, "msg": msg}, True)


def run(tmp_path, check_mode=False, diff=False, dpkg=DPKG_ALL, **params):
    params = {"install_dir": str(tmp_path / "opt"), "key": KEY, "packages": PACKAGES, **params}
    module = FakeModule(params, check_mode=check_mode, diff=diff, dpkg=dpkg)
    with pytest.raises(Exit) as caught:
        li.run(module)
    return caught.value


def make_archive(path, files=None, links=None):
    """A build's archive as llama_cpp_build packs it: flat, executables and their libraries (one a symlink)."""
    files = files or {"ggml-rpc-server": b"\x7fELF rpc", "llama-server": b"\x7fELF server", "libggml.so.0": b"lib"}
    links = {"libggml.so": "libggml.so.0"} if links is None else links
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return str(path)


def installed_node(tmp_path, names=("ggml-rpc-server", "llama-server"), key=KEY, record=True):
    """A node on which this build's install finished (its marker written last) and, with ``record``, was recorded as
    the current build (as a run without options beyond the key records it)."""
    key_dir = tmp_path / "opt" / key
    (key_dir / "bin").mkdir(parents=True)
    for name in names:
        (key_dir / "bin" / name).write_bytes(b"\x7fELF")
    (key_dir / "complete").write_text(f"{key}\n")
    if record:
        install_dir = str(tmp_path / "opt")
        name = li.rpc_server_name(str(key_dir / "bin"))
        lb.write(install_dir, lb.made_current(lb.read(install_dir), lb.entry(key, name)))
    return key_dir


# The marker: present, absent, not a regular file.


def test_marker_present_the_build_is_installed_and_nothing_is_done(tmp_path):
    key_dir = installed_node(tmp_path)
    outcome = run(tmp_path, archive="/controller/bin.tar.gz")
    assert not outcome.failed, outcome.result
    result = outcome.result
    assert result["marker_state"] == li.INSTALLED and not result["need_archive"] and not result["unpacked"]
    assert not result["changed"] and result["installed"] is True
    assert result["bin_dir"] == str(key_dir / "bin") and result["server_bin"] == str(key_dir / "bin" / "llama-server")
    assert result["build_key"] == KEY


def test_marker_absent_a_real_run_asks_for_the_archive_and_writes_nothing(tmp_path):
    result = run(tmp_path, archive="/controller/bin.tar.gz").result
    assert result["marker_state"] == li.ABSENT and result["need_archive"] and not result["changed"]
    assert not (tmp_path / "opt").exists()


@pytest.mark.parametrize("kind", ["directory", "symlink"])
def test_a_marker_that_is_not_a_regular_file_is_no_install(tmp_path, kind):
    key_dir = installed_node(tmp_path)
    (key_dir / "complete").unlink()
    if kind == "directory":
        (key_dir / "complete").mkdir()
    else:
        (tmp_path / "elsewhere").write_text(f"{KEY}\n")
        (key_dir / "complete").symlink_to(tmp_path / "elsewhere")
    assert li.marker_state(str(key_dir / "complete")) == li.NOT_REGULAR
    result = run(tmp_path, archive="/controller/bin.tar.gz").result
    assert result["need_archive"]
    # The unpack replaces it with the marker it writes.
    li.unpack(make_archive(tmp_path / "bin.tar.gz"), str(tmp_path / "opt"), KEY)
    assert li.marker_state(str(key_dir / "complete")) == li.INSTALLED
    assert (key_dir / "complete").read_text() == f"{KEY}\n"


# The runtime packages: present, missing.


def test_packages_present_nothing_to_install(tmp_path):
    installed_node(tmp_path)
    result = run(tmp_path, dpkg=DPKG_ALL).result
    assert result["packages_missing"] == [] and not result["changed"]


def test_packages_missing_are_reported_for_the_action_to_install(tmp_path):
    installed_node(tmp_path)
    outcome = run(tmp_path, dpkg=DPKG_NO_GOMP)
    assert outcome.result["packages_missing"] == ["libgomp1"]
    assert not outcome.result["changed"]  # the action installs them (ansible.builtin.apt), not the module


def test_packages_missing_in_check_mode_are_simulated(tmp_path):
    installed_node(tmp_path)
    module = FakeModule(
        {"install_dir": str(tmp_path / "opt"), "key": KEY, "packages": PACKAGES}, True, True, DPKG_NO_GOMP
    )
    with pytest.raises(Exit) as caught:
        li.run(module)
    result = caught.value.result
    assert result["changed"] and result["installed"] is True
    assert [p["name"] for p in result["would_install"]] == ["libgomp1"] and "would install libgomp1" in result["msg"]
    assert any("--simulate" in argv for argv in module.commands)
    assert {"prepared": result["msg"] + "\n"} in result["diff"]


def test_no_packages_asked_none_queried(tmp_path):
    installed_node(tmp_path)
    module = FakeModule({"install_dir": str(tmp_path / "opt"), "key": KEY, "packages": []})
    with pytest.raises(Exit):
        li.run(module)
    assert module.commands == []


# The RPC server's name: the build's own, current, older.


@pytest.mark.parametrize(
    ("names", "given", "expected"),
    [
        (("ggml-rpc-server",), "", "ggml-rpc-server"),
        (("rpc-server",), "", "rpc-server"),
        (("ggml-rpc-server", "rpc-server"), "", "ggml-rpc-server"),
        ((), "", "ggml-rpc-server"),
        (("ggml-rpc-server",), "rpc-server", "rpc-server"),
    ],
    ids=["current", "older", "both", "none-yet", "given"],
)
def test_the_rpc_server_name(tmp_path, names, given, expected):
    key_dir = installed_node(tmp_path, names)
    result = run(tmp_path, rpc_server=given).result
    assert result["rpc_server_bin"] == str(key_dir / "bin" / expected)


# Check mode.


def test_check_mode_before_the_first_install_says_what_a_real_run_unpacks_and_writes_nothing(tmp_path):
    outcome = run(tmp_path, check_mode=True, diff=True, archive="/controller/bin.tar.gz")
    result = outcome.result
    assert result["changed"] and result["installed"] is False
    assert f"would unpack /controller/bin.tar.gz into {tmp_path}/opt/{KEY}/bin" in result["msg"]
    assert result["diff"][0] == {
        "before_header": f"{tmp_path}/opt/{KEY}/complete",
        "after_header": f"{tmp_path}/opt/{KEY}/complete",
        "before": "",
        "after": f"{KEY}\n",
    }
    assert not (tmp_path / "opt").exists()


def test_check_mode_with_a_build_not_there_yet(tmp_path):
    result = run(tmp_path, check_mode=True, key="new-build").result
    assert "would unpack the new build into" in result["msg"] and result["installed"] is False


def test_check_mode_on_an_installed_node_changes_nothing(tmp_path):
    installed_node(tmp_path)
    result = run(tmp_path, check_mode=True, diff=True).result
    assert not result["changed"] and result["installed"] is True and "diff" not in result


# The unpack: marker last, durable; a failure leaves no marker.


def test_a_real_run_with_the_archive_unpacks_then_marks(tmp_path):
    src = make_archive(tmp_path / "bin.tar.gz")
    outcome = run(
        tmp_path, diff=True, archive="/controller/bin.tar.gz", src=src, rpc_protocol="7.0.0", helpers=["llamarpc-fnv1a"]
    )
    result = outcome.result
    assert not outcome.failed, result
    assert result["changed"] and result["unpacked"] and result["installed"] is True
    bin_dir = tmp_path / "opt" / KEY / "bin"
    assert sorted(os.listdir(bin_dir)) == ["ggml-rpc-server", "libggml.so", "libggml.so.0", "llama-server"]
    assert os.readlink(bin_dir / "libggml.so") == "libggml.so.0"
    assert stat.S_IMODE(os.stat(bin_dir / "ggml-rpc-server").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(bin_dir).st_mode) == 0o755
    assert (tmp_path / "opt" / KEY / "complete").read_text() == f"{KEY}\n"
    assert result["rpc_protocol"] == "7.0.0" and result["helper_names"] == ["llamarpc-fnv1a"]
    assert sorted(os.listdir(tmp_path / "opt" / KEY)) == ["bin", "complete"]  # no staging left
    assert lb.read(str(tmp_path / "opt"))["builds"] == [
        lb.entry(KEY, "ggml-rpc-server", "7.0.0", ["llamarpc-fnv1a"])
    ], "the build is recorded as the current one, with what a rollback needs"
    # The run after (the same request): nothing to do.
    again = run(tmp_path, archive="/controller/bin.tar.gz", rpc_protocol="7.0.0", helpers=["llamarpc-fnv1a"]).result
    assert not again["changed"] and not again["need_archive"]


def test_the_unpack_is_durable_and_writes_the_marker_last(tmp_path, sync_trace):
    src = make_archive(tmp_path / "bin.tar.gz")
    li.unpack(src, str(tmp_path / "opt"), KEY)
    key_dir = tmp_path / "opt" / KEY
    sync_trace.assert_durable(key_dir / "bin")
    sync_trace.assert_durable(key_dir / "complete")
    renames = [call for call in sync_trace.calls if call[0] == "rename"]
    assert renames[-1][2] == str(key_dir / "complete"), "the marker is the last thing put in place"
    bin_rename = next(i for i, call in enumerate(sync_trace.calls) if call[0] == "rename" and call[2].endswith("/bin"))
    marker_renames = [i for i, call in enumerate(sync_trace.calls) if call[-1] == str(key_dir / "complete")]
    assert min(marker_renames) > bin_rename, "no marker before the binaries are in place"
    staged = sync_trace.calls[bin_rename][1]
    for name in ("ggml-rpc-server", "llama-server", "libggml.so.0"):
        assert ("fsync", os.path.join(staged, name)) in sync_trace.calls[:bin_rename], f"{name} not fsynced first"


def test_a_failed_unpack_leaves_no_marker_and_no_staging(tmp_path):
    bad = tmp_path / "bin.tar.gz"
    whole = make_archive_bytes(tmp_path)
    bad.write_bytes(whole[: len(whole) // 2])  # cut short
    outcome = run(tmp_path, archive="/controller/bin.tar.gz", src=str(bad))
    assert outcome.failed and "archive" in outcome.result["msg"]
    key_dir = tmp_path / "opt" / KEY
    assert not (key_dir / "complete").exists()
    assert [name for name in os.listdir(key_dir) if name.startswith(".")] == []


def test_an_archive_escaping_its_directory_is_refused_without_a_marker(tmp_path):
    src = make_archive(tmp_path / "bin.tar.gz", links={"libggml.so": "../../../etc/passwd"})
    with pytest.raises(li.InstallError, match="points outside"):
        li.unpack(src, str(tmp_path / "opt"), KEY)
    assert not (tmp_path / "opt" / KEY / "complete").exists()


def test_a_bin_left_by_an_unpack_cut_short_is_replaced_whole(tmp_path):
    key_dir = installed_node(tmp_path, ("ggml-rpc-server", "stale-file"))
    (key_dir / "complete").unlink()
    li.unpack(make_archive(tmp_path / "bin.tar.gz"), str(tmp_path / "opt"), KEY)
    assert "stale-file" not in os.listdir(key_dir / "bin")
    assert sorted(os.listdir(key_dir)) == ["bin", "complete"]


def test_a_zip_keeps_the_executables_executable(tmp_path):
    src = tmp_path / "llama-bin.zip"
    with zipfile.ZipFile(src, "w") as archive:
        info = zipfile.ZipInfo("ggml-rpc-server")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        archive.writestr(info, b"\x7fELF")
        info = zipfile.ZipInfo("libggml.so")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "libggml.so.0")
        archive.writestr("libggml.so.0", b"lib")
    li.unpack(str(src), str(tmp_path / "opt"), KEY)
    bin_dir = tmp_path / "opt" / KEY / "bin"
    assert os.access(bin_dir / "ggml-rpc-server", os.X_OK)
    assert os.readlink(bin_dir / "libggml.so") == "libggml.so.0"


def make_archive_bytes(tmp_path):
    return open(make_archive(tmp_path / "whole.tar.gz"), "rb").read()
