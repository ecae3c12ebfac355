"""code/driver: the SAXPY PTX, the driver-API launch sequence and its parameter packing.

On a CPU the listing runs against code/driver/fake_driver.py, which executes the kernel with
NumPy after reading the kernelParams array the way the driver does. The committed PTX must equal
fresh `nvcc -ptx -arch=sm_90` output where the same nvcc release is installed.
"""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "driver"))

import launch_driver_api as L  # noqa: E402
from fake_driver import FakeDriver, driver_calls_in_source  # noqa: E402

PTX = (ROOT / "code" / "driver" / "saxpy.ptx").read_text(encoding="ascii")
NVCC = shutil.which("nvcc")


def test_ptx_entries_and_parameter_types():
    entries = L.ptx_entries(PTX)
    # float a -> .f32, two pointers -> .u64 (64-bit addresses), int n -> .u32 (NVVM writes ints as .u32)
    assert entries == {"saxpy": ["f32", "u64", "u64", "u32"], "empty_kernel": []}
    assert re.search(r"^\.target sm_90$", PTX, re.M) and re.search(r"^\.address_size 64$", PTX, re.M)
    body = PTX[PTX.index(".entry saxpy"):PTX.index(".entry empty_kernel")]
    assert "fma.rn.f32" in body            # a*x + y contracted into one fused multiply-add
    assert "ld.global.nc.f32" in body      # const __restrict__ x is read through the non-coherent path
    assert body.count("st.global.f32") == 1 and "setp.ge.s32" in body  # one store, guarded by i < n


def test_kernel_params_point_at_correctly_typed_arguments():
    params = L.KernelParams([2.5, 0x7F0000001000, 0x7F0000002000, 1025], ["f32", "u64", "u64", "u32"])
    pointers = (ctypes.c_void_p * 4).from_address(params.address)
    assert [ctypes.c_float.from_address(pointers[0]).value, ctypes.c_uint64.from_address(pointers[1]).value,
            ctypes.c_uint64.from_address(pointers[2]).value, ctypes.c_uint32.from_address(pointers[3]).value] \
        == [2.5, 0x7F0000001000, 0x7F0000002000, 1025]
    assert [ctypes.sizeof(s) for s in params.slots] == [4, 8, 8, 4]
    with pytest.raises(ValueError):
        L.KernelParams([1.0, 0, 0], ["f32", "u64", "u64", "u32"])


def test_parameter_block_layout_matches_the_cubin(tmp_path):
    offsets, size = L.param_layout(L.ptx_entries(PTX)["saxpy"])
    assert offsets == [0, 8, 16, 24] and size == 28   # 4 bytes of padding after the float `a`
    readelf = shutil.which("readelf")
    if NVCC is None or readelf is None:
        pytest.skip("nvcc or readelf missing: the cubin's constant bank 0 was not inspected")
    cubin = tmp_path / "saxpy.cubin"
    subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-o", str(cubin), str(ROOT / "code" / "driver" / "saxpy.cu")],
                   check=True, capture_output=True, timeout=300)
    table = subprocess.run([readelf, "-SW", str(cubin)], capture_output=True, text=True, check=True).stdout
    sizes = {m.group(1): int(m.group(2), 16)
             for m in re.finditer(r"\.nv\.constant0\.(\w+)\s+PROGBITS\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)", table)}
    # bank 0 = a block the driver fills (same for both kernels) followed by the parameters
    assert sizes["saxpy"] - sizes["empty_kernel"] == size


def _reference(a, x, y):
    return np.float64(np.float32(a)) * x.astype(np.float64) + y.astype(np.float64)


def test_driver_sequence_on_the_fake_driver_matches_numpy():
    rng = np.random.default_rng(1)
    n = 1000 + 7                           # not a multiple of the block: the i < n guard matters
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    y_before = y.copy()
    drv = FakeDriver()
    got = L.saxpy_driver_api(drv, 2.5, x, y, block=128)
    ref = _reference(2.5, x, y)
    # one float32 rounding of the exact result (fma.rn): within 1 ulp = 2^-23 relative
    assert np.all(np.abs(got - ref) <= 2.0**-23 * np.abs(ref) + 1e-38)
    assert np.array_equal(y, y_before)     # the host input is copied, not changed
    assert drv.calls == [
        "cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuModuleLoadData",
        "cuModuleGetFunction", "cuMemAlloc", "cuMemAlloc", "cuMemcpyHtoD", "cuMemcpyHtoD",
        "cuLaunchKernel", "cuCtxSynchronize", "cuMemcpyDtoH", "cuMemFree", "cuMemFree",
        "cuModuleUnload", "cuDevicePrimaryCtxRelease"]
    # the order written in the source is the order executed (no hidden calls)
    assert driver_calls_in_source((ROOT / "code" / "driver" / "launch_driver_api.py").read_text()) == drv.calls
    assert drv.primary_refcount == 0 and not drv._buffers and not drv._modules


def test_a_wrongly_typed_argument_gives_a_wrong_result():
    n = 64
    x = np.ones(n, dtype=np.float32)
    drv = FakeDriver()
    ok = L.ok
    ok(drv.cuCtxSetCurrent(("primary", 0)))
    module = ok(drv.cuModuleLoadData(PTX.encode() + b"\0"))
    func = ok(drv.cuModuleGetFunction(module, b"saxpy"))
    dx, dy = ok(drv.cuMemAlloc(4 * n)), ok(drv.cuMemAlloc(4 * n))
    ok(drv.cuMemcpyHtoD(dx, x.ctypes.data, 4 * n))
    ok(drv.cuMemcpyHtoD(dy, np.zeros(n, np.float32).ctypes.data, 4 * n))
    # `a` packed as a double: the kernel reads the low 4 bytes of 2.5 as a float, which is 0.0
    bad = L.KernelParams([2.5, dx, dy, n], ["f64", "u64", "u64", "u32"])
    ok(drv.cuLaunchKernel(func, 1, 1, 1, n, 1, 1, 0, 0, bad.address, 0))
    out = np.empty(n, np.float32)
    ok(drv.cuMemcpyDtoH(out.ctypes.data, dy, 4 * n))
    assert np.all(out == 0.0)
    good = L.KernelParams([2.5, dx, dy, n], L.ptx_entries(PTX)["saxpy"])
    ok(drv.cuLaunchKernel(func, 1, 1, 1, n, 1, 1, 0, 0, good.address, 0))
    ok(drv.cuMemcpyDtoH(out.ctypes.data, dy, 4 * n))
    assert np.all(out == 2.5)


def test_driver_errors_surface_as_exceptions():
    drv = FakeDriver()
    with pytest.raises(RuntimeError, match="201"):       # no current context
        L.ok(drv.cuModuleLoadData(PTX.encode() + b"\0"))
    drv.cuCtxSetCurrent(("primary", 0))
    with pytest.raises(RuntimeError):                    # PTX without its terminating NUL
        L.ok(drv.cuModuleLoadData(PTX.encode()))
    module = L.ok(drv.cuModuleLoadData(PTX.encode() + b"\0"))
    with pytest.raises(RuntimeError, match="500"):       # no such entry
        L.ok(drv.cuModuleGetFunction(module, b"saxpy_v2"))


def _nvcc_release() -> str | None:
    out = subprocess.run([NVCC, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    return m.group(2) if m else None


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here: PTX freshness not checked")
def test_committed_ptx_is_fresh_nvcc_output(tmp_path):
    committed = re.search(r"Cuda compilation tools, release [\d.]+, V([\d.]+)", PTX).group(1)
    if _nvcc_release() != committed:
        pytest.skip(f"PTX was generated by nvcc {committed}; this nvcc differs, so its text may too")
    out = tmp_path / "saxpy.ptx"
    proc = subprocess.run([NVCC, "-ptx", "-arch=sm_90", "-o", str(out), str(ROOT / "code" / "driver" / "saxpy.cu")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="ascii") == PTX, "code/driver/saxpy.ptx is stale: regenerate it from saxpy.cu"


def test_experiment_module_imports_on_a_cpu():
    import bench.experiments.launch_latency as exp

    assert exp.TITLE and callable(exp.run)
    assert exp.PTX.is_file() and exp.LISTING.is_file()
    s = exp._stats([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s["median"] == 3.0 and s["min"] == 1.0 and s["max"] == 5.0 and s["p10"] <= s["median"] <= s["p90"]


# ---------- pushbuffer and GPFIFO words (code/driver/gpfifo.py) ----------
import gpfifo  # noqa: E402


def test_method_header_bit_fields():
    # SEND_PCAS_A (0x2b4) on subchannel 1 with one data word, by hand from the field table:
    # SEC_OP=1 << 29 | COUNT=1 << 16 | SUBCHANNEL=1 << 13 | 0x2b4 >> 2 = 0xad
    assert gpfifo.method_header(1, 0x2B4, 1) == (1 << 29) | (1 << 16) | (1 << 13) | 0xAD == 0x200120AD
    rng = np.random.default_rng(3)
    for _ in range(200):
        sub, method, count = int(rng.integers(0, 8)), int(rng.integers(0, 0x1000)) * 4, int(rng.integers(0, 0x2000))
        for op in ("inc", "non_inc", "one_inc"):
            assert gpfifo.decode_header(gpfifo.method_header(sub, method, count, op)) == \
                {"op": op, "count": count, "subchannel": sub, "method": method}
    assert gpfifo.decode_header(gpfifo.immediate(1, 0x2C0, 3)) == {"op": "immd", "count": 3, "subchannel": 1, "method": 0x2C0}
    with pytest.raises(ValueError):
        gpfifo.method_header(0, 0x2B6, 1)          # not dword aligned
    with pytest.raises(ValueError):
        gpfifo.method_header(0, 0x2B4, 0x2000)     # COUNT has 13 bits


def test_gp_entry_bit_fields():
    addr, length = 0x12_3456_7890, 10
    e = gpfifo.gp_entry(addr, length)
    # ENTRY0 keeps address bits 31:2 in place; ENTRY1 (high word) has GET_HI in 7:0 and LENGTH in 30:10
    assert e == (addr & 0xFFFFFFFC) | ((addr >> 32) << 32) | (length << (32 + 10)) == 0x0000_2812_3456_7890
    assert gpfifo.decode_gp_entry(e) == {"pb_address": addr, "length_dwords": length, "subroutine": False, "sync_wait": False}
    assert gpfifo.decode_gp_entry(gpfifo.gp_entry(0xFF_FFFF_FFFC, (1 << 21) - 1, sync_wait=True))["length_dwords"] == (1 << 21) - 1
    with pytest.raises(ValueError):
        gpfifo.gp_entry(1 << 40, 1)                # GET_HI holds 8 bits: 40-bit addresses
    assert gpfifo.GP_ENTRY_BYTES == 8


def test_launch_and_release_words():
    launch = gpfifo.compute_launch(0x2_0000_0100)
    assert len(launch) == 4 and launch[1] == 0x2_0000_0100 >> 8
    assert gpfifo.decode_header(launch[2])["method"] == gpfifo.SEND_SIGNALING_PCAS2_B
    release = gpfifo.semaphore_release(0x7F_0000_1000, 5)
    assert gpfifo.decode_header(release[0]) == {"op": "inc", "count": 5, "subchannel": 0, "method": 0x5C}
    assert release[1:] == [0x1000, 0x7F, 5, 0, 1]
    with pytest.raises(ValueError):
        gpfifo.compute_launch(0x2_0000_0180)


def test_h200_record_obeys_the_launch_model():
    """Only relations the mechanism guarantees, never exact values."""
    from bench.experiments import RECORDS, load

    if not (RECORDS / "nvidia-h200" / "launch_latency.json").exists():
        pytest.skip("no H200 record of launch_latency yet")
    res = load("launch_latency")["results"]
    m, big = res["methods"], str(max(res["counts"]))
    med = lambda name, key: m[name][big][key]["median"]  # noqa: E731
    # one cuGraphLaunch issues N kernels: far less host time per kernel than N launches
    assert med("graph_driver", "cpu_issue_us_per_kernel") < med("driver_empty", "cpu_issue_us_per_kernel") / 10
    assert med("graph_torch_add", "cpu_issue_us_per_kernel") < med("runtime_torch_add", "cpu_issue_us_per_kernel") / 10
    # batched launches: time until all done per kernel ~ max(host, GPU), never below either
    for name in ("driver_empty", "runtime_spin0", "runtime_torch_add"):
        assert med(name, "wall_until_done_us_per_kernel") >= 0.95 * max(med(name, "cpu_issue_us_per_kernel"),
                                                                        med(name, "gpu_us_per_kernel"))
    assert all(v["median"] > res["sync_idle_stream_us"]["median"] for v in res["single_launch_round_trip_us"].values())
    assert res["runtime_and_driver_share_primary_context"] is True
    cold = res["fresh_process"]["jit_no_cache_eager"]
    assert cold["ptx"]["later_median"]["load_ms"] > cold["cubin"]["later_median"]["load_ms"]   # JIT costs more than loading SASS
