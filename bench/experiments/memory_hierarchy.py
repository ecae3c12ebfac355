"""The GPU's memory hierarchy measured level by level: load-to-use latency by pointer chasing over
working sets from 4 KiB to 4 GiB, TLB reach by touching one line per 2 MiB page, and read bandwidth
by working-set size, next to the cache sizes the driver reports.

Method (kernels in code/hardware/memory_probe.py):
- latency: one thread follows a random single cycle through one slot per 128-byte line of the working
  set; the time per step is the slope between a chase of S and of 2S steps (launch cost cancels);
  sets up to 128 MiB are walked once in full first, and each walk continues where the last stopped;
- TLB: the same chase over one 128-byte line in each of P pages of 2 MiB, loading with .cg so every
  step is served by L2 (the footprint, P lines, always fits there), for P = 1 … 8192; the latency
  steps up above the L2 latency where P × 2 MiB passes a TLB's reach;
- bandwidth: SMs × 4 programs each read the whole working set (fp32, 1024-element blocks), starting
  spread apart; bytes read / time, after a warm-up pass.
Correctness first: each chase's final index is checked against the host walk of the same pattern for
the smaller working sets, and the read kernel's sums against torch.sum.

Run: python -m bench.experiments memory_hierarchy
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

TITLE = "GPU 存储层级：指针追逐的每级延迟、2 MiB 页的 TLB 覆盖范围与按工作集大小的读带宽"
USED_BY = ["docs/hardware/memory.md", "notebooks/hardware/memory-hierarchy-lab.ipynb"]

ROOT = Path(__file__).resolve().parents[2]
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
LAT_SIZES = [4 * KiB << k for k in range(21)]                      # 4 KiB … 4 GiB
TLB_PAGES = [1 << k for k in range(16)]                            # 1 … 32768 pages of 2 MiB (64 GiB)
BW_SIZES = [16 * KiB, 64 * KiB, 128 * KiB, 192 * KiB, 256 * KiB, 512 * KiB, 1 * MiB, 4 * MiB, 16 * MiB,
            32 * MiB, 48 * MiB, 64 * MiB, 128 * MiB, 256 * MiB, 1 * GiB]
STEPS = 1 << 14


def _probe():
    sys.path.insert(0, str(ROOT / "code" / "hardware"))
    import memory_probe

    return memory_probe


def _time_ms(torch, fn, reps: int = 3) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = math.inf
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def _chase_ns(torch, mp, nxt, first: int, steps: int, warm: int, skip_l1: bool = False) -> float:
    """ns per dependent load: the slope between walks of S and 2S steps (launch cost cancels). `warm`
    steps go first; every walk continues where the previous one stopped, so a walk over a set larger
    than the caches keeps touching lines it has not touched recently."""
    out = torch.empty(1, dtype=nxt.dtype, device=nxt.device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    pos = first

    def walk(n):
        nonlocal pos
        start.record()
        mp.chase_kernel[(1,)](nxt, out, pos, n, SKIP_L1=skip_l1, num_warps=1)
        end.record()
        end.synchronize()
        pos = int(out.item())
        return start.elapsed_time(end)

    walk(16)                                   # compile and load the kernel
    if warm:
        walk(warm)
    t1 = min(walk(steps) for _ in range(3))
    t2 = min(walk(2 * steps) for _ in range(3))
    return (t2 - t1) * 1e6 / steps


def _props(torch) -> dict:
    p = torch.cuda.get_device_properties(0)
    out = {"name": p.name, "sms": p.multi_processor_count, "total_memory_bytes": p.total_memory}
    for key in ("L2_cache_size", "shared_memory_per_multiprocessor", "shared_memory_per_block_optin",
                "max_threads_per_multi_processor", "regs_per_multiprocessor"):
        if hasattr(p, key):
            out[key] = getattr(p, key)
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        out["sm_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
        out["mem_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
    except Exception as exc:  # noqa: BLE001 - NVML is optional; say why it is missing
        out["nvml"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def _sm_clock(torch):
    try:
        return torch.cuda.clock_rate(0)
    except Exception:  # noqa: BLE001
        return None


def run(torch) -> dict:
    if not torch.cuda.is_available():
        raise RuntimeError("memory_hierarchy needs a CUDA GPU")
    mp = _probe()
    dev = "cuda"
    props = _props(torch)

    latency = []
    for size in LAT_SIZES:
        nxt, first = mp.chase_pattern(torch, size, dev, seed=size)
        if size <= 4 * MiB:  # the host walk is cheap here: check the device walk lands on the same index
            got = mp.chase(torch, nxt, 3000, first)
            want = mp.chase_reference(nxt.cpu().numpy(), 3000, first)
            if got != want:
                raise RuntimeError(f"chase over {size} B ended on {got}, the host walk on {want}")
        slots = size // mp.LINE
        warm = slots if slots <= 1 << 20 else 0     # up to 128 MiB: one full cycle first, so what fits is cached
        ns = _chase_ns(torch, mp, nxt, first, STEPS, warm)
        latency.append({"bytes": size, "ns": round(ns, 2), "warm_steps": warm, "sm_clock_mhz": _sm_clock(torch)})
        del nxt
        torch.cuda.empty_cache()

    tlb = []
    for pages in TLB_PAGES:
        nxt, first = mp.page_pattern(torch, pages, dev, seed=pages)
        if pages <= 64:
            got = mp.chase(torch, nxt, 500, first)
            want = mp.chase_reference(nxt.cpu().numpy(), 500, first)
            if got != want:
                raise RuntimeError(f"page chase over {pages} pages ended on {got}, the host walk on {want}")
        ns = _chase_ns(torch, mp, nxt, first, 1 << 13, warm=pages, skip_l1=True)
        tlb.append({"pages": pages, "span_bytes": pages * 2 * MiB, "ns": round(ns, 2)})
        del nxt
        torch.cuda.empty_cache()

    programs = props["sms"] * 4
    bandwidth = []
    for size in BW_SIZES:
        x = torch.rand(size // 4, device=dev)
        check = mp.read_all(torch, x, programs, 1)
        torch.testing.assert_close(check, torch.full_like(check, float(x.sum())), rtol=1e-3, atol=1e-2)
        reps = max(1, math.ceil(20e9 / (programs * size)))
        ms = _time_ms(torch, lambda: mp.read_all(torch, x, programs, reps))
        bandwidth.append({"bytes": size, "reps": reps, "programs": programs,
                          "gb_per_s": round(programs * size * reps / (ms * 1e-3) / 1e9, 1)})
        del x
        torch.cuda.empty_cache()

    # a device-to-device copy as the streaming reference (reads n and writes n bytes)
    a = torch.empty(2 * GiB // 4, device=dev)
    b = torch.empty_like(a)
    b.copy_(a)
    ms = _time_ms(torch, lambda: b.copy_(a), reps=5)
    copy_gbs = round(2 * a.numel() * 4 / (ms * 1e-3) / 1e9, 1)
    return {"device": props, "steps": STEPS, "latency": latency, "tlb": tlb, "bandwidth": bandwidth,
            "copy_2gib_read_plus_write_gb_per_s": copy_gbs, "line_bytes": mp.LINE,
            "torch": torch.__version__}
