"""code/driver/um_migration.py (the models of docs/driver/host-device-memory.md) and the two GPU
experiments behind that page, bench/experiments/host_device_bandwidth.py and unified_memory.py.

References: the staging arithmetic of a pageable copy (serial stages add their times per byte,
pipelined stages run at the slower rate); NVIDIA's open kernel modules for the UVM defaults
(256 faults per batch, 2 MiB VA blocks, 51 % prefetch threshold); a least-squares fit must recover
the parameters of data it generated itself.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
import sys

import numpy as np
import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("um_migration", ROOT / "code" / "driver" / "um_migration.py")
M = importlib.util.module_from_spec(_spec)
sys.modules["um_migration"] = M
_spec.loader.exec_module(M)
PAGE_MD = ROOT / "docs" / "driver" / "host-device-memory.md"
LAB = ROOT / "notebooks" / "driver" / "unified-memory-lab.ipynb"


def test_uvm_defaults_match_the_open_kernel_modules():
    assert M.FAULT_BATCH == 256 and M.VA_BLOCK == 2 * 1024 * 1024 and M.PREFETCH_THRESHOLD == 51
    assert M.VA_BLOCK // M.PAGE == 512


def test_pageable_staging_model():
    # serial stages: times per byte add up, 1 / (1/20 + 1/50) = 14.2857...
    assert M.pageable_gbps(20.0, 50.0, pipelined=False) == pytest.approx(100 / 7)
    # pipelined: the slower stage sets the rate
    assert M.pageable_gbps(20.0, 50.0) == 20.0 and M.pageable_gbps(80.0, 50.0) == 50.0
    for memcpy in (5.0, 20.0, 200.0):
        for dma in (10.0, 50.0):
            # a pinned copy (dma alone) is never slower than going through the staging buffer
            assert M.pageable_gbps(memcpy, dma, pipelined=False) < M.pageable_gbps(memcpy, dma) <= dma
    with pytest.raises(ValueError):
        M.pageable_gbps(0.0, 10.0)


def test_prefetch_region_by_hand():
    resident = np.array([1, 1, 1, 1, 1, 0, 0, 0], dtype=bool)
    faulted = np.zeros(8, dtype=bool)
    faulted[5] = True
    # 6 of 8 pages marked = 75 % > 51 %: the whole block comes over, i.e. pages 5, 6, 7
    assert np.flatnonzero(M.prefetch_region(resident, faulted)).tolist() == [5, 6, 7]
    resident = np.array([1, 1, 1, 0, 0, 0, 0, 0], dtype=bool)
    faulted = np.zeros(8, dtype=bool)
    faulted[3] = True
    # 4 of 8 = 50 %, not above 51 %: only the aligned half 0-3 qualifies, which adds nothing new
    assert np.flatnonzero(M.prefetch_region(resident, faulted)).tolist() == [3]
    # a threshold of 100 can never be exceeded: only the faulted page moves
    resident = np.array([1, 1, 1, 1, 1, 1, 1, 0], dtype=bool)
    faulted = ~resident
    assert np.flatnonzero(M.prefetch_region(resident, faulted, threshold=100)).tolist() == [7]
    with pytest.raises(ValueError):
        M.prefetch_region(np.zeros(6, dtype=bool), np.zeros(6, dtype=bool))


@pytest.mark.parametrize("order", ["sorted", "shuffled"])
@pytest.mark.parametrize("prefetch", [True, False])
def test_simulation_migrates_every_page_exactly_once(order, prefetch):
    nbytes = 16 * 1024 * 1024 + 3 * M.PAGE          # not a whole number of VA blocks
    r = M.simulate_faults(nbytes, front_bytes=1 << 20, order=order, prefetch=prefetch, seed=1)
    pages = math.ceil(nbytes / M.PAGE)
    assert r["migrated_bytes"] == pages * M.PAGE
    assert r["faults"] * M.PAGE + r["prefetched_bytes"] == r["migrated_bytes"]
    assert r["batches"] >= math.ceil(r["faults"] / M.FAULT_BATCH)
    assert r["faults_per_batch"] <= M.FAULT_BATCH
    if not prefetch:
        assert r["faults"] == pages and r["prefetched_bytes"] == 0


def test_prefetcher_cuts_faults_and_batch_size_bounds_batches():
    kw = dict(nbytes=32 << 20, front_bytes=4 << 20, order="shuffled", seed=0)
    with_pf, without = M.simulate_faults(**kw), M.simulate_faults(**kw, prefetch=False)
    assert with_pf["faults"] < without["faults"] and with_pf["batches"] < without["batches"]
    one = M.simulate_faults(2 << 20, front_bytes=2 << 20, batch=1, prefetch=False)
    assert one["batches"] == one["faults"] == 512
    with pytest.raises(ValueError):
        M.simulate_faults(1 << 20, 1 << 20, order="backwards")


def test_fit_recovers_known_parameters():
    sizes = np.array([4, 16, 64, 256, 1024]) << 20
    sims = [M.simulate_faults(int(s), front_bytes=4 << 20, order="shuffled") for s in sizes[:3]]
    batches = [s["batches"] for s in sims] + [700, 2900]
    moved = list(sizes)
    times = M.fault_time_ms(batches, moved, t0_ms=0.05, t_batch_us=30.0, bw_gbps=25.0)
    fit = M.fit_fault_cost(times, batches, moved, bw_gbps=25.0)
    assert fit["t0_ms"] == pytest.approx(0.05, abs=1e-9)
    assert fit["t_batch_us"] == pytest.approx(30.0, rel=1e-9)
    assert np.allclose(fit["residual_ms"], 0.0, atol=1e-9)


def test_experiments_are_importable_and_bounded():
    hd = importlib.import_module("bench.experiments.host_device_bandwidth")
    um = importlib.import_module("bench.experiments.unified_memory")
    assert min(hd.SIZES) == 4 * 1024 and max(hd.SIZES) == 1 << 30 and all(n % 16 == 0 for n in hd.SIZES)
    # never more than a few GiB of managed memory: the largest buffer is 1 GiB, one at a time
    assert max(um.SIZES) <= um.MAX_MANAGED <= 4 << 30
    for mod in (hd, um):
        assert "sizes" in inspect.signature(mod.run).parameters
        for used in mod.USED_BY:
            assert (ROOT / used).is_file() and mod.__name__.rsplit(".", 1)[1] in (ROOT / used).read_text("utf-8")


def test_page_embeds_the_listings():
    text = PAGE_MD.read_text(encoding="utf-8")
    for section in ("pageable", "prefetch", "simulate", "fit"):
        assert f'--8<-- "code/driver/um_migration.py:{section}"' in text


def _record(name):
    path = ROOT / "data" / "records" / "nvidia-h200" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"no H200 record of {name} yet")
    return json.loads(path.read_text(encoding="utf-8"))["results"]


def test_bandwidth_record_obeys_physics():
    res = _record("host_device_bandwidth")
    sizes = res["sizes_bytes"]
    modes = res["modes"]
    ceiling = _pcie_ceiling(res)
    for i, n in enumerate(sizes):
        for direction in ("h2d", "d2h"):
            for mode in modes:
                assert modes[mode][direction][i]["gbps"] < ceiling
            if n >= 64 << 20:
                assert modes["pinned"][direction][i]["gbps"] >= modes["pageable"][direction][i]["gbps"]


def _pcie_ceiling(res) -> float:
    """Per-direction payload ceiling of the recorded link (after 128b/130b), in GB/s."""
    spec = importlib.util.spec_from_file_location("links", ROOT / "code" / "hardware" / "links.py")
    links = importlib.util.module_from_spec(spec)
    sys.modules["links"] = links          # dataclasses look their module up in sys.modules
    spec.loader.exec_module(links)
    system = res.get("system", {})
    gen = int(system.get("pcie_link_gen_max", 5))
    width = int(system.get("pcie_link_width_max", 16))
    return links.pcie_gbytes_per_s(gen, width)


def test_unified_memory_record_prefetch_beats_faults():
    res = _record("unified_memory")
    for row in res["rows"]:
        if row["bytes"] >= 16 << 20:
            prefetched = row["prefetch_ms"]["median"] + row["resident_kernel_ms"]["median"]
            assert prefetched < row["fault_kernel_ms"]["median"]
