"""Settings shared by every pytest suite of the project."""

from __future__ import annotations

import glob
import json
import os

LLAMA_CACHE = "/var/cache/llamarpc/llama-cpp"

try:
    from hypothesis import settings
except ImportError:  # pragma: no cover - hypothesis is in requirements.txt
    settings = None
else:
    # No per-example deadline: these machines are shared, and a property that holds must not fail because one
    # example waited for a core (seen: 300 ms for a systemd-escape call at load 6). Speed lives in benchmarks.
    settings.register_profile("llamarpc", deadline=None)
    settings.load_profile("llamarpc")


def cached_llama_bin_dir():
    """bin/ of the newest complete llama.cpp build in the collection's build cache (as the lab builds it)."""
    entries = []
    for manifest in glob.glob(os.path.join(LLAMA_CACHE, "*", "manifest.json")):
        try:
            with open(manifest, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        if "llama-server" in data.get("built_targets", []):
            entries.append((os.path.getmtime(manifest), os.path.join(os.path.dirname(manifest), "bin")))
    return max(entries)[1] if entries else None


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
