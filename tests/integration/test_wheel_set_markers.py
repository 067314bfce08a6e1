"""A wheel set resolved on a controller whose Python is newer than the host's installs on the host.

The controller is this virtualenv's Python (3.13); the host is Debian 12's own ``/usr/bin/python3`` (3.11.2, the lab
hosts' and a real Debian 12 VM's), reached as an Ansible host of its own (local connection, that interpreter). The
package is built here: ``llrpc_app`` needs ``llrpc_dep`` only where ``python_full_version`` is below the host's next
micro release (the form of redis' ``async-timeout>=4.0.3; python_full_version < "3.11.3"``), and ``llrpc_new`` only
from the controller's version on. The wheels sit in a local directory (``--find-links``, ``--no-index``): no network.

The modules run as the open_webui role runs them: ``wheel_set`` delegated to the controller, ``wheel_set_install`` on
the host. pip's ``download --python-version`` judged such markers for the controller and left ``llrpc_dep`` out (the
host's offline install then failed); the host must get ``llrpc_dep`` and not ``llrpc_new``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from ansible_run import ansible_playbook

REPO = Path(__file__).resolve().parents[2]
HOST_PYTHON = "/usr/bin/python3"
UV_VERSION = yaml.safe_load((REPO / "roles/open_webui/defaults/main.yml").read_text(encoding="utf-8"))[
    "open_webui_uv_version"
]
UV = REPO / ".cache" / f"uv-{UV_VERSION}" / "bin" / "uv"


def build_wheel(directory, name, version, requires=()):
    """A pure-Python wheel ``name``-``version`` with the ``Requires-Dist`` lines ``requires``, in ``directory``."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires
    )
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: llamarpc-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(directory / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            data = text.encode()
            wheel.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        wheel.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")


def python_version(python):
    out = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return tuple(int(part) for part in out.stdout.strip().split("."))


PLAY = """\
- name: Resolve on the controller for the host, install on the host
  hosts: host
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: C library of the host
      ansible.builtin.command:
        argv: [getconf, GNU_LIBC_VERSION]
      register: glibc
      changed_when: false

    - name: Resolve and download on the controller
      llamarpc.cluster.wheel_set:
        requirements: [llrpc_app==1.0]
        dest: "{{ cache }}/set"
        python_version: "{{ ansible_facts.python.version_info[:3] | join('.') }}"
        machine: "{{ ansible_facts.architecture }}"
        glibc: "{{ glibc.stdout }}"
        no_index: true
        find_links: ["{{ wheels }}"]
        uv: "{{ uv }}"
        python: "{{ ansible_playbook_python }}"
      delegate_to: localhost
      register: resolved

    - name: Install on the host
      llamarpc.cluster.wheel_set_install:
        archive: "{{ resolved.archive }}"
        prefix: "{{ prefix }}"
        release: one
        python: "{{ ansible_python_interpreter }}"

    - name: The controller's Python and the resolved set
      ansible.builtin.copy:
        content: "{{ {'controller': ansible_playbook_python, 'packages': resolved.packages} | to_json }}"
        dest: "{{ cache }}/resolved.json"
        mode: "0644"
      delegate_to: localhost
"""


def write_inventory(path):
    host = {"ansible_connection": "local", "ansible_python_interpreter": HOST_PYTHON}
    path.write_text(yaml.safe_dump({"all": {"hosts": {"host": host}}}), encoding="utf-8")


def play(directory, text, variables):
    (directory / "play.yml").write_text(text, encoding="utf-8")
    write_inventory(directory / "hosts.yml")
    return ansible_playbook(
        "-i", directory / "hosts.yml", directory / "play.yml", "-e", json.dumps(variables),
        env={"UV_CACHE_DIR": str(directory / "uv-cache"), "UV_NO_CONFIG": "1", "PIP_CONFIG_FILE": "/dev/null"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The set resolved on the controller and installed on the host: (directory, controller's version)."""
    assert UV.exists(), f"{UV} is missing: tools/setup.sh installs uv {UV_VERSION} (the open_webui role's version)"
    host, controller = python_version(HOST_PYTHON), python_version(sys.executable)
    assert host < controller, f"the test needs a controller newer than the host: {controller} vs {host}"
    below = ".".join(map(str, (*host[:2], host[2] + 1)))  # 3.11.2 -> "3.11.3": true on the host, false above it
    newer = ".".join(map(str, controller[:2]))
    directory = tmp_path_factory.mktemp("wheel-set")
    wheels = directory / "wheels"
    wheels.mkdir()
    requires = [f'llrpc_dep>=1; python_full_version < "{below}"', f'llrpc_new; python_full_version >= "{newer}"']
    build_wheel(wheels, "llrpc_app", "1.0", requires)
    build_wheel(wheels, "llrpc_dep", "1.2")
    build_wheel(wheels, "llrpc_new", "2.0")
    variables = {
        "cache": str(directory / "cache"),
        "wheels": str(wheels),
        "uv": str(UV),
        "prefix": str(directory / "opt"),
    }
    run = play(directory, PLAY, variables)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return directory, controller


def test_controller_newer_than_host_resolves_the_hosts_markers(installed):
    directory, controller = installed
    resolved = json.loads((directory / "cache" / "resolved.json").read_text(encoding="utf-8"))
    assert python_version(resolved["controller"]) == controller
    pins = {package["name"]: package["version"] for package in resolved["packages"]}
    assert pins == {"llrpc-app": "1.0", "llrpc-dep": "1.2"}
    assert all(package["hashes"] for package in resolved["packages"])
    # The lock is kept with the archive: a re-run installs the same list.
    assert (directory / "cache" / "set" / "requirements.lock").read_text(encoding="utf-8").count("--hash=sha256:") == 2


def test_the_host_imports_the_dependency_its_marker_asks_for(installed):
    directory = installed[0]
    imported = subprocess.run(
        [directory / "opt" / "venv" / "bin" / "python", "-c", "import llrpc_app, llrpc_dep; print(llrpc_dep.VERSION)"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0 and imported.stdout.strip() == "1.2", imported.stderr
    assert (directory / "opt" / "venv").resolve() == directory / "opt" / "releases" / "one"


BROKEN = """\
- name: Install a set whose lock no longer matches its wheels
  hosts: host
  gather_facts: false
  tasks:
    - name: Install on the host
      llamarpc.cluster.wheel_set_install:
        archive: "{{ archive }}"
        prefix: "{{ prefix }}"
        release: two
        python: "{{ ansible_python_interpreter }}"
"""


def test_a_failed_install_leaves_the_previous_one_in_place(installed, tmp_path):
    """A wheel whose bytes differ from the lock's hash: pip refuses it, the new virtualenv goes, the link stays."""
    directory = installed[0]
    staging = tmp_path / "wheels"
    with tarfile.open(directory / "cache" / "set" / "wheels.tar") as tar:
        tar.extractall(tmp_path, filter="data")
    with (staging / "llrpc_dep-1.2-py3-none-any.whl").open("ab") as wheel:
        wheel.write(b"\0")
    with tarfile.open(tmp_path / "broken.tar", "w") as tar:
        tar.add(staging, arcname="wheels")
    run = play(tmp_path, BROKEN, {"archive": str(tmp_path / "broken.tar"), "prefix": str(directory / "opt")})
    assert run.returncode != 0
    assert f"the previous install ({directory / 'opt' / 'releases' / 'one'}) is left as it was" in run.stdout
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in run.stdout
    assert (directory / "opt" / "venv").resolve() == directory / "opt" / "releases" / "one"
    assert sorted(path.name for path in (directory / "opt" / "releases").iterdir()) == ["one"]


LEGACY = """\
- name: Install over an older layout's plain virtualenv
  hosts: host
  gather_facts: false
  tasks:
    - name: Install on the host
      llamarpc.cluster.wheel_set_install:
        archive: "{{ archive }}"
        prefix: "{{ prefix }}"
        release: one
        python: "{{ ansible_python_interpreter }}"
"""


def test_a_plain_virtualenv_of_the_older_layout_is_kept_as_the_previous_release(installed, tmp_path):
    directory = installed[0]
    prefix = tmp_path / "opt"
    (prefix / "venv").mkdir(parents=True)
    (prefix / "venv" / "marker").write_text("old\n", encoding="utf-8")
    archive = directory / "cache" / "set" / "wheels.tar"
    run = play(tmp_path, LEGACY, {"archive": str(archive), "prefix": str(prefix)})
    assert run.returncode == 0, run.stdout[-3000:]
    assert (prefix / "venv").is_symlink() and (prefix / "venv").resolve() == prefix / "releases" / "one"
    assert (prefix / "releases" / "previous" / "marker").read_text(encoding="utf-8") == "old\n"
    again = play(tmp_path, LEGACY, {"archive": str(archive), "prefix": str(prefix)})
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]
