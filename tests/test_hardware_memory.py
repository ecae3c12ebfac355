"""code/hardware/hbm.py reproduces the memory figures docs/hardware/memory.md quotes.

References: JEDEC JESD238 (HBM3: 6.4 Gb/s per pin, 819 GB/s per device), JESD270-4 (HBM4: 2048-bit,
up to 8 Gb/s, 2 TB/s), NVIDIA datasheets (H100 SXM 3.35 TB/s over 5120 bits, H200 4.8 TB/s,
RTX 4090 GDDR6X 21 Gbps x 384-bit = 1,008 GB/s, RTX 5090 GDDR7 28 Gbps x 512-bit = 1,792 GB/s),
AMD CDNA 3 white paper (MI300X 8 stacks, 8192-bit, 5.3 TB/s, 192 GB).
"""
from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("hbm", ROOT / "code" / "hardware" / "hbm.py")
H = importlib.util.module_from_spec(_spec)
sys.modules["hbm"] = H
_spec.loader.exec_module(H)
PAGE = ROOT / "docs" / "hardware" / "memory.md"


@pytest.mark.parametrize("gen,per_stack", [("HBM", 128), ("HBM2", 256), ("HBM2E", 460.8), ("HBM3", 819.2),
                                           ("HBM3E", 1228.8), ("HBM4", 2048)])
def test_per_stack_bandwidth(gen, per_stack):
    bits, rate = H.HBM[gen]
    assert H.bandwidth_gbytes(bits, rate) == pytest.approx(per_stack)


@pytest.mark.parametrize("bus,rate,quoted", [(384, 21, 1008), (512, 28, 1792), (8192, 5.2, 5324.8)])
def test_gddr_and_mi300x(bus, rate, quoted):
    assert H.bandwidth_gbytes(bus, rate) == pytest.approx(quoted)


@pytest.mark.parametrize("bw,bus,rate", [(3350, 5120, 5.23), (4800, 6144, 6.25), (2039, 5120, 3.19), (8000, 8192, 7.81)])
def test_implied_pin_rates(bw, bus, rate):
    assert H.pin_rate_gbps(bw, bus) == pytest.approx(rate, abs=0.01)


def test_capacities():
    assert H.stack_capacity_gbytes(8, 24) == 24      # HBM3E 8-high of 24 Gb dies
    assert H.stack_capacity_gbytes(12, 24) == 36     # 12-high
    assert H.stack_capacity_gbytes(16, 32) == 64     # HBM4 maximum
    assert 6 * H.stack_capacity_gbytes(8, 24) == 144  # H200: 141 GB usable of 144 GB
    assert 8 * H.stack_capacity_gbytes(12, 16) == 192  # MI300X


def test_page_quotes_the_computed_figures():
    text = PAGE.read_text(encoding="utf-8")
    for quoted in ("819.2", "1,228.8", "2,048", "5.23", "6.25", "1,008", "1,792"):
        assert quoted in text, quoted


@pytest.mark.parametrize("gen,smallest,largest", [("HBM3", 4, 64), ("HBM4", 12, 64)])
def test_standard_capacity_ranges(gen, smallest, largest):
    # JESD238: 4 GB (8 Gb 4-high) to 64 GB (32 Gb 16-high); JESD270-4: 24 or 32 Gb dies, 4- to 16-high
    assert H.standard_capacity_range(gen) == (smallest, largest)


@pytest.mark.parametrize("gen,capacities", [("HBM", [1]), ("HBM2", [4]), ("HBM2E", [16]), ("HBM3", [16, 24]),
                                            ("HBM3E", [24, 36]), ("HBM4", [36])])
def test_first_products(gen, capacities):
    assert [H.stack_capacity_gbytes(d, g) for d, g in H.FIRST_PRODUCTS[gen]] == capacities


def test_hbm_table_keeps_standard_and_first_products_apart():
    """Every row of the HBM table gives the standard's range (or says there is none) and, separately, first
    products; a first product must never be quoted as the standard's capacity, as the HBM3 row once did."""
    text = PAGE.read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in text.splitlines() if line.startswith("| HBM")}
    assert set(rows) == set(H.HBM), rows.keys()
    header = next(line for line in text.splitlines() if line.startswith("| 代 |"))
    assert "标准允许的堆叠" in header and "首批产品" in header
    for gen, cells in rows.items():
        standard, first = cells[-2], cells[-1]
        for dies, gbit in H.FIRST_PRODUCTS[gen]:
            assert f"{dies} 层 × {gbit} Gb = {H.stack_capacity_gbytes(dies, gbit):.0f} GB" in first, (gen, first)
        if gen in H.STANDARD_STACKS:
            heights, (small, large) = H.STANDARD_STACKS[gen]
            lo, hi = H.standard_capacity_range(gen)
            assert f"{lo:.0f} GB（{min(heights)} 层 × {small} Gb）" in standard, (gen, standard)
            assert f"{hi:.0f} GB（{max(heights)} 层 × {large} Gb）" in standard, (gen, standard)
    # JESD238 only provides for a future 16-high extension; the page must not call 16 layers part of it
    assert "为 16 层预留扩展" in rows["HBM3"][-2]
    assert "最多 16 层" not in text.split("JESD238 HBM3 发布公告")[1].split("\n")[0]
