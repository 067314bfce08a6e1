"""The shard placement planner: examples and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llamarpc.cluster.plugins.module_utils.shards import _shard_plan as sp

GB = 1000**3


def shards_of(*sizes, prefix="m"):
    count = len(sizes)
    return [{"name": f"{prefix}-{i:05d}-of-{count:05d}.gguf", "size": size} for i, size in enumerate(sizes, 1)]


def hosts_of(**free):
    return {name: {"free": value, "partial_bytes": 0, "complete": {}} for name, value in free.items()}


def hosts_of_plan(result):
    return [entry["host"] for entry in result["placement"]]


def test_seed_situation_coordinator_too_small():
    """Five 3.8 GB shards, a coordinator with room for three: parts 4-5 go to the roomiest other host."""
    shards = shards_of(*[int(3.8 * GB)] * 5)
    result = sp.plan(shards, hosts_of(node1=13 * GB, node2=20 * GB, node3=30 * GB), "node1", reserve=GB)
    assert hosts_of_plan(result) == ["node1", "node1", "node1", "node3", "node3"]
    assert result["hosts"]["node1"] == {"usable": 12 * GB, "assigned": int(11.4 * GB), "left": int(0.6 * GB)}


def test_everything_on_the_coordinator_when_it_fits():
    result = sp.plan(shards_of(10, 20, 30), hosts_of(a=100, b=1000), "a")
    assert hosts_of_plan(result) == ["a", "a", "a"]
    assert result["order"] == ["a", "b"]


def test_reserve_is_kept():
    shards = shards_of(50, 50)
    assert hosts_of_plan(sp.plan(shards, hosts_of(a=100, b=100), "a", reserve=0)) == ["a", "a"]
    assert hosts_of_plan(sp.plan(shards, hosts_of(a=100, b=100), "a", reserve=1)) == ["a", "b"]


def test_ties_broken_by_name():
    result = sp.plan(shards_of(60, 60), hosts_of(z=10, c=100, b=100), "z")
    assert result["order"] == ["z", "b", "c"]
    assert hosts_of_plan(result) == ["b", "c"]


def test_does_not_fit_says_what_is_missing_where():
    with pytest.raises(sp.PlanError) as caught:
        sp.plan(shards_of(3 * GB, 3 * GB), hosts_of(a=2 * GB, b=3 * GB), "a", reserve=0)
    message = str(caught.value)
    assert "does not fit" in message
    assert "1.0 GB (1000000000 bytes) missing" in message
    assert "a 2.0 GB" in message and "b 3.0 GB" in message


def test_does_not_fit_piecewise():
    with pytest.raises(sp.PlanError, match=r"not shard by shard: m-00001-of-00001.gguf \(100 B\) fits on no host"):
        sp.plan(shards_of(100), hosts_of(a=60, b=60), "a")


def test_largest_first_fallback():
    # In file order 30 and 40 would fill a (70) and leave 70 for b, which cannot take 60 + 30; largest first can.
    result = sp.plan(shards_of(30, 40, 60, 10), hosts_of(a=70, b=70), "a")
    assert sorted(result["hosts"][name]["left"] for name in "ab") == [0, 0]


def test_complete_shards_stay_where_they_are():
    hosts = hosts_of(a=0, b=10)
    hosts["b"]["complete"] = {"m-00001-of-00002.gguf": 50}
    hosts["a"]["complete"] = {"m-00002-of-00002.gguf": 50}
    result = sp.plan(shards_of(50, 50), hosts, "a", reserve=5)
    assert hosts_of_plan(result) == ["b", "a"]


def test_wrong_size_copy_is_not_pinned():
    hosts = hosts_of(a=100, b=100)
    hosts["b"]["complete"] = {"m-00001-of-00001.gguf": 49}
    assert hosts_of_plan(sp.plan(shards_of(50), hosts, "a")) == ["a"]


def test_partial_bytes_count_as_usable():
    hosts = hosts_of(a=30, b=0)
    hosts["a"]["partial_bytes"] = 20
    assert hosts_of_plan(sp.plan(shards_of(50), hosts, "a")) == ["a"]


# -- the RPC tensor cache on the model filesystem -----------------------------------------------------------

CACHE = "/var/cache/llamarpc/rpc-worker"
MODEL_DIR = "/data/models/model"


def with_cache(hosts, name, cap, cached=0):
    hosts[name]["tensor_cache"] = {"path": CACHE, "cap": cap, "cached": cached}
    return hosts


def test_a_cache_on_the_model_filesystem_is_refused_with_the_cache_named():
    """node3 would hold the shard but for its 20 GB tensor cache on the same disk: refused, the cache named."""
    hosts = with_cache(hosts_of(node1=1 * GB, node3=30 * GB), "node3", cap=20 * GB)
    with pytest.raises(sp.PlanError) as caught:
        sp.plan(shards_of(15 * GB), hosts, "node1", reserve=GB, model_dir=MODEL_DIR)
    message = str(caught.value)
    assert "tensor cache" in message
    assert (
        f"node3: needs 15.0 GB for shards + 1.0 GB reserve + 20.0 GB tensor cache ({CACHE}, same filesystem as "
        f"{MODEL_DIR}); has 30.0 GB free"
    ) in message
    assert "node1" not in message.split("counted")[1]  # only the host the cache crowds out is named


def test_separate_filesystems_keep_the_plan():
    """A cache on another filesystem is not given to the planner: the same plan as before, byte for byte."""
    shards = shards_of(*[int(3.8 * GB)] * 5)
    hosts = hosts_of(node1=13 * GB, node2=20 * GB, node3=30 * GB)
    before = sp.plan(shards, hosts, "node1", reserve=GB)
    hosts["node3"]["tensor_cache"] = None  # what the action plugin passes for a cache on another filesystem
    assert sp.plan(shards, hosts, "node1", reserve=GB, model_dir=MODEL_DIR) == before
    assert "tensor_cache" not in before["hosts"]["node3"]


def test_a_cache_moves_shards_to_hosts_with_room():
    shards = shards_of(*[int(3.8 * GB)] * 5)
    hosts = with_cache(hosts_of(node1=13 * GB, node2=20 * GB, node3=30 * GB), "node3", cap=20 * GB)
    result = sp.plan(shards, hosts, "node1", reserve=GB)
    assert hosts_of_plan(result) == ["node1", "node1", "node1", "node2", "node2"]
    assert result["hosts"]["node3"] == {"usable": 9 * GB, "assigned": 0, "left": 9 * GB, "tensor_cache": 20 * GB}


def test_bytes_already_cached_are_not_counted_twice():
    """The cached bytes are missing from free already: only the rest of the cap is kept, so a cache filling up
    leaves the host's usable bytes (and the plan) as they were."""
    empty = with_cache(hosts_of(a=30 * GB), "a", cap=20 * GB, cached=0)
    full = with_cache(hosts_of(a=22 * GB), "a", cap=20 * GB, cached=8 * GB)
    assert sp.usable_bytes(empty["a"], GB) == sp.usable_bytes(full["a"], GB) == 9 * GB
    over = with_cache(hosts_of(a=30 * GB), "a", cap=20 * GB, cached=25 * GB)  # the pruner has not run yet
    assert sp.cache_room(over["a"]) == 0


def test_a_model_too_big_even_without_the_cache_names_the_cache_too():
    hosts = with_cache(hosts_of(a=10 * GB, b=10 * GB), "b", cap=5 * GB, cached=1 * GB)
    with pytest.raises(sp.PlanError) as caught:
        sp.plan(shards_of(30 * GB), hosts, "a", model_dir=MODEL_DIR)
    message = str(caught.value)
    assert "after the reserve and the tensor caches (a 10.0 GB, b 6.0 GB)" in message
    assert f"b: 4.0 GB tensor cache ({CACHE}, same filesystem as {MODEL_DIR}; 1.0 GB of its 5.0 GB cap" in message


def test_shards_in_place_need_no_room_for_the_cache():
    """A rerun after the cache is counted (or has grown) never moves or refuses shards that are complete."""
    hosts = with_cache(hosts_of(a=0), "a", cap=20 * GB)
    hosts["a"]["complete"] = {"m-00001-of-00001.gguf": 50}
    assert hosts_of_plan(sp.plan(shards_of(50), hosts, "a", reserve=GB)) == ["a"]


def test_negative_cache_is_refused():
    with pytest.raises(sp.PlanError, match="negative cap"):
        sp.plan(shards_of(1), with_cache(hosts_of(a=10), "a", cap=-1), "a")


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ([], "no shard"),
        (
            ["x-00001-of-00003.gguf", "x-00003-of-00003.gguf"],
            r"incomplete split set x: 2 of 3 shards \(missing 00002\)",
        ),
        (["a.gguf", "b.gguf"], "without split names"),
        (["x-00001-of-00002.gguf", "y-00002-of-00002.gguf"], "more than one split set"),
        (["x-00001-of-00002.gguf", "readme.gguf"], "not split GGUF names"),
    ],
)
def test_bad_shard_sets(names, message):
    with pytest.raises(sp.PlanError, match=message):
        sp.check_split_names(names)


def test_bad_input():
    with pytest.raises(sp.PlanError, match="coordinator 'x' is not among"):
        sp.plan(shards_of(1), hosts_of(a=1), "x")
    with pytest.raises(sp.PlanError, match="reserve must not be negative"):
        sp.plan(shards_of(1), hosts_of(a=1), "a", reserve=-1)


def test_human():
    assert sp.human(999) == "999 B"
    assert sp.human(3_800_000_000) == "3.8 GB"


# -- properties ------------------------------------------------------------------------------------------

sizes_st = st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=8)
free_st = st.dictionaries(
    st.sampled_from(["n1", "n2", "n3", "n4", "n5"]), st.integers(min_value=0, max_value=40_000), min_size=1
)


@settings(max_examples=300, deadline=None)
@given(sizes=sizes_st, free=free_st, reserve=st.integers(min_value=0, max_value=2_000), data=st.data())
def test_plan_properties(sizes, free, reserve, data):
    shards = shards_of(*sizes)
    hosts = hosts_of(**free)
    coordinator = data.draw(st.sampled_from(sorted(hosts)))
    usable = {name: max(0, value - reserve) for name, value in free.items()}
    try:
        result = sp.plan(shards, hosts, coordinator, reserve)
    except sp.PlanError as exc:
        # It may only refuse when first-fit cannot place everything; at least it never refuses an obvious fit.
        assert sum(sizes) > usable[coordinator], str(exc)
        if sum(sizes) > sum(usable.values()):
            assert "missing" in str(exc)
        return
    # Every shard placed exactly once, in file order.
    assert [entry["name"] for entry in result["placement"]] == [shard["name"] for shard in shards]
    # No host over its capacity after the reserve (nothing is pinned here: every byte is new).
    for name in hosts:
        placed = sum(entry["size"] for entry in result["placement"] if entry["host"] == name)
        assert placed <= usable[name]
        assert result["hosts"][name]["assigned"] == placed
    # Everything on the coordinator when it can hold everything.
    if sum(sizes) <= usable[coordinator]:
        assert {entry["host"] for entry in result["placement"]} == {coordinator}
    # Deterministic, also when the hosts come in another order.
    names = list(hosts)
    names.reverse()
    shuffled = {name: hosts[name] for name in names}
    assert sp.plan(shards, shuffled, coordinator, reserve) == result


@settings(max_examples=200, deadline=None)
@given(
    sizes=sizes_st,
    free=free_st,
    caps=st.dictionaries(st.sampled_from(["n1", "n2", "n3", "n4", "n5"]), st.integers(min_value=0, max_value=20_000)),
    reserve=st.integers(min_value=0, max_value=2_000),
)
def test_caches_only_take_room(sizes, free, caps, reserve):
    """With tensor caches, no host gets more than free - reserve - cache room; with empty caps the plan is the same."""
    shards = shards_of(*sizes)
    hosts = hosts_of(**free)
    coordinator = sorted(hosts)[0]
    for name, cap in caps.items():
        if name in hosts:
            with_cache(hosts, name, cap)
    try:
        result = sp.plan(shards, hosts, coordinator, reserve)
    except sp.PlanError as exc:
        assert "does not fit" in str(exc)
        return
    for name, host in hosts.items():
        placed = sum(entry["size"] for entry in result["placement"] if entry["host"] == name)
        assert placed <= max(0, host["free"] - reserve - caps.get(name, 0))
    zero = {name: {**host, "tensor_cache": {"path": CACHE, "cap": 0, "cached": 0}} for name, host in hosts.items()}
    plain = sp.plan(shards, hosts_of(**free), coordinator, reserve)
    assert hosts_of_plan(sp.plan(shards, zero, coordinator, reserve)) == hosts_of_plan(plain)


@settings(max_examples=200, deadline=None)
@given(sizes=sizes_st, free=free_st)
def test_rerun_keeps_the_plan(sizes, free):
    """After placing, the hosts hold their shards and have less free space: planning again moves nothing."""
    shards = shards_of(*sizes)
    hosts = hosts_of(**free)
    coordinator = sorted(hosts)[0]
    try:
        first = sp.plan(shards, hosts, coordinator)
    except sp.PlanError:
        return
    after = {}
    for name, host in hosts.items():
        mine = {entry["name"]: entry["size"] for entry in first["placement"] if entry["host"] == name}
        after[name] = {"free": host["free"] - sum(mine.values()), "partial_bytes": 0, "complete": mine}
    again = sp.plan(shards, after, coordinator)
    assert [entry["host"] for entry in again["placement"]] == [entry["host"] for entry in first["placement"]]
