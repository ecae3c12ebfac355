"""Unified (managed) memory: fault-driven migration vs prefetch, migration back, and ReadMostly.

For each size (4 MiB .. 1 GiB; never more than 1 GiB of managed memory at a time, far below the
card's free memory, so nothing is oversubscribed):

1. fault: the CPU writes the buffer (pages resident on the host), then a GPU kernel does
   a = 2a + 1 over all of it; every first touch of a page faults and the driver migrates it;
2. prefetch: the CPU writes it again, `cudaMemPrefetchAsync` moves it to the GPU, then the same
   kernel runs on resident pages (the prefetch and the kernel are timed apart);
3. back: the CPU reads the whole buffer after the GPU wrote it (pages migrate back on CPU faults),
   then reads it a second time (already resident: the CPU's own speed);
4. ReadMostly: with `cudaMemAdviseSetReadMostly` the GPU kernel only reads (b = 2a + 1 into a
   device buffer) and the CPU reads afterwards; the same without the advice for comparison.

Every result is checked (the GPU's and the CPU's view hold the expected values) before it counts.
GPU phases are timed with CUDA events, CPU phases with perf_counter; medians over reps.
"""
from __future__ import annotations

import statistics
import time

TITLE = "统一内存：缺页驱动的迁移与预取、迁回主机、ReadMostly 提示，4 MiB 到 1 GiB"
USED_BY = ["docs/driver/host-device-memory.md", "notebooks/driver/unified-memory-lab.ipynb"]

SIZES = [4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
REPS = 3          # measured repetitions per size, after one warm-up round
MAX_MANAGED = 1 << 30

_KERNELS = r"""
extern "C" __global__ void axpb_inplace(float* a, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) a[i] = 2.0f * a[i] + 1.0f;
}
extern "C" __global__ void axpb_read(const float* a, float* b, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) b[i] = 2.0f * a[i] + 1.0f;
}
"""


def _ok(err, what: str) -> None:
    if getattr(err, "value", err) != 0:   # cudaSuccess == 0
        raise RuntimeError(f"{what} failed: {err}")


def _location(rt, device: int):
    loc = rt.cudaMemLocation()
    if device < 0:
        loc.type = rt.cudaMemLocationType.cudaMemLocationTypeHost
        loc.id = 0
    else:
        loc.type = rt.cudaMemLocationType.cudaMemLocationTypeDevice
        loc.id = device
    return loc


def _prefetch(rt, ptr: int, nbytes: int, device: int, stream: int = 0) -> None:
    """cudaMemPrefetchAsync to `device` (-1: host). CUDA 13 takes a cudaMemLocation and flags;
    CUDA 12 took a device ordinal (cudaCpuDeviceId for the host) and had the location form as _v2."""
    try:
        (err,) = rt.cudaMemPrefetchAsync(ptr, nbytes, _location(rt, device), 0, stream)
    except TypeError:
        if hasattr(rt, "cudaMemPrefetchAsync_v2"):
            (err,) = rt.cudaMemPrefetchAsync_v2(ptr, nbytes, _location(rt, device), 0, stream)
        else:
            (err,) = rt.cudaMemPrefetchAsync(ptr, nbytes, device if device >= 0 else rt.cudaCpuDeviceId, stream)
    _ok(err, "cudaMemPrefetchAsync")


def _advise(rt, ptr: int, nbytes: int, advice, device: int) -> None:
    try:
        (err,) = rt.cudaMemAdvise(ptr, nbytes, advice, _location(rt, device))
    except TypeError:
        if hasattr(rt, "cudaMemAdvise_v2"):
            (err,) = rt.cudaMemAdvise_v2(ptr, nbytes, advice, _location(rt, device))
        else:
            (err,) = rt.cudaMemAdvise(ptr, nbytes, advice, device)
    _ok(err, f"cudaMemAdvise({advice})")


def _attr(rt, name: str, device: int):
    try:
        err, value = rt.cudaDeviceGetAttribute(getattr(rt.cudaDeviceAttr, name), device)
        return int(value) if getattr(err, "value", err) == 0 else None
    except Exception:  # noqa: BLE001 - an attribute this binding lacks is recorded as None
        return None


def _med(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1]}


def run(torch, sizes=None, reps=REPS) -> dict:
    """`sizes` (bytes, multiples of 4, each at most MAX_MANAGED) and `reps` override the defaults,
    e.g. smaller ones for a live run in the lab."""
    import ctypes

    import cupy
    import numpy as np
    from cuda.bindings import runtime as rt

    device = torch.cuda.current_device()
    cupy.cuda.Device(device).use()
    if _attr(rt, "cudaDevAttrConcurrentManagedAccess", device) != 1:
        raise RuntimeError("this GPU/OS lacks concurrent managed access: prefetch and advice would not apply")
    free, total = cupy.cuda.runtime.memGetInfo()
    if 2 * MAX_MANAGED > free // 4:
        raise RuntimeError(f"only {free / 2**30:.1f} GiB free: refusing to allocate managed memory")

    module = cupy.RawModule(code=_KERNELS)
    k_inplace = module.get_function("axpb_inplace")
    k_read = module.get_function("axpb_read")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    threads = 256
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()

    def gpu_ms(launch) -> float:
        cupy.cuda.runtime.deviceSynchronize()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop)

    def cpu_ms(fn):
        t0 = time.perf_counter()
        out = fn()
        return (time.perf_counter() - t0) * 1e3, out

    readmostly = rt.cudaMemoryAdvise.cudaMemAdviseSetReadMostly
    unset_readmostly = rt.cudaMemoryAdvise.cudaMemAdviseUnsetReadMostly

    rows = []
    sizes = list(sizes or SIZES)
    for nbytes in sizes:
        if nbytes > MAX_MANAGED or nbytes % 4:
            raise ValueError(f"{nbytes} B: managed sizes must be multiples of 4 and at most {MAX_MANAGED} B")
        assert nbytes <= MAX_MANAGED
        n = nbytes // 4
        blocks = max(1, min((n + threads - 1) // threads, sms * 32))
        mp = cupy.cuda.malloc_managed(nbytes)
        a = out = host = None
        try:
            a = cupy.ndarray((n,), dtype=cupy.float32, memptr=mp)
            host = np.ctypeslib.as_array((ctypes.c_float * n).from_address(mp.ptr))   # the CPU's view
            out = cupy.empty(n, dtype=cupy.float32)                                     # plain device memory

            def inplace():
                k_inplace((blocks,), (threads,), (a, np.uint64(n)))

            def read_only():
                k_read((blocks,), (threads,), (a, out, np.uint64(n)))

            t = {k: [] for k in ("cpu_write_ms", "fault_kernel_ms", "cpu_read_back_ms", "cpu_read_resident_ms",
                                 "prefetch_ms", "prefetch_wall_ms", "resident_kernel_ms", "readmostly_first_read_ms",
                                 "readmostly_second_read_ms", "readmostly_cpu_read_ms",
                                 "plain_first_read_ms", "plain_cpu_read_ms")}
            for rep in range(reps + 1):          # round 0 warms up (first touch also populates pages)
                keep = rep > 0
                v = float(rep + 1)
                want = 2.0 * v + 1.0
                # 1. fault-driven: CPU writes, then the GPU faults every page in
                ms, _ = cpu_ms(lambda: host.fill(v))
                if keep:
                    t["cpu_write_ms"].append(ms)
                ms = gpu_ms(inplace)
                if not bool((a == want).all()):
                    raise RuntimeError(f"{nbytes} B: fault-driven kernel gave wrong values")
                if keep:
                    t["fault_kernel_ms"].append(ms)
                # 3. back: the CPU reads what the GPU wrote (migrates back), then reads it again
                ms, good = cpu_ms(lambda: bool((host == want).all()))
                ms2, good2 = cpu_ms(lambda: bool((host == want).all()))
                if not (good and good2):
                    raise RuntimeError(f"{nbytes} B: CPU sees wrong values after the GPU wrote")
                if keep:
                    t["cpu_read_back_ms"].append(ms)
                    t["cpu_read_resident_ms"].append(ms2)
                # 2. prefetch, then the same kernel on resident pages
                host.fill(v)
                cupy.cuda.runtime.deviceSynchronize()
                t0 = time.perf_counter()
                ms = gpu_ms(lambda: _prefetch(rt, mp.ptr, nbytes, device))
                wall = (time.perf_counter() - t0) * 1e3     # includes the host-side work of the call
                ms_k = gpu_ms(inplace)
                if not bool((a == want).all()):
                    raise RuntimeError(f"{nbytes} B: kernel after prefetch gave wrong values")
                if keep:
                    t["prefetch_ms"].append(ms)
                    t["prefetch_wall_ms"].append(wall)
                    t["resident_kernel_ms"].append(ms_k)
                if not bool((host == want).all()):     # pages come back to the host for the next round
                    raise RuntimeError(f"{nbytes} B: CPU sees wrong values after prefetch + kernel")
                # 4a. without advice: GPU reads (pages migrate to it), then the CPU reads (they migrate back)
                host.fill(v)
                ms = gpu_ms(read_only)
                if not bool((out == want).all()):
                    raise RuntimeError(f"{nbytes} B: read kernel gave wrong values")
                ms_c, good = cpu_ms(lambda: bool((host == v).all()))
                if not good:
                    raise RuntimeError(f"{nbytes} B: CPU sees wrong values after a GPU read")
                if keep:
                    t["plain_first_read_ms"].append(ms)
                    t["plain_cpu_read_ms"].append(ms_c)
                # 4b. ReadMostly: the GPU gets a read-only copy, the host copy stays valid
                host.fill(v)
                _advise(rt, mp.ptr, nbytes, readmostly, device)
                ms = gpu_ms(read_only)
                ms_2 = gpu_ms(read_only)
                if not bool((out == want).all()):
                    raise RuntimeError(f"{nbytes} B: read kernel under ReadMostly gave wrong values")
                ms_c, good = cpu_ms(lambda: bool((host == v).all()))
                if not good:
                    raise RuntimeError(f"{nbytes} B: CPU sees wrong values under ReadMostly")
                _advise(rt, mp.ptr, nbytes, unset_readmostly, device)
                if keep:
                    t["readmostly_first_read_ms"].append(ms)
                    t["readmostly_second_read_ms"].append(ms_2)
                    t["readmostly_cpu_read_ms"].append(ms_c)
            row = {"bytes": nbytes}
            for key, xs in t.items():
                row[key] = _med(xs)
            # effective bandwidth of each phase over the whole buffer (GB/s, decimal); the in-place
            # kernels read and write each byte, but only one direction of migration is forced: count bytes once
            for key in list(t):
                row[key.replace("_ms", "_gbps")] = nbytes / (row[key]["median"] * 1e-3) / 1e9
            rows.append(row)
        finally:
            cupy.cuda.runtime.deviceSynchronize()
            del a, out, host
            del mp
            cupy.get_default_memory_pool().free_all_blocks()

    return {
        "sizes_bytes": sizes,
        "reps": reps,
        "timing": "GPU phases: CUDA events around the kernel or the prefetch; CPU phases: perf_counter "
                  "around a NumPy pass over the managed buffer (fill or compare); medians of reps",
        "device_attributes": {
            name: _attr(rt, name, device)
            for name in ("cudaDevAttrConcurrentManagedAccess", "cudaDevAttrPageableMemoryAccess",
                         "cudaDevAttrPageableMemoryAccessUsesHostPageTables",
                         "cudaDevAttrDirectManagedMemAccessFromHost", "cudaDevAttrHostNativeAtomicSupported")
        },
        "rows": rows,
    }
