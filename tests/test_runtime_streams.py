"""The discrete-event model of streams and engines (code/runtime/streams_model.py)."""
from __future__ import annotations

import math
import random

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "runtime"))
from streams_model import (COMPUTE, D2H, H2D, Op, Streams, chunked_pipeline, flow_shop_makespan,  # noqa: E402
                           intervals_overlap_time, overlap_intervals)


@pytest.mark.parametrize("n", [1, 3, 8])
def test_one_stream_is_serial(n):
    s = chunked_pipeline(n, 1, 1.0, 2.0, 0.5)
    assert s.simulate() == pytest.approx(n * 3.5)
    assert overlap_intervals(s.ops) == 0


def test_three_streams_match_the_flow_shop_formula():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 16)
        t = [rng.uniform(0.1, 3.0) for _ in range(3)]
        s = chunked_pipeline(n, 3, *t)
        assert s.simulate() == pytest.approx(flow_shop_makespan(n, t), rel=1e-12)
        # the bounds every schedule obeys: the busiest engine, and one chunk's full path
        assert s.simulate() >= max(n * max(t), sum(t)) - 1e-9


@pytest.mark.parametrize("n", [2, 4, 6, 8])
def test_two_streams_are_limited_by_stream_order(n):
    # each stream runs its chunks back to back: n/2 chunks of 3 T, the second stream starts T later
    s = chunked_pipeline(n, 2, 1.0, 1.0, 1.0)
    assert s.simulate() == pytest.approx(3 * n / 2 + 1)
    # two chunks fit two streams; from four on, the stream order (not an engine) is the bottleneck
    assert (s.simulate() > flow_shop_makespan(n, [1.0, 1.0, 1.0])) == (n > 2)


def test_pageable_copies_block_the_host_so_nothing_overlaps():
    t = (1.0, 1.2, 0.8)
    for streams in (1, 3):
        s = chunked_pipeline(8, streams, *t, pageable=True)
        assert s.simulate() == pytest.approx(8 * sum(t))
        assert overlap_intervals(s.ops) == 0
        # the host is blocked: op k+1 is issued only when the blocking op before it has finished
        for a, b in zip(s.ops, s.ops[1:]):
            if a.blocks_host:
                assert b.issued == pytest.approx(a.end)


def test_copies_in_one_direction_share_an_engine():
    s = Streams()
    a = s.submit(Op("a", "s0", H2D, 1.0))
    b = s.submit(Op("b", "s1", H2D, 1.0))
    c = s.submit(Op("c", "s2", D2H, 1.0))
    k = s.submit(Op("k", "s3", COMPUTE, 1.0))
    assert s.simulate() == 2.0
    assert (a.start, b.start, c.start, k.start) == (0.0, 1.0, 0.0, 0.0)


def test_wait_event_orders_across_streams():
    s = Streams()
    s.submit(Op("copy", "copy_stream", H2D, 2.0))
    k = s.submit(Op("kernel", "compute_stream", COMPUTE, 1.0, after=("copy",)))
    free = s.submit(Op("other", "other_stream", COMPUTE, 0.5))
    s.simulate()
    assert k.start == 2.0 and free.start == 0.0 and k.end == 3.0


def test_legacy_stream_synchronises_with_blocking_streams_only():
    def run(blocking):
        s = Streams(blocking={"side"} if blocking else set())
        side = s.submit(Op("side", "side", COMPUTE, 2.0))
        legacy = s.submit(Op("legacy", "legacy", D2H, 0.2))
        after = s.submit(Op("after", "side2", H2D, 0.1))
        s.blocking |= {"side2"} if blocking else set()
        s.simulate()
        return side, legacy, after

    side, legacy, after = run(blocking=True)
    assert legacy.start == side.end == 2.0          # legacy waits for earlier blocking work
    assert after.start == legacy.end                # later blocking work waits for legacy work
    side, legacy, after = run(blocking=False)
    assert legacy.start == 0.0 and after.start == 0.0


def test_host_blocking_synchronisation_and_issue_cost():
    s = Streams(issue_cost=0.01)
    s.submit(Op("k1", "s0", COMPUTE, 1.0))
    sync = s.submit(Op("sync", "s0", "host", 0.0, blocks_host=True))
    k2 = s.submit(Op("k2", "s1", COMPUTE, 1.0))
    assert s.simulate() == pytest.approx(2.0)
    assert sync.start == pytest.approx(1.0) and k2.issued == pytest.approx(1.0) and k2.start == pytest.approx(1.0)


def test_wait_for_a_later_op_is_rejected():
    s = Streams()
    s.submit(Op("a", "s0", H2D, 1.0, after=("b",)))
    s.submit(Op("b", "s1", H2D, 1.0))
    with pytest.raises(AssertionError):
        s.simulate()


def test_overlap_measure():
    assert intervals_overlap_time([(0, 2), (1, 3), (5, 6)]) == pytest.approx(1.0)
    assert intervals_overlap_time([(0, 4), (1, 2), (1.5, 3)]) == pytest.approx(2.0)
    assert intervals_overlap_time([(0, 1), (1, 2)]) == 0
    assert math.isclose(intervals_overlap_time([]), 0.0)
