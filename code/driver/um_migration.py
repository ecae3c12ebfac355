"""Small models of host<->device data movement for docs/driver/host-device-memory.md.

1. `pageable_gbps`: a pageable copy goes through the driver's pinned staging buffer, so it is a
   CPU memcpy followed by a DMA; chunked and double-buffered, the two overlap.
2. `simulate_faults`: fault-driven migration of a managed buffer that a GPU kernel sweeps once.
   The driver (nvidia-uvm) fetches up to `batch` faults from the GPU's fault buffer, services
   them per 2 MiB VA block, migrates the faulted pages plus what its density prefetcher adds
   (the largest aligned subregion of the block more than `threshold` % resident), then replays.
3. `fit_fault_cost`: fit T = t0 + batches * t_batch + migrated_bytes / bw to measured times.

The defaults follow NVIDIA's open kernel modules (kernel-open/nvidia-uvm): batch count 256
(uvm_gpu_replayable_faults.c), VA block 2 MiB (uvm_va_block_types.h), prefetch threshold 51 %
(uvm_perf_prefetch.c). Everything else (the access front, the arrival order) is an assumption.
"""
from __future__ import annotations

import numpy as np

PAGE = 4096                 # x86-64 base page: the unit the CPU side faults and migrates
VA_BLOCK = 2 << 20          # UVM_VA_BLOCK_SIZE
FAULT_BATCH = 256           # UVM_PERF_FAULT_BATCH_COUNT_DEFAULT
PREFETCH_THRESHOLD = 51     # UVM_PREFETCH_THRESHOLD_DEFAULT, percent


# --8<-- [start:pageable]
def pageable_gbps(memcpy_gbps: float, dma_gbps: float, pipelined: bool = True) -> float:
    """Bandwidth of a copy from pageable memory: CPU memcpy into a pinned staging buffer, then DMA.

    Serial: each byte costs 1/memcpy + 1/dma seconds per GB. Pipelined (chunks double-buffered):
    the slower stage sets the rate. A pinned copy skips the first stage and runs at dma_gbps."""
    if memcpy_gbps <= 0 or dma_gbps <= 0:
        raise ValueError("bandwidths must be positive")
    if pipelined:
        return min(memcpy_gbps, dma_gbps)
    return 1.0 / (1.0 / memcpy_gbps + 1.0 / dma_gbps)
# --8<-- [end:pageable]


# --8<-- [start:prefetch]
def prefetch_region(resident: np.ndarray, faulted: np.ndarray, threshold: int = PREFETCH_THRESHOLD) -> np.ndarray:
    """Pages of one VA block to migrate: the faulted ones, grown by the density prefetcher.

    `resident` and `faulted` are boolean masks over the block's pages (a power of two of them).
    For every faulted page, walk up the binary tree of aligned subregions and take the largest
    one in which (resident | faulted) covers more than `threshold` percent of the pages."""
    n = resident.size
    if n & (n - 1):
        raise ValueError("pages per block must be a power of two")
    mark = resident | faulted
    migrate = faulted.copy()
    counts = {1: mark.astype(np.int64)}
    size = 1
    while size < n:                       # counts[size][i]: marked pages in subregion i of that size
        counts[size * 2] = counts[size].reshape(-1, 2).sum(axis=1)
        size *= 2
    for page in np.flatnonzero(faulted):
        best = 1
        size = 2
        while size <= n:
            if counts[size][page // size] * 100 > size * threshold:
                best = size
            size *= 2
        start = (page // best) * best
        migrate[start:start + best] = True
    return migrate & ~resident
# --8<-- [end:prefetch]


# --8<-- [start:simulate]
def simulate_faults(nbytes: int, front_bytes: int, order: str = "shuffled", batch: int = FAULT_BATCH,
                    prefetch: bool = True, threshold: int = PREFETCH_THRESHOLD, seed: int = 0) -> dict:
    """One kernel sweeps a managed buffer that starts resident on the host.

    The running warps touch a window ("front") of `front_bytes` at a time, in address order; the
    pages of the front that are not resident fault, and reach the driver in `order` ("sorted" or
    "shuffled": SMs race, so arrival order is not address order). Each batch services up to
    `batch` faults, then the warps replay; the front moves on once all of it is resident.
    Returns counts of faults serviced, batches, pages migrated and pages added by the prefetcher."""
    pages = -(-nbytes // PAGE)
    per_block = VA_BLOCK // PAGE
    front = max(1, front_bytes // PAGE)
    resident = np.zeros(-(-pages // per_block) * per_block, dtype=bool)
    resident[pages:] = True               # past the end of the buffer: nothing to fault
    rng = np.random.default_rng(seed)
    faults = batches = migrated = prefetched = 0
    for lo in range(0, pages, front):
        hi = min(lo + front, pages)
        while True:
            missing = lo + np.flatnonzero(~resident[lo:hi])
            if missing.size == 0:
                break
            if order == "shuffled":
                missing = rng.permutation(missing)
            elif order != "sorted":
                raise ValueError("order is 'sorted' or 'shuffled'")
            serviced = np.sort(missing[:batch])
            batches += 1
            faults += serviced.size
            for block in np.unique(serviced // per_block):
                b0 = block * per_block
                faulted = np.zeros(per_block, dtype=bool)
                faulted[serviced[serviced // per_block == block] - b0] = True
                view = resident[b0:b0 + per_block]
                move = prefetch_region(view, faulted, threshold) if prefetch else faulted & ~view
                prefetched += int((move & ~faulted).sum())
                migrated += int(move.sum())
                view |= move
    return {"faults": faults, "batches": batches, "migrated_bytes": migrated * PAGE,
            "prefetched_bytes": prefetched * PAGE, "faults_per_batch": faults / max(batches, 1)}
# --8<-- [end:simulate]


# --8<-- [start:fit]
def fault_time_ms(batches, migrated_bytes, t0_ms: float, t_batch_us: float, bw_gbps: float):
    """Modelled kernel time: fixed cost + per-batch service cost + bytes over the link."""
    return t0_ms + np.asarray(batches) * t_batch_us * 1e-3 + np.asarray(migrated_bytes) / (bw_gbps * 1e9) * 1e3


def fit_fault_cost(times_ms, batches, migrated_bytes, bw_gbps: float) -> dict:
    """Least-squares t0 and t_batch with the link bandwidth held fixed (it is measured separately:
    a prefetch moves the same bytes without faults). The sizes span orders of magnitude, so the
    fit minimises relative residuals (each row weighted by 1 / time); otherwise the largest size
    alone would decide both parameters. Returns the fit and its residuals."""
    times = np.asarray(times_ms, dtype=float)
    transfer = np.asarray(migrated_bytes, dtype=float) / (bw_gbps * 1e9) * 1e3
    a = np.column_stack([np.ones_like(times), np.asarray(batches, dtype=float) * 1e-3])
    w = 1.0 / times
    (t0, t_batch), *_ = np.linalg.lstsq(a * w[:, None], (times - transfer) * w, rcond=None)
    model = fault_time_ms(batches, migrated_bytes, t0, t_batch, bw_gbps)
    return {"t0_ms": float(t0), "t_batch_us": float(t_batch), "model_ms": model,
            "residual_ms": times - model, "relative_residual": (times - model) / times}
# --8<-- [end:fit]
