"""code/compiler/static_schedule.py: the compile-time timeline of a tiled matmul on a statically scheduled
accelerator equals, event by event, a cycle-by-cycle brute-force simulation of the same engines and buffers;
single buffering serialises DMA and compute, double buffering reaches the closed forms of the compute-bound
and DMA-bound steady states; the tables and the timeline on docs/compiler/accelerator-compilers.md are what
the model computes now."""
from __future__ import annotations

import re
import sys
from dataclasses import replace

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "compiler"))
import static_schedule as S  # noqa: E402

PAGE = ROOT / "docs" / "compiler" / "accelerator-compilers.md"
RECORD = ROOT / "code" / "compiler" / "records" / "static-schedule.txt"

CASES = [
    # (M, N, K, tile, machine, buffers)
    (512, 256, 1024, S.Tile(256, 256, 256), S.Machine(), 1),
    (512, 256, 1024, S.Tile(256, 256, 256), S.Machine(), 2),
    (1024, 1024, 1024, S.Tile(128, 128, 512), S.Machine(), 2),
    (1000, 700, 900, S.Tile(256, 128, 256), S.Machine(), 2),           # padding on every dimension
    (768, 512, 1536, S.Tile(256, 256, 512), S.Machine(bw=64, dma_latency=50), 2),   # DMA-bound
    (768, 512, 1536, S.Tile(256, 256, 512), S.Machine(bw=4096, dma_latency=10), 2),  # compute-bound
    (640, 384, 640, S.Tile(128, 128, 128), S.Machine(array=64, bw=128, dma_latency=300), 3),
    (256, 1024, 384, S.Tile(256, 512, 128), S.Machine(array=32, bw=512, dma_latency=1), 2),
]


@pytest.mark.parametrize("M,N,K,tile,mc,buffers", CASES)
def test_schedule_equals_brute_force_simulation(M, N, K, tile, mc, buffers):
    plan = S.schedule(M, N, K, tile, mc, buffers)
    sim = S.simulate(M, N, K, tile, mc, buffers)
    for key in ("load", "compute", "store", "makespan"):
        assert plan[key] == sim[key], key


def test_single_buffering_serialises_dma_and_compute():
    mc, t = S.Machine(), S.Tile(256, 256, 256)
    plan = S.schedule(512, 256, 1024, t, mc, buffers=1)
    load, compute, _ = plan["costs"]
    assert plan["compute"][-1][1] == plan["steps"] * (load + compute)
    for (l0, l1), (c0, c1) in zip(plan["load"][1:], plan["compute"]):
        assert l0 >= c1  # the next load waits for the only buffer to be consumed


def test_double_buffering_reaches_the_steady_state_closed_forms():
    # compute-bound: after the first load the array never waits
    mc = S.Machine(bw=4096, dma_latency=10)
    plan = S.schedule(768, 512, 1536, S.Tile(256, 256, 512), mc, 2)
    load, compute, _ = plan["costs"]
    assert compute > load and plan["compute"][-1][1] == load + plan["steps"] * compute
    # DMA-bound: the DMA engine never waits, the array idles between steps
    mc = S.Machine(bw=64, dma_latency=50)
    plan = S.schedule(768, 512, 1536, S.Tile(256, 256, 512), mc, 2)
    load, compute, _ = plan["costs"]
    assert load > compute and plan["compute"][-1][1] == plan["steps"] * load + compute
    # never worse than single buffering, never better than the busier engine alone
    for M, N, K, t, mc, _ in CASES:
        one, two = S.schedule(M, N, K, t, mc, 1), S.schedule(M, N, K, t, mc, 2)
        load, compute, _ = two["costs"]
        assert two["makespan"] <= one["makespan"]
        assert two["makespan"] >= two["steps"] * max(load, compute)


def test_balance_point_of_the_tile():
    """compute >= load once m n / (m + n) >= S^2 * in_bytes / bw (128 elements here): square tiles of 256 and up."""
    mc = replace(S.Machine(), dma_latency=0)
    balance = mc.array ** 2 * mc.in_bytes / mc.bw
    for m in (128, 256, 512, 1024):
        load, compute, _ = S.step_costs(S.Tile(m, m, 4096), mc)
        assert (compute >= load) == (m * m / (2 * m) >= balance), m


def test_padding_costs_the_same_time_for_fewer_useful_macs():
    t, mc = S.Tile(256, 256, 512), S.Machine()
    a, b = S.schedule(1000, 1000, 1000, t, mc), S.schedule(1024, 1024, 1024, t, mc)
    assert a["makespan"] == b["makespan"]
    assert a["utilization"] == pytest.approx(b["utilization"] * (1000 / 1024) ** 3)


def test_tile_that_does_not_fit_is_rejected_and_choose_respects_sram():
    mc = S.Machine(sram=1 << 20)
    with pytest.raises(ValueError):
        S.schedule(1024, 1024, 1024, S.Tile(512, 512, 512), mc)
    t, r = S.choose(1024, 1024, 1024, mc)
    assert r["footprint"] <= mc.sram
    feasible = [c for c in S.candidates(mc) if S.footprint(c, mc) <= mc.sram]
    assert r["makespan"] == min(S.schedule(1024, 1024, 1024, c, mc)["makespan"] for c in feasible)
    # more SRAM never makes the best schedule slower
    spans = [row[3] for row in S.best_by_sram()]
    assert spans == sorted(spans, reverse=True)


def _page_table(marker):
    text = PAGE.read_text(encoding="utf-8")
    lines = text.split(f"<!-- {marker} -->")[1].strip().splitlines()
    rows = []
    for line in lines:  # the table is the run of "|" lines right after the marker
        if not line.startswith("|"):
            break
        rows.append(line)
    rows = rows[2:]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows]


def test_page_tables_are_what_the_model_computes():
    expected = [[str(x) for x in row] for row in S.table()]
    assert _page_table("static-schedule-table") == expected
    expected = [[str(x) for x in row] for row in S.best_by_sram()]
    assert _page_table("static-schedule-sram") == expected


def test_committed_timeline_is_what_the_model_prints_now():
    lines = RECORD.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# tool: code/compiler/static_schedule.py")
    assert "\n".join(lines[3:]) + "\n" == S.report()
    assert re.search(r"buffers = 2: .* array busy 80\.7%", S.report())


def test_vliw_list_schedule_needs_the_exact_latencies():
    memory = [3, 5, 7, 11]
    want = (3 + 5) * (7 + 11)
    bundles = S.list_schedule(S.EXAMPLE)
    # one memory slot: the four loads take cycles 0-3; the last add waits for the fourth load (issued at 3, latency 3)
    assert [sorted(b) for b in bundles[:4]] == [["mem"]] * 4 and bundles[5] == {}   # an explicit empty bundle (nop)
    regs, cycles, stalls = S.run_vliw(S.EXAMPLE, bundles, memory)
    assert regs["y"] == want and stalls == 0
    # the same bundles on hardware whose loads take 4 cycles: without interlocks the adds read stale registers
    slow = dict(S.LATENCY, load=4)
    regs, _, _ = S.run_vliw(S.EXAMPLE, bundles, memory, latency=slow)
    assert regs["y"] != want
    # with interlocks the hardware stalls and the answer is right again, one cycle later
    regs, slow_cycles, stalls = S.run_vliw(S.EXAMPLE, bundles, memory, latency=slow, interlock=True)
    assert regs["y"] == want and stalls >= 1 and slow_cycles > cycles
    # rescheduling for the true latency gives a correct program without any interlock
    regs, _, _ = S.run_vliw(S.EXAMPLE, S.list_schedule(S.EXAMPLE, slow), memory, latency=slow)
    assert regs["y"] == want
