"""tools/sparse_gguf.py: real split-GGUF headers in front of holes, as the reference reader and ours read them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import sparse_gguf

from ansible_collections.llamarpc.cluster.plugins.module_utils.model import _gguf_header as gguf_header
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan import _cluster_plan as cluster_plan


def test_headers_are_what_the_gguf_package_reads_and_the_data_is_a_hole(tmp_path):
    out = sparse_gguf.write(tmp_path, prefix="big", layers=4, width=256, shards=2)
    names = [entry["name"] for entry in out["files"]]
    assert names == ["big-00001-of-00002.gguf", "big-00002-of-00002.gguf"]
    for entry in out["files"]:
        reference = gguf.GGUFReader(entry["path"])
        ours = gguf_header.read_header(entry["path"])
        assert entry["data_offset"] == reference.data_offset == ours["data_offset"]
        assert [tensor["name"] for tensor in ours["tensors"]] == [tensor.name for tensor in reference.tensors]
        assert entry["size"] == os.path.getsize(entry["path"])
        # The tensor data takes no disk: only the header's blocks are allocated.
        assert os.stat(entry["path"]).st_blocks * 512 < entry["data_offset"] + (64 << 10) < entry["size"]
    model = gguf_header.read_model(out["files"][0]["path"])
    summary = cluster_plan.summarize(model)
    assert summary["n_layer"] == 4 and summary["weight_bytes"] == out["tensor_bytes"]
    assert model["metadata"]["split.count"] == 2


def test_the_command_line_prints_the_files(tmp_path):
    tool = Path(sparse_gguf.__file__)
    done = subprocess.run(
        [sys.executable, str(tool), "--out", str(tmp_path), "--layers", "2", "--width", "128", "--shards", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    printed = json.loads(done.stdout)
    assert [entry["name"] for entry in printed["files"]] == ["llamarpc-huge-00001-of-00001.gguf"]
    assert printed["files"][0]["size"] == os.path.getsize(tmp_path / "llamarpc-huge-00001-of-00001.gguf")
