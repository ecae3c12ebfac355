"""code/hardware/accel.py and data/hardware/accelerators.yml: every spec has a source, the peaks follow from
CUs x rate x clock, the ridge points and link bandwidths docs/hardware/amd-tpu.md quotes are the computed ones,
and the all-to-all bounds on a full mesh and a switch match their closed forms."""
from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("accel", ROOT / "code" / "hardware" / "accel.py")
A = importlib.util.module_from_spec(_spec)
sys.modules["accel"] = A
_spec.loader.exec_module(A)
RAW = yaml.safe_load((ROOT / "data" / "hardware" / "accelerators.yml").read_text(encoding="utf-8"))
S = A.load_specs()
PAGE = (ROOT / "docs" / "hardware" / "amd-tpu.md").read_text(encoding="utf-8")


def test_every_number_has_a_source_and_a_place():
    for slug, spec in RAW["accelerators"].items():
        for field, v in spec.items():
            if field in ("name", "year"):
                continue
            assert set(v) == {"value", "source", "where"}, (slug, field)
            assert v["source"] in RAW["sources"], (slug, field, v["source"])
            assert RAW["sources"][v["source"]]["url"].startswith("https://")
            assert isinstance(v["value"], (int, float)) and v["where"].strip()


def test_peaks_follow_from_compute_units():
    m = S["amd-mi300x"]
    assert m["compute_units"] == m["xcds"] * 38                       # 38 of 40 CUs enabled per XCD
    clock = A.clock_from_peak(m["bf16_dense_tflops"], m["compute_units"], m["bf16_flop_per_clk_cu"])
    assert clock == pytest.approx(2.1, abs=1e-3)                       # the 2100 MHz peak engine clock
    assert A.peak_tflops(304, 4096, 2.1) == pytest.approx(m["fp8_dense_tflops"], abs=0.05)
    x = S["amd-mi355x"]
    assert x["compute_units"] == x["xcds"] * 32
    for field, rate in (("bf16_dense_tflops", "bf16_flop_per_clk_cu"), ("fp8_dense_tflops", "fp8_flop_per_clk_cu"),
                        ("fp4_dense_tflops", "fp4_flop_per_clk_cu")):
        assert A.peak_tflops(x["compute_units"], x[rate], x["clock_ghz"]) == pytest.approx(x[field], abs=0.05)
    # CDNA 4 halves the CUs per XCD but doubles the matrix rate per CU: 1.9x the FP8 peak
    assert x["fp8_dense_tflops"] / m["fp8_dense_tflops"] == pytest.approx(1.925, abs=1e-3)


def test_memory_and_caches():
    m = S["amd-mi300x"]
    assert A.hbm_gbps(m["hbm_stacks"], m["hbm_gbps_per_pin"]) == pytest.approx(5324.8)   # "5.3 TB/s"
    assert m["memory_gb"] == m["hbm_stacks"] * 24
    assert m["infinity_cache_mb"] == 128 * 2                        # 128 channels x 2 MB
    assert 8 * 2048 * 2.1e9 / 1e12 == pytest.approx(34.4, abs=0.05)  # L2: 2 KB/clk per XCD x 8 XCDs
    x = S["amd-mi355x"]
    assert x["memory_gb"] == x["hbm_stacks"] * 36
    assert A.hbm_gbps(8, 8.0) == 8192 and x["memory_bandwidth_gbps"] <= 8192


RIDGES = {  # bf16 and fp8 ridge points, FLOP/B, as the page's table rounds them
    "nvidia-h100": (295, 591), "nvidia-h200": (206, 412), "nvidia-b200": (281, 562), "amd-mi300x": (247, 493),
    "amd-mi355x": (315, 629), "google-tpu-v5p": (166, 166), "google-tpu7x": (313, 625),
}


@pytest.mark.parametrize("slug", RIDGES)
def test_ridge_points_on_the_page(slug):
    s = S[slug]
    bf16 = A.ridge_flop_per_byte(s["bf16_dense_tflops"], s["memory_bandwidth_gbps"])
    fp8 = A.ridge_flop_per_byte(s["fp8_dense_tflops"], s["memory_bandwidth_gbps"])
    assert (round(bf16), round(fp8)) == RIDGES[slug]
    row = next(line for line in PAGE.splitlines() if line.startswith(f"| {s['name']} "))
    assert f"| {round(bf16)} | {round(fp8)} |" in row, row


def test_tpu_pod_arithmetic():
    t = S["google-tpu7x"]
    assert t["pod_chips"] * t["fp8_dense_tflops"] / 1e6 == pytest.approx(t["pod_exaflops_fp8"], abs=0.05)
    assert t["fp8_dense_tflops"] == 2 * t["bf16_dense_tflops"]
    assert S["google-tpu-v5p"]["fp8_dense_tflops"] == S["google-tpu-v5p"]["bf16_dense_tflops"]
    assert 4 ** 3 * 64 == 4096                                      # v4: 64 blocks of 4x4x4
    assert "42.5" in PAGE and "9216" in PAGE.replace(",", "")


def test_infinity_fabric_bandwidth():
    m = S["amd-mi300x"]
    link = A.serdes_link_gbps_dir(m["if_lanes"], m["if_gbps_per_lane"])
    assert link == 64
    assert A.mesh_gpu_gbps_dir(m["if_links"], link) == 448 and 2 * 448 == 896
    x = S["amd-mi355x"]
    assert x["if_links"] * x["if_link_gbps_bidir"] == pytest.approx(1075.2)
    for quoted in ("64 GB/s", "448 GB/s", "896 GB/s", "1075.2 GB/s"):
        assert quoted in PAGE, quoted


N, GIB = 8, 2 ** 30


def test_uniform_alltoall_mesh_equals_switch():
    t = A.uniform_alltoall(N, GIB)
    closed = GIB * (N - 1) / N / (448e9)                            # S (N-1) / (N B)
    assert A.mesh_seconds(t, 64) == pytest.approx(closed)
    assert A.switch_seconds(t, 448) == pytest.approx(closed)
    assert f"{closed * 1e3:.2f} ms" in PAGE
    assert f"{A.switch_seconds(t, 450) * 1e3:.2f} ms" in PAGE       # H100/H200: 900 GB/s NVLink, 450 each way


def test_incast_hurts_both_the_same():
    t = A.hotspot_alltoall(N, GIB, hot=0, hot_fraction=0.5)
    assert A.mesh_seconds(t, 64) == pytest.approx(A.switch_seconds(t, 448))
    assert A.mesh_seconds(t, 64) == pytest.approx(GIB * 7 / 8 * 0.5 / 64e9)


@pytest.mark.parametrize("f", [1 / 7, 0.25, 0.5, 1.0])
def test_pair_skew_costs_the_mesh(f):
    t = A.paired_alltoall(N, GIB, f)
    for i in range(N):                                              # the same bytes leave each GPU
        assert sum(t[i]) == pytest.approx(GIB * 7 / 8)
    ratio = A.mesh_seconds(t, 64) / A.switch_seconds(t, 448)
    assert ratio == pytest.approx(max(1.0, f * (N - 1)))            # the mesh gives one pair 1/(N-1) of the GPU
    if f == 1.0:
        assert f"{A.mesh_seconds(t, 64) * 1e3:.1f} ms" in PAGE


def test_torus_bisection():
    assert A.torus_bisection_links(16) == 512
    assert A.torus_bisection_share(16) == pytest.approx(1 / 24)       # 4 / (6 k)
    assert A.torus_bisection_share(4) == pytest.approx(1 / 6)
    v5p = S["google-tpu-v5p"]
    assert v5p["ici_gbps_bidir"] / 6 / 2 == 100                       # per link, each way
    assert "1/24" in PAGE
