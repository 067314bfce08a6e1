"""Settings shared by every pytest suite of the project."""

from __future__ import annotations

import glob
import json
import os
import shutil
import tarfile
import tempfile

from ansible_collections.llamarpc.cluster.plugins.module_utils import _paths

#: The llama_cpp role's controller cache (llama_cpp_controller_cache_dir's default: the user_path lookup's).
LLAMA_CACHE = _paths.user_path("llama-cpp")

try:
    from hypothesis import settings
except ImportError:  # pragma: no cover - hypothesis is in requirements.txt
    settings = None
else:
    # No per-example deadline: these machines are shared, and a property that holds must not fail because one
    # example waited for a core (seen: 300 ms for a systemd-escape call at load 6). Speed lives in benchmarks.
    settings.register_profile("llamarpc", deadline=None)
    settings.load_profile("llamarpc")


def unpacked(entry):
    """``entry``/bin: the entry's archive unpacked once (into a temporary directory renamed into place)."""
    target = os.path.join(entry, "bin")
    if os.path.isdir(target):
        return target
    tmp = tempfile.mkdtemp(prefix=".bin-", dir=entry)
    try:
        # Checked by hand (Python 3.11.2 has no extraction filter); where there is one, the "data" filter that Python
        # 3.14 makes the default (3.12 and 3.13 warn without it).
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        with tarfile.open(os.path.join(entry, "bin.tar.gz")) as tar:
            for member in tar.getmembers():  # flat: files and links beside each other
                if os.path.basename(member.name) != member.name or not (member.isfile() or member.issym()):
                    raise OSError(f"unexpected member {member.name!r} in {entry}/bin.tar.gz")
                tar.extract(member, tmp, **safe)
        os.rename(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.isdir(target):
            raise
    return target


def cached_llama_bin_dir():
    """The newest llama.cpp build with llama-server in the controller's cache (as the lab builds it), unpacked."""
    entries = []
    for record in glob.glob(os.path.join(LLAMA_CACHE, "*", "build.json")):
        try:
            with open(record, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        entry = os.path.dirname(record)
        if "llama-server" in data.get("built_targets", []) and os.path.isfile(os.path.join(entry, "bin.tar.gz")):
            entries.append((os.path.getmtime(record), entry))
    return unpacked(max(entries)[1]) if entries else None


def pytest_configure(config):
    """Point the tests that need llama.cpp at the cached build unless LLAMARPC_LLAMA_BIN_DIR says otherwise.

    With LLAMARPC_REQUIRE_LLAMA=1 (CI) a missing build is an error instead of a reason to skip.
    """
    if not os.environ.get("LLAMARPC_LLAMA_BIN_DIR"):
        found = cached_llama_bin_dir()
        if found:
            os.environ["LLAMARPC_LLAMA_BIN_DIR"] = found
        elif os.environ.get("LLAMARPC_REQUIRE_LLAMA") == "1":
            raise RuntimeError(f"no llama.cpp build in {LLAMA_CACHE}: run the worker scenario (it builds) first")
