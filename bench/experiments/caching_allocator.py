"""PyTorch's CUDA caching allocator on a fixed alloc/free trace, and the cost of raw allocation.

Four parts, each checked before it is timed or recorded:

1. `TRACE` (below) replayed in a fresh process for each allocator setting in `CONFIGS`: after every
   step the allocated / reserved / requested bytes and the segment count from
   `torch.cuda.memory_stats()`, plus a snapshot summary (segments, largest free block) at the
   `snapshot` steps and the event counts that `_record_memory_history` logged. Every live tensor is
   filled with its own byte and read back at the end, and live tensors must not overlap.
2. Raw `cudaMalloc` / `cudaFree` (cuda.bindings, not through PyTorch) across 4 KiB .. 1 GiB.
3. Stream-ordered `cudaMallocAsync` / `cudaFreeAsync` from the device's default pool, with the
   release threshold 0 (the default: the pool trims at every synchronisation) and UINT64_MAX
   (the pool keeps its memory and serves the next request from it).
4. The caching allocator: a hit (`caching_allocator_alloc` of a size freed before, and
   `torch.empty`), and a miss (`torch.empty` right after `empty_cache`).

`python -m bench.experiments caching_allocator` runs it on a GPU and writes the record.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

TITLE = "CUDA caching allocator: stats on a fixed alloc/free trace; cudaMalloc vs cudaMallocAsync vs cache hit"
USED_BY = ["docs/runtime/memory-management.md", "notebooks/runtime/allocator-lab.ipynb"]

KiB = 1024
MiB = 1024 * KiB

# The trace: ("alloc", name, bytes) | ("free", name) | ("empty_cache",) | ("snapshot", label).
# Sizes are chosen so that each step exercises one rule of CUDACachingAllocator.cpp
# (the comment says which); code/runtime/caching_allocator.py replays the same list.
TRACE = [
    ("alloc", "s1", 1000),            # rounded up to 1024 B; first small request: a 2 MiB segment
    ("alloc", "s2", 3000),            # 3072 B, split off the same segment
    ("alloc", "s3", 512 * KiB),       # still small, still the same segment
    ("alloc", "s4", 1 * MiB),         # exactly 1 MiB is still "small"; fits the 1.5 MiB left
    ("alloc", "s5", 1 * MiB),         # the ~0.5 MiB left cannot hold it: a second 2 MiB segment
    ("free", "s2"),                   # a 3072 B hole between s1 and s3
    ("alloc", "s6", 2000),            # best fit: the 3072 B hole, split (small pool: remainder >= 512 B)
    ("alloc", "l1", 1 * MiB + 1),     # first "large" request: rounded to 1 MiB + 512 B, in a 20 MiB segment
    ("alloc", "l2", 5 * MiB),         # 1..10 MiB: carved from the same 20 MiB segment
    ("alloc", "l3", 12 * MiB),        # >= 10 MiB but the ~14 MiB remainder fits: split again
    ("alloc", "l4", 12 * MiB),        # no free block fits: its own 12 MiB segment (rounded to 2 MiB)
    ("free", "l4"),                   # a whole free 12 MiB segment stays cached
    ("alloc", "l5", 11 * MiB),        # reuses the 12 MiB block unsplit (1 MiB left is not > 1 MiB)
    ("free", "l5"),
    ("alloc", "l6", 14 * MiB),        # growing request: the 12 MiB block is too small -> new segment
    ("free", "l6"),
    ("alloc", "l7", 16 * MiB),        # and again -> new segment; reserved grows, allocated does not
    ("free", "l7"),
    ("snapshot", "grown"),
    ("empty_cache",),                 # frees the unsplit cached segments (12, 14, 16 MiB)
    ("alloc", "f1", 3 * MiB),         # six 3 MiB tensors carved from a new 20 MiB segment
    ("alloc", "f2", 3 * MiB),
    ("alloc", "f3", 3 * MiB),
    ("alloc", "f4", 3 * MiB),
    ("alloc", "f5", 3 * MiB),
    ("alloc", "f6", 3 * MiB),
    ("free", "f1"),                   # free every other one: 9 MiB free in 3 MiB holes
    ("free", "f3"),
    ("free", "f5"),
    ("alloc", "g1", 4 * MiB),         # no hole fits 4 MiB: yet another 20 MiB segment (fragmentation)
    ("snapshot", "fragmented"),
    ("free", "f2"),                   # f1 + f2 + f3 merge into one 9 MiB free block
    ("alloc", "g2", 8 * MiB),         # best fit: the 9 MiB block, unsplit (1 MiB left is not > 1 MiB)
    ("empty_cache",),                 # nothing to release: every segment still holds a live block
    ("free", "s1"), ("free", "s3"), ("free", "s4"), ("free", "s5"), ("free", "s6"),
    ("free", "l1"), ("free", "l2"), ("free", "l3"),
    ("free", "f4"), ("free", "f6"), ("free", "g1"), ("free", "g2"),
    ("empty_cache",),                 # everything unsplit again: reserved back to 0
    ("alloc", "h1", 40 * MiB),        # its own 40 MiB segment
    ("free", "h1"),
    ("alloc", "h2", 8 * MiB),         # default: split off the cached 40 MiB block; with max_split_size
                                      # 24 MiB that block is "oversize" and may not serve it: new 20 MiB
    ("alloc", "h3", 39 * MiB),        # default: a new 40 MiB segment; max_split_size: the oversize
                                      # 40 MiB block serves it whole (within 20 MiB of the request)
    ("snapshot", "oversize"),
    ("free", "h2"), ("free", "h3"),
    ("empty_cache",),
]

CONFIGS = {
    "default": "",
    "expandable_segments": "expandable_segments:True",
    "max_split_size_mb_24": "max_split_size_mb:24",
}

STAT_KEYS = {
    "allocated_bytes": "allocated_bytes.all.current",
    "reserved_bytes": "reserved_bytes.all.current",
    "requested_bytes": "requested_bytes.all.current",
    "active_bytes": "active_bytes.all.current",
    "segments": "segment.all.current",
    "inactive_split_bytes": "inactive_split_bytes.all.current",
    "small_pool_reserved_bytes": "reserved_bytes.small_pool.current",
    "large_pool_reserved_bytes": "reserved_bytes.large_pool.current",
}


def _stats(torch) -> dict:
    raw = torch.cuda.memory_stats()
    return {short: int(raw.get(key, -1)) for short, key in STAT_KEYS.items()}


def _snapshot_summary(torch) -> dict:
    segments = torch.cuda.memory_snapshot()
    free_blocks = [b["size"] for s in segments for b in s["blocks"] if b["state"] == "inactive"]
    return {
        "segments": len(segments),
        "segment_sizes_bytes": sorted(int(s["total_size"]) for s in segments),
        "segment_pools": sorted(str(s.get("segment_type", "?")) for s in segments),
        "free_blocks_bytes": sorted(int(x) for x in free_blocks),
        "largest_free_block_bytes": int(max(free_blocks, default=0)),
        "reserved_bytes": int(sum(s["total_size"] for s in segments)),
        "allocated_bytes": int(sum(s["allocated_size"] for s in segments)),
    }


def replay_trace(torch) -> dict:
    """Replay TRACE in this process (meant to be a fresh one) and record the allocator after each step."""
    torch.cuda.init()
    torch.cuda.synchronize()
    start = _stats(torch)
    if start["allocated_bytes"] != 0 or start["reserved_bytes"] != 0:
        raise RuntimeError(f"allocator not empty before the trace: {start}")
    history_ok = True
    try:
        torch.cuda.memory._record_memory_history(max_entries=100000)
    except Exception:  # noqa: BLE001 - recorded, not fatal
        history_ok = False
    live, fills, steps, snapshots = {}, {}, [], {}
    for i, op in enumerate(TRACE):
        if op[0] == "alloc":
            _, name, nbytes = op
            t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            fills[name] = (i * 37 + 11) % 251
            t.fill_(fills[name])
            live[name] = t
            del t  # a stray reference would keep the block alive past its "free" step
        elif op[0] == "free":
            del live[op[1]]
        elif op[0] == "empty_cache":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        elif op[0] == "snapshot":
            snapshots[op[1]] = _snapshot_summary(torch)
        # live tensors never overlap
        spans = sorted((t.data_ptr(), t.data_ptr() + t.numel()) for t in live.values())
        for (a0, a1), (b0, _) in zip(spans, spans[1:]):
            if a1 > b0:
                raise RuntimeError(f"step {i}: live tensors overlap")
        st = _stats(torch)
        want_requested = sum(t.numel() for t in live.values())
        if st["requested_bytes"] not in (-1, want_requested):
            raise RuntimeError(f"step {i}: requested_bytes {st['requested_bytes']} != {want_requested}")
        steps.append(st)
    torch.cuda.synchronize()
    events = {}
    if history_ok:
        snap = torch.cuda.memory._snapshot()
        for trace in snap.get("device_traces", []):
            for e in trace:
                events[e["action"]] = events.get(e["action"], 0) + 1
        torch.cuda.memory._record_memory_history(enabled=None)
    if live:
        raise RuntimeError("trace leaves tensors alive")
    return {"steps": steps, "snapshots": snapshots, "history_event_counts": events,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}


def _verify_fills(torch) -> None:
    """Same trace, checking contents: each tensor keeps its own byte while others come and go."""
    live, fills = {}, {}
    for i, op in enumerate(TRACE):
        if op[0] == "alloc":
            _, name, nbytes = op
            live[name] = torch.full((nbytes,), (i * 37 + 11) % 251, dtype=torch.uint8, device="cuda")
            fills[name] = (i * 37 + 11) % 251
        elif op[0] == "free":
            t = live.pop(op[1])
            if not bool((t == fills[op[1]]).all()):
                raise RuntimeError(f"tensor {op[1]} was overwritten while alive")
            del t
        elif op[0] == "empty_cache":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def _trace_in_subprocess(conf: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("PYTORCH_ALLOC_CONF", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-m", "bench.experiments.caching_allocator", "--trace"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"trace with PYTORCH_CUDA_ALLOC_CONF={conf!r} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _quantiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    n = len(xs)
    return {"median": xs[n // 2], "p10": xs[max(0, n // 10)], "p90": xs[min(n - 1, (9 * n) // 10)],
            "min": xs[0], "max": xs[-1]}


def _cudart():
    try:
        from cuda.bindings import runtime as cudart
        from cuda.bindings import driver
    except ImportError:  # older cuda-python layout
        from cuda import cuda as driver  # type: ignore[no-redef]
        from cuda import cudart  # type: ignore[no-redef]
    return cudart, driver


def _ok(result, what):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return result[1] if len(result) == 2 else result[1:]


def raw_allocation_costs(torch, sizes: list[int], reps: int) -> dict:
    """Host time of cudaMalloc/cudaFree and cudaMallocAsync/cudaFreeAsync per size (microseconds)."""
    import numpy as np

    cudart, driver = _cudart()
    torch.cuda.synchronize()
    dev = torch.cuda.current_device()
    stream = torch.cuda.current_stream().cuda_stream
    pool = _ok(cudart.cudaDeviceGetDefaultMemPool(dev), "cudaDeviceGetDefaultMemPool")

    # check: an allocation of each kind holds what we write into it
    for alloc_kind in ("sync", "async"):
        nbytes = 4 * MiB
        if alloc_kind == "sync":
            ptr = _ok(cudart.cudaMalloc(nbytes), "cudaMalloc")
        else:
            ptr = _ok(cudart.cudaMallocAsync(nbytes, stream), "cudaMallocAsync")
        _ok((cudart.cudaMemsetAsync(ptr, 0x5A, nbytes, stream)[0], None), "cudaMemsetAsync")
        host = np.zeros(64, dtype=np.uint8)
        _ok((cudart.cudaStreamSynchronize(stream)[0], None), "cudaStreamSynchronize")
        _ok((cudart.cudaMemcpy(host.ctypes.data, int(ptr) + nbytes - 64, 64,
                               cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)[0], None), "cudaMemcpy")
        if not (host == 0x5A).all():
            raise RuntimeError(f"{alloc_kind} allocation did not hold the memset value")
        if alloc_kind == "sync":
            _ok((cudart.cudaFree(ptr)[0], None), "cudaFree")
        else:
            _ok((cudart.cudaFreeAsync(ptr, stream)[0], None), "cudaFreeAsync")
            _ok((cudart.cudaStreamSynchronize(stream)[0], None), "cudaStreamSynchronize")

    def set_threshold(value: int) -> None:
        _ok((cudart.cudaMemPoolSetAttribute(pool, cudart.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold,
                                            driver.cuuint64_t(value))[0], None), "cudaMemPoolSetAttribute")

    out = []
    for nbytes in sizes:
        row = {"bytes": nbytes}
        # cudaMalloc / cudaFree, synchronous
        ma, fr = [], []
        for r in range(reps + 2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            ptr = _ok(cudart.cudaMalloc(nbytes), "cudaMalloc")
            t1 = time.perf_counter()
            _ok((cudart.cudaFree(ptr)[0], None), "cudaFree")
            t2 = time.perf_counter()
            if r >= 2:
                ma.append((t1 - t0) * 1e6)
                fr.append((t2 - t1) * 1e6)
        row["cudaMalloc_us"] = _quantiles(ma)
        row["cudaFree_us"] = _quantiles(fr)
        # cudaMallocAsync from the default pool, threshold 0: the pool shrinks at each sync
        for label, threshold in (("threshold0", 0), ("threshold_max", 2**64 - 1)):
            set_threshold(threshold)
            ma, fr = [], []
            for r in range(reps + 2):
                _ok((cudart.cudaStreamSynchronize(stream)[0], None), "cudaStreamSynchronize")
                t0 = time.perf_counter()
                ptr = _ok(cudart.cudaMallocAsync(nbytes, stream), "cudaMallocAsync")
                t1 = time.perf_counter()
                _ok((cudart.cudaFreeAsync(ptr, stream)[0], None), "cudaFreeAsync")
                t2 = time.perf_counter()
                if r >= 2:
                    ma.append((t1 - t0) * 1e6)
                    fr.append((t2 - t1) * 1e6)
            _ok((cudart.cudaStreamSynchronize(stream)[0], None), "cudaStreamSynchronize")
            row[f"cudaMallocAsync_{label}_us"] = _quantiles(ma)
            row[f"cudaFreeAsync_{label}_us"] = _quantiles(fr)
        set_threshold(0)
        _ok((cudart.cudaMemPoolTrimTo(pool, 0)[0], None), "cudaMemPoolTrimTo")
        # caching allocator hit: the block is in the cache from the warm-up
        keep = torch.cuda.caching_allocator_alloc(nbytes)
        torch.cuda.caching_allocator_delete(keep)
        hit, hit_free, empty_hit = [], [], []
        for r in range(reps + 2):
            t0 = time.perf_counter()
            p = torch.cuda.caching_allocator_alloc(nbytes)
            t1 = time.perf_counter()
            torch.cuda.caching_allocator_delete(p)
            t2 = time.perf_counter()
            x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            t3 = time.perf_counter()
            del x
            if r >= 2:
                hit.append((t1 - t0) * 1e6)
                hit_free.append((t2 - t1) * 1e6)
                empty_hit.append((t3 - t2) * 1e6)
        row["cache_hit_alloc_us"] = _quantiles(hit)
        row["cache_hit_free_us"] = _quantiles(hit_free)
        row["torch_empty_hit_us"] = _quantiles(empty_hit)
        # caching allocator miss: empty_cache first, so the request goes to cudaMalloc
        miss = []
        for r in range(reps + 2):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            t0 = time.perf_counter()
            x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            t1 = time.perf_counter()
            del x
            if r >= 2:
                miss.append((t1 - t0) * 1e6)
        row["torch_empty_miss_us"] = _quantiles(miss)
        torch.cuda.empty_cache()
        out.append(row)
    return {"sizes_bytes": sizes, "reps": reps, "rows": out}


def run(torch) -> dict:
    if not torch.cuda.is_available():
        raise RuntimeError("caching_allocator needs a CUDA GPU")
    traces = {name: _trace_in_subprocess(conf) for name, conf in CONFIGS.items()}
    for name, rec in traces.items():
        last = rec["steps"][-1]
        if last["allocated_bytes"] != 0:
            raise RuntimeError(f"{name}: allocated bytes not 0 after the trace: {last}")
    _verify_fills(torch)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    sizes = [4 * KiB * 4**k for k in range(10)]  # 4 KiB, 16 KiB, ..., 1 GiB
    costs = raw_allocation_costs(torch, sizes, reps=15)
    return {
        "trace": [list(op) for op in TRACE],
        "configs": CONFIGS,
        "stat_keys": STAT_KEYS,
        "traces": traces,
        "allocation_costs": costs,
        "torch_version": torch.__version__,
    }


if __name__ == "__main__" and "--trace" in sys.argv:
    import torch as _torch

    print(json.dumps(replay_trace(_torch)))
