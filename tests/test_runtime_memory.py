"""code/runtime/caching_allocator.py: the model of PyTorch's CUDA caching allocator.

Hand-made traces whose answers follow from the rules of c10/cuda/CUDACachingAllocator.cpp, random
traces checked against invariants, and (when the H200 record exists) the recorded
torch.cuda.memory_stats() of bench/experiments/caching_allocator.py step by step."""
from __future__ import annotations

import json
import random
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "runtime"))
import caching_allocator as ca  # noqa: E402
from caching_allocator import MiB, CachingAllocatorModel, OutOfMemory  # noqa: E402

from bench.experiments.caching_allocator import CONFIGS, TRACE  # noqa: E402

RECORD = ROOT / "data" / "records" / "nvidia-h200" / "caching_allocator.json"
SETTINGS = {"default": {}, "expandable_segments": {"expandable_segments": True},
            "max_split_size_mb_24": {"max_split_size_mb": 24}}


def test_rounding_pools_and_segment_sizes():
    assert [ca.round_size(n) for n in (1, 511, 512, 513, 1000, 3000)] == [512, 512, 512, 1024, 1024, 3072]
    assert ca.pool_of(ca.round_size(1 * MiB)) == "small"
    assert ca.pool_of(ca.round_size(1 * MiB + 1)) == "large" and ca.round_size(1 * MiB + 1) == 1 * MiB + 512
    assert ca.allocation_size(1024) == 2 * MiB
    assert ca.allocation_size(1 * MiB + 512) == 20 * MiB
    assert ca.allocation_size(10 * MiB - 512) == 20 * MiB
    assert ca.allocation_size(10 * MiB) == 10 * MiB
    assert ca.allocation_size(11 * MiB + 512) == 12 * MiB


def test_small_requests_pack_into_2_mib_segments():
    m = CachingAllocatorModel()
    blocks = [m.malloc(512 * 1024) for _ in range(5)]
    st = m.stats()
    assert st["segments"] == 2 and st["reserved_bytes"] == 4 * MiB
    assert st["allocated_bytes"] == 5 * 512 * 1024 == st["requested_bytes"]
    assert st["small_pool_reserved_bytes"] == 4 * MiB and st["large_pool_reserved_bytes"] == 0
    assert len({b.seg.base for b in blocks[:4]}) == 1          # four halves of one 2 MiB segment
    # requested vs allocated: rounding to 512 B
    b = m.malloc(100)
    assert m.stats()["allocated_bytes"] - 5 * 512 * 1024 == 512 and m.stats()["requested_bytes"] - 5 * 512 * 1024 == 100
    m.free(b)


def test_large_split_rule_keeps_remainders_of_1_mib_or_less_inside_the_block():
    m = CachingAllocatorModel()
    a = m.malloc(10 * MiB)                 # its own 10 MiB segment
    assert m.stats()["reserved_bytes"] == 10 * MiB
    m.free(a)
    b = m.malloc(9 * MiB)                  # reuses it; 1 MiB left is not > 1 MiB: not split
    st = m.stats()
    assert st["reserved_bytes"] == 10 * MiB and st["allocated_bytes"] == 10 * MiB
    assert st["requested_bytes"] == 9 * MiB
    m.free(b)
    c = m.malloc(8 * MiB)                  # 2 MiB left is > 1 MiB: split
    assert m.stats()["allocated_bytes"] == 8 * MiB and m.stats()["inactive_split_bytes"] == 2 * MiB
    m.free(c)


def test_free_merges_neighbours_and_empty_cache_returns_whole_segments_only():
    m = CachingAllocatorModel()
    x, y, z = (m.malloc(3 * MiB) for _ in range(3))   # one 20 MiB segment: x y z + 11 MiB free
    assert m.stats()["reserved_bytes"] == 20 * MiB and m.stats()["segments"] == 1
    m.free(y)
    m.empty_cache()                                    # segment still split (x, z live): kept
    assert m.stats()["reserved_bytes"] == 20 * MiB
    assert sorted(b.size for b in m.free_blocks["large"]) == [3 * MiB, 11 * MiB]
    m.free(z)                                          # y + z + tail merge
    assert sorted(b.size for b in m.free_blocks["large"]) == [17 * MiB]
    m.free(x)                                          # the whole segment again, one block
    assert [b.size for b in m.free_blocks["large"]] == [20 * MiB]
    assert m.stats()["inactive_split_bytes"] == 0
    m.empty_cache()
    assert m.stats()["reserved_bytes"] == 0 and m.stats()["segments"] == 0


def test_fragmentation_free_bytes_exceed_the_request_but_no_block_fits():
    m = CachingAllocatorModel()
    f = [m.malloc(3 * MiB) for _ in range(6)]          # 18 MiB of a 20 MiB segment
    for i in (0, 2, 4):
        m.free(f[i])
    free_in_segment = sum(b.size for b in m.free_blocks["large"])
    assert free_in_segment == 11 * MiB                 # 3 + 3 + 3 + 2
    g = m.malloc(4 * MiB)                              # no single free block >= 4 MiB
    st = m.stats()
    assert st["segments"] == 2 and st["reserved_bytes"] == 40 * MiB
    assert st["reserved_bytes"] - st["allocated_bytes"] == 40 * MiB - 13 * MiB
    assert ca.summarize(m.snapshot())["largest_free_block_bytes"] == 16 * MiB
    for b in (f[1], f[3], f[5], g):
        m.free(b)


def test_max_split_size_protects_oversize_blocks():
    for settings, reserved, allocated in (({}, 80 * MiB, 48 * MiB), ({"max_split_size_mb": 24}, 60 * MiB, 48 * MiB)):
        m = CachingAllocatorModel(**settings)
        m.free(m.malloc(40 * MiB))
        m.malloc(8 * MiB)      # default: carved from the 40 MiB block; max_split 24: a new 20 MiB segment
        m.malloc(39 * MiB)     # default: new 40 MiB segment; max_split 24: the cached 40 MiB block whole
        assert (m.stats()["reserved_bytes"], m.stats()["allocated_bytes"]) == (reserved, allocated)
    # a request >= max_split_size may not take a block 20 MiB or more larger than itself
    m = CachingAllocatorModel(max_split_size_mb=24)
    m.free(m.malloc(60 * MiB))
    m.malloc(30 * MiB)
    assert m.stats()["reserved_bytes"] == 90 * MiB


def test_expandable_segments_absorb_growing_requests():
    sizes = [12 * MiB, 14 * MiB, 16 * MiB, 18 * MiB]
    reserved = {}
    for name, settings in (("default", {}), ("expandable", {"expandable_segments": True})):
        m = CachingAllocatorModel(**settings)
        for s in sizes:
            m.free(m.malloc(s))
        reserved[name] = m.stats()["reserved_bytes"]
        m.empty_cache()
        assert m.stats()["reserved_bytes"] == 0
    assert reserved["default"] == sum(sizes)           # one segment per size, none reusable
    assert reserved["expandable"] == 20 * MiB          # one 20 MiB page holds each in turn


def test_expandable_segments_map_whole_pages_and_unmap_free_pages():
    m = CachingAllocatorModel(expandable_segments=True)
    a = m.malloc(25 * MiB)                             # two 20 MiB pages of the large pool
    b = m.malloc(1000)                                 # one 2 MiB page of the small pool
    assert m.stats()["large_pool_reserved_bytes"] == 40 * MiB
    assert m.stats()["small_pool_reserved_bytes"] == 2 * MiB
    assert m.stats()["segments"] == 0                  # no cudaMalloc segments at all
    m.empty_cache()                                    # page 2 is only 5/20 used: stays mapped
    assert m.stats()["large_pool_reserved_bytes"] == 40 * MiB
    m.free(a)
    m.empty_cache()
    assert m.stats()["large_pool_reserved_bytes"] == 0
    m.free(b)
    m.empty_cache()
    assert m.stats()["reserved_bytes"] == 0 and not m.segments


def test_out_of_memory_flushes_the_cache_then_raises_with_the_reserved_gap():
    m = CachingAllocatorModel(capacity=60 * MiB)
    m.free(m.malloc(40 * MiB))                         # 40 MiB cached, nothing live
    m.malloc(50 * MiB)                                 # too big for it; 40 + 50 > 60: flush, retry
    assert m.num_alloc_retries == 1 and m.stats()["reserved_bytes"] == 50 * MiB
    m2 = CachingAllocatorModel(capacity=40 * MiB)
    f = [m2.malloc(3 * MiB) for _ in range(12)]        # two 20 MiB segments, 36 MiB live
    for i in range(0, 12, 2):
        m2.free(f[i])                                  # 18 MiB free, in 3 MiB holes (+ 2 MiB tails)
    with pytest.raises(OutOfMemory, match="reserved but unallocated"):
        m2.malloc(4 * MiB)


def _check_invariants(m: CachingAllocatorModel) -> None:
    for seg in m.segments:
        blocks = list(m.blocks(seg))
        assert sum(b.size for b in blocks) == seg.size
        for b, c in zip(blocks, blocks[1:]):
            assert b.ptr + b.size == c.ptr and b.next is c and c.prev is b
            if not seg.expandable:
                assert b.allocated or c.allocated, "two free neighbours were not merged"
    st = m.stats()
    assert 0 <= st["requested_bytes"] <= st["allocated_bytes"] <= st["reserved_bytes"]
    snap = ca.summarize(m.snapshot())
    assert snap["reserved_bytes"] == st["reserved_bytes"] and snap["allocated_bytes"] == st["allocated_bytes"]


@pytest.mark.parametrize("settings", [{}, {"expandable_segments": True}, {"max_split_size_mb": 24}])
def test_random_traces_keep_the_invariants(settings):
    rng = random.Random(7)
    m = CachingAllocatorModel(**settings)
    live = []
    for step in range(600):
        if live and rng.random() < 0.45:
            m.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice([rng.randint(1, 4096), rng.randint(1, 2 * MiB), rng.randint(1 * MiB, 64 * MiB)])
            live.append(m.malloc(size))
        if step % 97 == 0:
            m.empty_cache()
        _check_invariants(m)
    for b in live:
        m.free(b)
    m.empty_cache()
    assert m.stats()["reserved_bytes"] == 0 and m.stats()["allocated_bytes"] == 0


def test_experiment_trace_hand_checked_points():
    steps, snaps = ca.replay(TRACE)
    at = {op[1]: st for op, st in zip(TRACE, steps) if op[0] in ("alloc", "snapshot")}
    assert at["s4"]["segments"] == 1 and at["s5"]["segments"] == 2          # 1 MiB fits the 1.5 MiB left; the next does not
    assert at["l5"]["allocated_bytes"] - at["l3"]["allocated_bytes"] == 12 * MiB   # 11 MiB request holds a 12 MiB block
    assert at["grown"]["reserved_bytes"] == (4 + 20 + 12 + 14 + 16) * MiB
    assert snaps["fragmented"]["segments"] == 5 and snaps["fragmented"]["largest_free_block_bytes"] == 16 * MiB
    assert steps[-1]["reserved_bytes"] == 0
    steps_e, _ = ca.replay(TRACE, expandable_segments=True)
    grown = [st for op, st in zip(TRACE, steps_e) if op == ("snapshot", "grown")][0]
    assert grown["reserved_bytes"] == (4 + 40) * MiB


@pytest.mark.skipif(not RECORD.exists(), reason="no H200 record of caching_allocator yet")
@pytest.mark.parametrize("config", list(CONFIGS))
def test_model_matches_the_h200_record(config):
    record = json.loads(RECORD.read_text(encoding="utf-8"))["results"]
    assert [tuple(op) for op in record["trace"]] == [tuple(op) for op in TRACE]
    recorded = record["traces"][config]["steps"]
    modelled, _ = ca.replay(TRACE, **SETTINGS[config])
    keys = ["allocated_bytes", "reserved_bytes", "requested_bytes"]
    if config != "expandable_segments":
        keys += ["segments", "inactive_split_bytes"]
    for i, (op, rec, mod) in enumerate(zip(TRACE, recorded, modelled)):
        for k in keys:
            assert rec[k] == mod[k], f"{config} step {i} {op}: {k} recorded {rec[k]} modelled {mod[k]}"
    _, snaps = ca.replay(TRACE, **SETTINGS[config])
    for label, snap in record["traces"][config]["snapshots"].items():
        for k in ("segments", "segment_sizes_bytes", "free_blocks_bytes", "largest_free_block_bytes",
                  "reserved_bytes", "allocated_bytes"):
            assert snap[k] == snaps[label][k], f"{config} snapshot {label}: {k}"
