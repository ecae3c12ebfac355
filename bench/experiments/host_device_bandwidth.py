"""Host<->device copy bandwidth from pageable, pinned and mapped (zero-copy) host memory.

Three ways for data to cross the PCIe link, each size from 4 KiB to 1 GiB, both directions:

- pageable: an ordinary CPU tensor; the driver stages it through its own pinned buffer;
- pinned: `torch.empty(..., pin_memory=True)` (cudaHostAlloc); the copy engine DMAs it directly;
- mapped: `cudaHostAlloc(cudaHostAllocMapped)` through cuda.bindings; a CuPy kernel reads (H2D) or
  writes (D2H) the host buffer through its device pointer, 16 bytes per thread per step, so the
  SMs, not a copy engine, pull the bytes across the link (zero-copy).

Every path is checked (the destination equals the source, byte for byte) before it is timed.
Times are wall-clock around a synchronised region (what a program waits for), median of reps.
Also records the PCIe link generation and width and the BAR1 size as nvidia-smi reports them.
"""
from __future__ import annotations

import re
import statistics
import subprocess
import time

TITLE = "主机与设备之间的拷贝带宽：可分页、锁页与映射（零拷贝）内存，4 KiB 到 1 GiB"
USED_BY = ["docs/driver/host-device-memory.md", "notebooks/driver/unified-memory-lab.ipynb"]

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]

_COPY16 = r"""
extern "C" __global__ void copy16(const int4* __restrict__ src, int4* __restrict__ dst,
                                  unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] = src[i];
}
"""


def _reps(nbytes: int) -> int:
    if nbytes <= 1 << 20:
        return 50
    if nbytes <= 64 << 20:
        return 20
    return 7


def _median_us(fn, reps: int, sync) -> dict:
    fn()  # warm-up
    sync()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e6)
    times.sort()
    return {"median_us": statistics.median(times), "min_us": times[0], "max_us": times[-1]}


def _nvidia_smi() -> dict:
    out: dict = {}
    try:
        q = subprocess.run(
            ["nvidia-smi", "--query-gpu=pcie.link.gen.current,pcie.link.width.current,"
             "pcie.link.gen.max,pcie.link.width.max", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30)
        fields = [f.strip() for f in q.stdout.strip().splitlines()[0].split(",")]
        out["pcie_link_gen_current"], out["pcie_link_width_current"] = fields[0], fields[1]
        out["pcie_link_gen_max"], out["pcie_link_width_max"] = fields[2], fields[3]
    except Exception as exc:  # noqa: BLE001 - the record says why the query failed
        out["pcie_query_error"] = repr(exc)
    try:
        q = subprocess.run(["nvidia-smi", "-q", "-d", "MEMORY"], capture_output=True, text=True, timeout=30)
        text = q.stdout
        m = re.search(r"BAR1 Memory Usage\s*\n\s*Total\s*:\s*(\d+)\s*MiB", text)
        if m:
            out["bar1_total_mib"] = int(m.group(1))
        m = re.search(r"FB Memory Usage\s*\n\s*Total\s*:\s*(\d+)\s*MiB", text)
        if m:
            out["fb_total_mib"] = int(m.group(1))
        bar1 = text.find("BAR1")
        out["bar1_section"] = text[bar1:bar1 + 300].strip() if bar1 >= 0 else ""
    except Exception as exc:  # noqa: BLE001
        out["bar1_query_error"] = repr(exc)
    return out


def _check(err, what: str) -> None:
    # cuda.bindings returns the error enum first; cudaSuccess has the value 0
    if getattr(err, "value", err) != 0:
        raise RuntimeError(f"{what} failed: {err}")


def run(torch, sizes=None) -> dict:
    """`sizes` (bytes, multiples of 16) overrides SIZES, e.g. smaller ones for a live run in the lab."""
    sizes = list(sizes or SIZES)
    if any(n % 16 for n in sizes):
        raise ValueError("sizes must be multiples of 16 bytes")
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    biggest = max(sizes)
    gen = torch.Generator().manual_seed(0)
    src_host = torch.randint(0, 256, (biggest,), dtype=torch.uint8, generator=gen)   # pageable source
    pageable_dst = torch.empty(biggest, dtype=torch.uint8)
    pageable_dst.fill_(0)                                                             # fault its pages in
    pinned_src = torch.empty(biggest, dtype=torch.uint8, pin_memory=True)
    pinned_src.copy_(src_host)
    pinned_dst = torch.empty(biggest, dtype=torch.uint8, pin_memory=True)
    dev_buf = torch.empty(biggest, dtype=torch.uint8, device=dev)
    dev_src = src_host.to(dev)
    if not pinned_src.is_pinned() or pageable_dst.is_pinned():
        raise RuntimeError("pin_memory did not give pinned memory, or the pageable buffer is pinned")

    results: dict = {"sizes_bytes": sizes, "timing": "wall clock around synchronised copies, median of reps"}
    modes: dict = {"pageable": {"h2d": [], "d2h": []}, "pinned": {"h2d": [], "d2h": []}}

    for n in sizes:
        reps = _reps(n)
        # --- pageable ---
        dev_buf[:n].zero_()
        dev_buf[:n].copy_(src_host[:n])
        sync()
        if not torch.equal(dev_buf[:n].cpu(), src_host[:n]):
            raise RuntimeError(f"pageable H2D copy of {n} bytes differs from its source")
        t = _median_us(lambda: dev_buf[:n].copy_(src_host[:n]), reps, sync)
        modes["pageable"]["h2d"].append(dict(t, gbps=n / t["median_us"] / 1e3))
        pageable_dst[:n].zero_()
        pageable_dst[:n].copy_(dev_src[:n])
        if not torch.equal(pageable_dst[:n], src_host[:n]):
            raise RuntimeError(f"pageable D2H copy of {n} bytes differs from its source")
        t = _median_us(lambda: pageable_dst[:n].copy_(dev_src[:n]), reps, sync)
        modes["pageable"]["d2h"].append(dict(t, gbps=n / t["median_us"] / 1e3))
        # --- pinned ---
        dev_buf[:n].zero_()
        dev_buf[:n].copy_(pinned_src[:n], non_blocking=True)
        sync()
        if not torch.equal(dev_buf[:n].cpu(), src_host[:n]):
            raise RuntimeError(f"pinned H2D copy of {n} bytes differs from its source")
        t = _median_us(lambda: dev_buf[:n].copy_(pinned_src[:n], non_blocking=True), reps, sync)
        modes["pinned"]["h2d"].append(dict(t, gbps=n / t["median_us"] / 1e3))
        pinned_dst[:n].zero_()
        pinned_dst[:n].copy_(dev_src[:n], non_blocking=True)
        sync()
        if not torch.equal(pinned_dst[:n], src_host[:n]):
            raise RuntimeError(f"pinned D2H copy of {n} bytes differs from its source")
        t = _median_us(lambda: pinned_dst[:n].copy_(dev_src[:n], non_blocking=True), reps, sync)
        modes["pinned"]["d2h"].append(dict(t, gbps=n / t["median_us"] / 1e3))

    del pageable_dst, pinned_dst
    results["mapped"] = _mapped(torch, src_host, dev_src, sync, sizes)
    if "h2d" in results["mapped"]:
        modes["mapped"] = {"h2d": results["mapped"].pop("h2d"), "d2h": results["mapped"].pop("d2h")}
    results["modes"] = modes
    results["system"] = _nvidia_smi()
    return results


def _mapped(torch, src_host, dev_src, sync, sizes) -> dict:
    """Zero-copy: a kernel reads/writes mapped pinned host memory through its device pointer."""
    try:
        import ctypes

        import cupy
        import numpy as np
        from cuda.bindings import runtime as rt
    except ImportError as exc:
        return {"skipped": f"cupy or cuda.bindings missing: {exc}"}

    biggest = max(sizes)
    err, host_ptr = rt.cudaHostAlloc(biggest, rt.cudaHostAllocMapped)
    _check(err, "cudaHostAlloc(cudaHostAllocMapped)")
    try:
        err, dev_ptr = rt.cudaHostGetDevicePointer(host_ptr, 0)
        _check(err, "cudaHostGetDevicePointer")
        host_np = np.ctypeslib.as_array((ctypes.c_uint8 * biggest).from_address(int(host_ptr)))
        mem = cupy.cuda.UnownedMemory(int(dev_ptr), biggest, None, torch.cuda.current_device())
        mapped = cupy.ndarray((biggest // 16, 4), dtype=cupy.int32, memptr=cupy.cuda.MemoryPointer(mem, 0))
        # the device-side source and destination as CuPy views of torch's buffers (same bytes)
        d_src = cupy.asarray(dev_src.view(torch.int32).reshape(-1, 4))
        d_dst_t = torch.empty_like(dev_src)
        d_dst = cupy.asarray(d_dst_t.view(torch.int32).reshape(-1, 4))
        kernel = cupy.RawKernel(_COPY16, "copy16")
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        threads = 256

        def launch(src, dst, nbytes):
            n16 = nbytes // 16
            blocks = max(1, min((n16 + threads - 1) // threads, sms * 16))
            kernel((blocks,), (threads,), (src, dst, np.uint64(n16)))

        def cupy_sync():
            cupy.cuda.runtime.deviceSynchronize()
            sync()

        h2d, d2h = [], []
        for n in sizes:
            reps = _reps(n)
            # H2D: host (mapped) -> device, the kernel pulls every byte over the link
            host_np[:n] = src_host[:n].numpy()
            d_dst_t[:n].zero_()
            cupy_sync()
            launch(mapped, d_dst, n)
            cupy_sync()
            if not torch.equal(d_dst_t[:n].cpu(), src_host[:n]):
                raise RuntimeError(f"zero-copy read of {n} bytes differs from its source")
            t = _median_us(lambda: launch(mapped, d_dst, n), reps, cupy_sync)
            h2d.append(dict(t, gbps=n / t["median_us"] / 1e3))
            # D2H: device -> host (mapped), the kernel pushes every byte over the link
            host_np[:n] = 0
            cupy_sync()
            launch(d_src, mapped, n)
            cupy_sync()
            if not np.array_equal(host_np[:n], src_host[:n].numpy()):
                raise RuntimeError(f"zero-copy write of {n} bytes differs from its source")
            t = _median_us(lambda: launch(d_src, mapped, n), reps, cupy_sync)
            d2h.append(dict(t, gbps=n / t["median_us"] / 1e3))
        return {"method": "cudaHostAlloc(cudaHostAllocMapped) + CuPy kernel copying 16 B per thread through "
                          "the device pointer", "h2d": h2d, "d2h": d2h}
    finally:
        cupy.cuda.runtime.deviceSynchronize()
        (err,) = rt.cudaFreeHost(host_ptr)
        _check(err, "cudaFreeHost")
