"""code/hardware/links.py reproduces the published link figures from rates, lanes and encodings,
and docs/hardware/interconnect.md quotes what links.py computes.

References: PCI-SIG (8b/10b for Gen1-2, 128b/130b for Gen3-5, 64 GT/s PAM4 FLIT for 6.0), NVIDIA's
per-GPU NVLink totals (P100 160, V100 300, A100 600, H100 900, B200 1800 GB/s) and the 130 TB/s of
GB200 NVL72, the IBTA port speeds (SDR 10 ... XDR 800 Gb/s signalling for 4x ports).
"""
from __future__ import annotations

import importlib.util
import math
import re
import sys

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("links", ROOT / "code" / "hardware" / "links.py")
L = importlib.util.module_from_spec(_spec)
sys.modules["links"] = L
_spec.loader.exec_module(L)
PAGE = ROOT / "docs" / "hardware" / "interconnect.md"


@pytest.mark.parametrize("gen,expected", [(1, 4.0), (2, 8.0), (3, 15.754), (4, 31.508), (5, 63.015), (6, 118.0)])
def test_pcie_x16_per_direction(gen, expected):
    assert L.pcie_gbytes_per_s(gen, 16) == pytest.approx(expected, abs=1e-3)


def test_pcie_doubles_per_generation_on_the_wire():
    for gen in (2, 4, 5, 6):
        assert L.PCIE[gen].gt_per_s == 2 * L.PCIE[gen - 1].gt_per_s
    # 3.0 went from 5 to 8 GT/s only, and doubled the payload through the line code instead
    assert L.pcie_gbytes_per_s(3) == pytest.approx(2 * L.pcie_gbytes_per_s(2), rel=0.02)
    # the NVIDIA datasheets' "PCIe Gen5 128 GB/s" is both directions of x16, before encoding
    assert 2 * L.PCIE[5].gt_per_s * 16 / 8 == 128


@pytest.mark.parametrize("version,total", [(1, 160), (2, 300), (3, 600), (4, 900), (5, 1800)])
def test_nvlink_per_gpu_matches_nvidia(version, total):
    assert L.nvlink_gpu_bidir(version) == total


def test_nvl72_domain():
    assert L.nvl_domain_bidir_tbps(72) == pytest.approx(130, rel=0.01)  # NVIDIA quotes 130 TB/s


@pytest.mark.parametrize("name,port", [("SDR", 8), ("DDR", 16), ("QDR", 32), ("EDR", 100), ("HDR", 200),
                                       ("NDR", 400), ("XDR", 800)])
def test_infiniband_4x_ports(name, port):
    assert L.ib_port_gbps(name) == port
    assert L.gbps_to_gbytes(L.ib_port_gbps(name)) == port / 8


def test_fdr_encoding():
    assert L.ib_port_gbps("FDR") == pytest.approx(4 * 14.0625 * 64 / 66, rel=1e-3)


def test_gradient_sync_example_on_the_page():
    sent = L.ring_allreduce_bytes_per_gpu(14e9, 8)
    assert sent == pytest.approx(24.5e9)
    assert L.transfer_seconds(sent, 450) == pytest.approx(0.0544, abs=5e-4)
    assert L.transfer_seconds(sent, 50) == pytest.approx(0.49)


def test_ring_allreduce_and_alpha_beta():
    assert L.ring_allreduce_bytes_per_gpu(8, 8) == 14
    assert L.ring_allreduce_bytes_per_gpu(1, 2) == 1
    assert L.transfer_seconds(1e9, 1.0, 5e-6) == pytest.approx(1.000005)


def test_page_quotes_the_computed_figures():
    text = PAGE.read_text(encoding="utf-8")
    for gen in range(3, 7):
        value = L.pcie_gbytes_per_s(gen, 16)
        assert f"{value:.2f}" in text or f"{value:.1f}" in text, f"PCIe Gen{gen} x16 {value:.2f} GB/s missing"
    for version in range(1, 6):
        assert f"{L.nvlink_gpu_bidir(version):,.0f}" in text
    for name in ("EDR", "HDR", "NDR", "XDR"):
        assert re.search(rf"{name}\s*\|\s*{L.ib_port_gbps(name):.0f}", text), name
    assert math.isclose(L.nvl_domain_bidir_tbps(72), 129.6)
    assert "129.6" in text
