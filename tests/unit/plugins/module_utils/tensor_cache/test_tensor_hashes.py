"""llama-server's tensor hashes file (``--rpc-tensor-hashes``): made only from seeded bytes known to be of the shards in
force, kept while those shards are, removed when one is replaced; used only by a llama-server that knows the flag. One
test per row of the decision table (``decide``), and the seeder's side: which rows carry ``shard_sha256``."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards._shard_fetch import MANIFEST, REPAIR
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_hashes as th
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_seed as ts

SHA_1 = "1" * 64
SHA_2 = "2" * 64
SHARDS = {"m-00001-of-00002.gguf": SHA_1, "m-00002-of-00002.gguf": SHA_2}
HELP = "--rpc SERVERS\n--rpc-tensor-hashes FILE   file of tensor hashes\n"


def row(name, shard, digest, size=20 << 20, state="written", sha=None):
    return {
        "name": name,
        "file": f"/data/models/{shard}",
        "offset": 4096,
        "size": size,
        "hash": digest,
        "state": state,
        "source": "local",
        "shard_sha256": sha,
    }


ROWS = [
    row("blk.0.ffn_up.weight", "m-00001-of-00002.gguf", "00000000000000a1", sha=SHA_1),
    row("blk.1.ffn_up.weight", "m-00002-of-00002.gguf", "00000000000000b2", state="present", sha=SHA_2),
]


def test_the_text_is_what_llama_server_reads_and_parses_back():
    content = th.text({"b.weight": (5, "00000000000000ff"), "a.weight": (7, "0123456789abcdef")}, {"x.gguf": SHA_1})
    assert content.splitlines() == [
        th.HEADER,
        f"# shard x.gguf {SHA_1}",
        "0123456789abcdef 7 a.weight",
        "00000000000000ff 5 b.weight",
    ]
    assert th.parse(content) == {
        "tensors": {"a.weight": (7, "0123456789abcdef"), "b.weight": (5, "00000000000000ff")},
        "shards": {"x.gguf": SHA_1},
    }


@pytest.mark.parametrize(
    ("tensors", "shards", "message"),
    [
        ({"a b": (1, "0" * 16)}, {}, "without spaces"),
        ({"a": (1, "0" * 15)}, {}, "16 hex digit"),
        ({"a": (-1, "0" * 16)}, {}, "16 hex digit"),
        ({}, {"x.gguf": "abc"}, "sha256"),
    ],
)
def test_the_text_refuses_what_llama_server_would_refuse_or_misread(tensors, shards, message):
    with pytest.raises(th.HashesError, match=message):
        th.text(tensors, shards)


@pytest.mark.parametrize(
    "content",
    [
        "0123456789abcdef 7\n",
        "0123456789abcdef 7 a extra\n",
        "0123456789abcdeg 7 a\n",
        "0123456789abcdef -7 a\n",
        "0123456789abcdef 7 a\n0000000000000000 7 a\n",
    ],
    ids=["two fields", "four fields", "not hex", "negative size", "twice"],
)
def test_parse_refuses_a_line_llama_server_refuses(content):
    with pytest.raises(th.HashesError):
        th.parse(content)


# -- decide: one test per row ----------------------------------------------------------------------------------


def test_without_the_shards_sha256_nothing_is_trusted():
    out = th.decide({}, existing=th.text({"a": (1, "0" * 16)}, {"x.gguf": SHA_1}), rows=ROWS, help_text=HELP)
    assert (out["state"], out["use"], out["reason"]) == (
        "absent",
        False,
        "the sha256 of the shards in force is not known",
    )


def test_this_runs_seeding_makes_the_file_from_its_verified_rows_only():
    unverified = [
        row("blk.2.a.weight", "m-00001-of-00002.gguf", "00000000000000c3"),  # no shard_sha256: other bytes, maybe
        row("blk.2.b.weight", "m-00001-of-00002.gguf", "00000000000000c4", sha=SHA_2),  # of another sha256
        row("blk.2.c.weight", "m-00001-of-00002.gguf", None, state="unavailable", sha=SHA_1),
        row("blk.2.d.weight", "m-00001-of-00002.gguf", "00000000000000c5", state="missing", sha=SHA_1),
        row("blk.2.e.weight", "other.gguf", "00000000000000c6", sha=SHA_1),  # not a shard in force
    ]
    out = th.decide(SHARDS, existing=None, rows=ROWS + unverified, help_text=HELP)
    assert (out["state"], out["use"], out["reason"], out["tensors"]) == ("present", True, "", 2)
    assert th.parse(out["content"]) == {
        "tensors": {
            "blk.0.ffn_up.weight": (20 << 20, "00000000000000a1"),
            "blk.1.ffn_up.weight": (20 << 20, "00000000000000b2"),
        },
        "shards": SHARDS,
    }
    # A file from an older seeding is replaced, not merged.
    older = th.text({"blk.9.x.weight": (1, "0" * 16)}, {"m-00001-of-00002.gguf": SHA_1})
    assert th.decide(SHARDS, existing=older, rows=ROWS, help_text=HELP)["content"] == out["content"]


def test_only_the_shards_the_tensors_came_from_are_named():
    out = th.decide(SHARDS, existing=None, rows=ROWS[:1], help_text=HELP)
    assert out["shards"] == ["m-00001-of-00002.gguf"]


def test_a_seeding_with_no_verified_row_leaves_the_file_out():
    out = th.decide(SHARDS, existing=None, rows=[dict(r, shard_sha256=None) for r in ROWS], help_text=HELP)
    assert (out["state"], out["content"], out["use"]) == ("absent", None, False)
    assert out["reason"] == "no seeded tensor is known to be of the shards in force"


def test_a_tensor_two_workers_hash_differently_is_left_out():
    clash = row("blk.0.ffn_up.weight", "m-00001-of-00002.gguf", "00000000000000ee", sha=SHA_1)
    out = th.decide(SHARDS, existing=None, rows=[*ROWS, clash], help_text=HELP)
    assert set(th.parse(out["content"])["tensors"]) == {"blk.1.ffn_up.weight"}
    same = dict(ROWS[0])  # two workers that hold the same bytes (a tied output) agree: kept
    assert th.decide(SHARDS, existing=None, rows=[*ROWS, same], help_text=HELP)["tensors"] == 2


def test_no_seeding_and_no_file_leaves_it_out():
    out = th.decide(SHARDS, existing=None, rows=None, help_text=HELP)
    assert (out["state"], out["use"], out["reason"]) == ("absent", False, "no seeding has written tensor hashes")


def test_a_file_of_the_shards_in_force_is_kept_as_it_is():
    content = th.decide(SHARDS, rows=ROWS, help_text=HELP)["content"]
    out = th.decide(SHARDS, existing=content, rows=None, help_text=HELP)
    assert (out["state"], out["content"], out["use"], out["tensors"]) == ("present", content, True, 2)


def test_a_file_from_a_shard_replaced_since_is_removed_never_used():
    content = th.decide(SHARDS, rows=ROWS, help_text=HELP)["content"]
    repaired = dict(SHARDS, **{"m-00002-of-00002.gguf": "3" * 64})
    out = th.decide(repaired, existing=content, rows=None, help_text=HELP)
    assert (out["state"], out["content"], out["use"]) == ("absent", None, False)
    assert out["reason"] == (
        f"stale - it was made from m-00002-of-00002.gguf of sha256 {SHA_2}, the shard in force has {'3' * 64}: removed"
    )


def test_a_file_from_a_shard_no_longer_in_force_is_removed():
    content = th.decide(SHARDS, rows=ROWS, help_text=HELP)["content"]
    out = th.decide({"n.gguf": SHA_1}, existing=content, rows=None, help_text=HELP)
    assert out["state"] == "absent" and "m-00001-of-00002.gguf, which is not a shard in force" in out["reason"]


@pytest.mark.parametrize(
    ("existing", "reason"),
    [
        ("0000000000000001 1 a\n", "stale - it names no shard it was made from: removed"),
        (f"# shard m-00001-of-00002.gguf {SHA_1}\n", "it names no tensor: removed"),
        ("not a hashes file\n", "the file does not parse"),
        ("", "it names no shard"),
    ],
)
def test_a_file_that_cannot_be_vouched_for_is_removed(existing, reason):
    out = th.decide(SHARDS, existing=existing, rows=None, help_text=HELP)
    assert out["state"] == "absent" and not out["use"] and reason in out["reason"]


def test_before_llama_server_is_installed_the_file_is_kept_and_not_used():
    out = th.decide(SHARDS, rows=ROWS, help_text=None)
    assert (out["state"], out["use"], out["reason"]) == ("present", False, "llama-server is not installed yet")


def test_a_build_without_the_flag_keeps_the_file_and_loads_as_before():
    out = th.decide(SHARDS, rows=ROWS, help_text="--rpc SERVERS\n")
    assert out["state"] == "present" and out["use"] is False
    assert "lacks --rpc-tensor-hashes" in out["reason"] and "rpc-tensor-hashes.patch" in out["reason"]


class Stub:
    """What run_module uses of an AnsibleModule."""

    def __init__(self, params, help_text=HELP, rc=0):
        self.params = params
        self.help_text, self.rc = help_text, rc

    def run_command(self, argv, environ_update=None):
        assert argv[1:] == ["--help"] and environ_update == {"LC_ALL": "C"}
        return self.rc, self.help_text, ""

    def fail_json(self, msg, **kwargs):
        raise AssertionError(msg)


def test_the_module_reads_the_file_and_the_flag_and_changes_nothing(tmp_path):
    path = tmp_path / "tensor-hashes.txt"
    # The seeding's results, one per worker, as the role registers them: the skipped one has no tensors.
    seeded = [{"tensors": ROWS[:1], "changed": True}, {"tensors": ROWS[1:]}, {"skipped": True}]
    params = {"path": str(path), "shards": SHARDS, "seeded": seeded, "server": "/opt/llama-server"}
    made = th.run_module(Stub(params))
    assert made["changed"] is False and not path.exists()
    assert made["environment"] == {"LLAMA_ARG_RPC_TENSOR_HASHES": str(path)}
    path.write_text(made["content"], encoding="utf-8")
    assert made["tensors"] == 2
    kept = th.run_module(Stub(dict(params, seeded=None)))
    assert kept["content"] == made["content"] and kept["use"]
    # Check mode, or the seeding skipped: results without tensors are no seeding - the file stays as it is.
    assert th.run_module(Stub(dict(params, seeded=[{"skipped": True}])))["content"] == made["content"]
    unpatched = th.run_module(Stub(dict(params, seeded=None), help_text="--rpc SERVERS\n"))
    assert unpatched["environment"] == {} and unpatched["state"] == "present"
    before_install = th.run_module(Stub(dict(params, seeded=None, server=None)))
    assert before_install["environment"] == {} and before_install["reason"] == "llama-server is not installed yet"
    path.write_bytes(b"\xff\xfe")
    assert th.run_module(Stub(dict(params, seeded=None)))["state"] == "absent"


# -- the seeder's side: which rows are known to be of the shards in force ----------------------------------------


def placed(directory, name, data, sha):
    """A shard ``name`` in ``directory`` with the placement's record of ``sha`` (size and mtime as now)."""
    path = directory / name
    path.write_bytes(data)
    info = os.stat(path)
    records = json.loads((directory / MANIFEST).read_text()) if (directory / MANIFEST).exists() else {}
    records[name] = {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": sha}
    (directory / MANIFEST).write_text(json.dumps(records))
    return str(path)


def local_row(path, digest="00000000000000a1"):
    return dict(row("blk.0.a.weight", os.path.basename(path), digest), file=path, shard_sha256=None)


def test_a_local_shard_counts_only_as_the_placement_verified_it(tmp_path):
    path = placed(tmp_path, "m-00001-of-00002.gguf", b"x" * 100, SHA_1)
    verified = local_row(path)
    ts.verify_rows([verified], [], SHARDS, "")
    assert verified["shard_sha256"] == SHA_1
    assert ts.placed_sha256(path) == SHA_1
    # Another sha256 in force (the shard was replaced in the plan): not this copy's bytes.
    other = local_row(path)
    ts.verify_rows([other], [], dict(SHARDS, **{"m-00001-of-00002.gguf": SHA_2}), "")
    assert other["shard_sha256"] is None
    # A repair under way, or a file changed since it was verified (its mtime moved): not vouched for.
    open(path + REPAIR, "w").close()
    assert ts.placed_sha256(path) is None
    os.unlink(path + REPAIR)
    os.utime(path, ns=(0, 0))
    touched = local_row(path)
    ts.verify_rows([touched], [], SHARDS, "")
    assert touched["shard_sha256"] is None
    # No record at all (a copy the placement never saw).
    (tmp_path / MANIFEST).unlink()
    assert ts.placed_sha256(path) is None


def fetched_row(digest="00000000000000b2", state="written"):
    return dict(row("blk.1.a.weight", "m-00002-of-00002.gguf", digest, state=state), source="peer", shard_sha256=None)


def test_a_fetched_tensor_counts_when_fetched_now_or_recorded_with_the_sha256(tmp_path):
    now = fetched_row()
    ts.verify_rows([], [now], SHARDS, "")
    assert now["shard_sha256"] == SHA_2
    key = "00000000000000b2 blk.1.a.weight m-00002-of-00002.gguf 4096 20971520"
    recorded = fetched_row(state="present")
    ts.verify_rows([], [recorded], SHARDS, f"{key} {SHA_2}\n")
    assert recorded["shard_sha256"] == SHA_2
    # A keep line from before the sha256 was recorded, or of another sha256: the bytes may be another version's.
    for keep in (f"{key}\n", f"{key} {'3' * 64}\n"):
        old = fetched_row(state="present")
        ts.verify_rows([], [old], SHARDS, keep)
        assert old["shard_sha256"] is None, keep
    unavailable = dict(fetched_row(digest=None), state="unavailable")
    ts.verify_rows([], [unavailable], SHARDS, "")
    assert unavailable["shard_sha256"] is None


def test_the_keep_file_records_the_sha256_and_still_reads_lines_without_it():
    rows = [dict(fetched_row(), shard_sha256=SHA_2), dict(local_row("/d/m-00001-of-00002.gguf"))]
    text = ts.keep_text(rows)
    assert text.splitlines() == [
        "00000000000000a1 blk.0.a.weight m-00001-of-00002.gguf 4096 20971520",
        f"00000000000000b2 blk.1.a.weight m-00002-of-00002.gguf 4096 20971520 {SHA_2}",
    ]
    assert ts.read_keep(text) == {
        ("m-00001-of-00002.gguf", 4096, 20971520): "00000000000000a1",
        ("m-00002-of-00002.gguf", 4096, 20971520): "00000000000000b2",
    }
    assert ts.read_keep_sha256(text) == {("m-00002-of-00002.gguf", 4096, 20971520): SHA_2}


def test_the_shards_option_is_checked():
    assert ts.given_shards({"m.gguf": SHA_1.upper()}) == {"m.gguf": SHA_1}
    for bad in ({"/d/m.gguf": SHA_1}, {"m.gguf": "abc"}, {"m.gguf": None}):
        with pytest.raises(ts.SeedError, match="sha256"):
            ts.given_shards(bad)
