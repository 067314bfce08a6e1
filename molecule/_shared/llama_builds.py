"""llama.cpp builds for the scenarios' day-2 tests: the controller cache's archive of a build, that archive repacked
into another one (another sha256, the same binaries: a llama.cpp change without a second build), and a snapshot of the
controller's cache (a rollback must not change it)."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils import _paths

INSTALL_DIR = "/opt/llamarpc/llama.cpp"


def controller_cache():
    """Every path under the controller's llama.cpp cache with its size and mtime (nothing may change there): the
    sources, the builds' entries, the prebuilt archives. Left out: lock files, and an entry's bin/ (the tests'
    conftest unpacks an archive there whenever a test session first needs it)."""
    root = Path(_paths.user_path("llama-cpp"))
    return {
        str(path.relative_to(root)): (path.lstat().st_size, path.lstat().st_mtime_ns)
        for path in root.rglob("*")
        if not path.name.endswith(".lock") and path.relative_to(root).parts[1:2] != ("bin",)
    }


def cached_archive(key):
    """The controller cache's archive of the build ``key`` (the one converge installed)."""
    for record in Path(_paths.user_path("llama-cpp")).glob("*/build.json"):
        data = json.loads(record.read_text(encoding="utf-8"))
        if data.get("key") == key and (record.parent / "bin.tar.gz").is_file():
            return record.parent / "bin.tar.gz"
    pytest.fail(f"no archive of build {key} in the controller's cache")
    return None


def repack(archive, out):
    """``archive`` with one more file: another archive, another sha256, the same binaries."""
    unpacked = out / "unpacked"
    unpacked.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="tar")
    (unpacked / "LLAMARPC-REPACKED").write_text("the same build, another archive\n", encoding="utf-8")
    repacked = out / "llama-repacked.tar.gz"
    with tarfile.open(repacked, "w:gz") as tar:
        for path in sorted(unpacked.iterdir()):
            tar.add(path, arcname=path.name)
    return repacked, hashlib.sha256(repacked.read_bytes()).hexdigest()


def key_of(exe):
    """The build key of a binary run from ``INSTALL_DIR/<key>/bin`` (empty for another path)."""
    parts = exe.split("/")
    prefix = INSTALL_DIR.split("/")
    if parts[: len(prefix)] != prefix or len(parts) < len(prefix) + 3 or parts[len(prefix) + 1] != "bin":
        return ""
    return parts[len(prefix)]
