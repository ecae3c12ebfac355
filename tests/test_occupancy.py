"""code/operator/occupancy.py against occupancy figures derived by hand, and the page's table against the module.

The hand derivations follow the rules of `cuda_occupancy.h` (the CUDA toolkit header behind
`cudaOccupancyMaxActiveBlocksPerMultiprocessor`) with the compute capability 9.0 limits of the CUDA
C++ Programming Guide: 65536 registers per SM split over 4 sub-partitions, registers allocated per
warp in units of 256, 2048 threads (64 warps) and 32 blocks per SM, 228 KB of shared memory per SM,
227 KB per block, 1 KB reserved by the driver for every block, shared memory allocated in units of
128 bytes. docs/operator/programming-model.md works through the same examples.
"""
from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("occupancy", ROOT / "code" / "operator" / "occupancy.py")
occ = importlib.util.module_from_spec(_spec)
sys.modules["occupancy"] = occ
_spec.loader.exec_module(occ)
KB = 1024
PAGE = ROOT / "docs" / "operator" / "programming-model.md"


def test_hopper_limits_are_the_compute_capability_9_0_table():
    sm = occ.HOPPER
    assert sm.max_warps_per_sm == 64 and sm.max_threads_per_sm == 2048
    assert sm.max_blocks_per_sm == 32 and sm.max_threads_per_block == 1024
    assert sm.regs_per_sm == 65536 and sm.max_regs_per_thread == 255
    assert sm.smem_per_sm == 233472 and sm.smem_per_block_optin == 232448  # 228 KB, 227 KB
    assert sm.reg_alloc_unit == 256 and sm.sub_partitions == 4
    # one register file is 64K x 4 bytes = 256 KB, the same size as the unified L1/shared SRAM
    assert sm.regs_per_sm * 4 == 256 * KB


def test_worked_example_256_threads_64_registers_48_kb():
    o = occ.occupancy(256, 64, 48 * KB)
    # warps: 8 per block, 64 per SM        -> 64 // 8 = 8 blocks
    # registers: 64 x 32 = 2048 per warp (already a multiple of 256);
    #   a sub-partition has 65536 / 4 = 16384 -> 8 warps, so 32 warps per SM -> 32 // 8 = 4 blocks
    # shared memory: 48 KB + 1 KB reserve = 50176 B (a multiple of 128); 233472 // 50176 = 4 blocks
    assert o.regs_per_warp == 2048 and o.smem_per_block == 50176
    assert o.limits == {"warps": 8, "blocks": 32, "registers": 4, "shared memory": 4}
    assert o.blocks_per_sm == 4 and o.warps_per_sm == 32 and o.occupancy == 0.5
    assert sorted(o.limiters) == ["registers", "shared memory"]


def test_register_granularity_makes_one_extra_register_cost_a_block():
    # 63 registers: 63 x 32 = 2016 -> rounded up to 2048, the same as 64
    assert occ.occupancy(256, 63).regs_per_warp == 2048
    assert occ.occupancy(256, 63).blocks_per_sm == occ.occupancy(256, 64).blocks_per_sm == 4
    # 65 registers: 2080 -> 2304 per warp; 16384 // 2304 = 7 warps per sub-partition, 28 per SM,
    # 28 // 8 = 3 blocks of 256 threads: 24 warps, 37.5 %
    o = occ.occupancy(256, 65)
    assert o.regs_per_warp == 2304 and o.limits["registers"] == 3
    assert (o.blocks_per_sm, o.warps_per_sm, o.occupancy) == (3, 24, 0.375)
    # anything from 65 to 72 registers per thread costs the same 2304 per warp
    assert {occ.occupancy(256, r).regs_per_warp for r in range(65, 73)} == {2304}


@pytest.mark.parametrize("threads, regs, smem, blocks, warps", [
    (128, 128, 0, 4, 16),       # 4096 per warp -> 4 warps per sub-partition, 16 per SM: 25 %
    (32, 16, 0, 32, 32),        # one-warp blocks hit the 32-blocks-per-SM cap: 50 %
    (1024, 32, 0, 2, 64),       # 1024 per warp -> 16 per sub-partition, 64 per SM: 100 %
    (1024, 64, 0, 1, 32),       # 2048 x 32 warps = 65536 registers: exactly one block
    (1024, 65, 0, 0, 0),        # 2304 x 32 = 73728 > 65536 registers per block: launch fails
    (256, 255, 0, 1, 8),        # 255 x 32 = 8160 -> 8192; 2 warps per sub-partition, 8 per SM
    (256, 256, 0, 0, 0),        # more than 255 registers per thread does not exist
    (96, 32, 0, 21, 63),        # 3-warp blocks: 64 // 3 = 21 blocks, 63 warps
    (128, 32, 113 * KB, 2, 8),  # (113 + 1) KB x 2 = 228 KB exactly
    (128, 32, 114 * KB, 1, 4),  # (114 + 1) KB x 2 = 230 KB > 228 KB
    (128, 32, 227 * KB, 1, 4),  # the largest block allocation
    (128, 32, 228 * KB, 0, 0),  # over the 227 KB per-block limit
    (2048, 16, 0, 0, 0),        # more than 1024 threads per block
])
def test_hand_derived_configurations(threads, regs, smem, blocks, warps):
    o = occ.occupancy(threads, regs, smem)
    assert (o.blocks_per_sm, o.warps_per_sm) == (blocks, warps)


# What cudaOccupancyMaxActiveBlocksPerMultiprocessor returned on an NVIDIA H200 (driver 580.159.04,
# CUDA 13.0) for kernels whose register count ptxas reported, with the given dynamic shared memory
# and no static shared memory: (registers, threads per block, dynamic shared memory, blocks per SM).
H200_API = [
    (32, 96, 0, 21), (32, 1024, 0, 2), (32, 128, 49152, 4), (32, 256, 116736, 1),
    (64, 96, 0, 10), (64, 256, 0, 4), (64, 1024, 0, 1), (64, 256, 65536, 3), (64, 256, 102400, 2),
    (65, 32, 0, 28), (65, 96, 0, 9), (65, 128, 0, 7), (65, 256, 0, 3), (65, 1024, 0, 0),
    (128, 128, 0, 4), (128, 128, 232448, 1),
]


@pytest.mark.parametrize("regs, threads, smem, blocks", H200_API)
def test_agrees_with_the_cuda_occupancy_api_on_an_h200(regs, threads, smem, blocks):
    assert occ.occupancy(threads, regs, smem).blocks_per_sm == blocks


def test_waves_on_132_sms():
    assert occ.waves(1024, 1) == pytest.approx(7.7576, abs=1e-4)
    assert occ.waves(144, 1) == pytest.approx(1.0909, abs=1e-4)
    assert occ.waves(264, 2) == 1.0


def _page_table() -> list[list[str]]:
    """The rows of the table under the page's heading that holds the worked occupancy examples."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("<!-- occupancy-table -->", 1)[1]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and re.fullmatch(r"\d+", cells[0]):
            rows.append(cells)
    return rows


def test_page_table_matches_the_module():
    rows = _page_table()
    assert len(rows) >= 6
    names = {"warp": "warps", "块数": "blocks", "寄存器": "registers", "共享内存": "shared memory"}
    for threads, regs, smem_kb, blocks, warps, pct, limiters in rows:
        o = occ.occupancy(int(threads), int(regs), int(smem_kb) * KB)
        assert int(blocks) == o.blocks_per_sm, (threads, regs, smem_kb)
        assert int(warps) == o.warps_per_sm, (threads, regs, smem_kb)
        assert pct == f"{o.occupancy:.1%}".replace(".0%", "%"), (threads, regs, smem_kb, pct)
        said = {names[w] for w in re.split(r"[、，,]\s*", limiters) if w}
        assert said == set(o.limiters), (threads, regs, smem_kb, said, o.limiters)
