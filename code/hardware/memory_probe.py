"""GPU memory hierarchy probes in Triton: pointer-chase latency per working-set size, TLB reach by one
access per large page, and read bandwidth per working-set size.

The three access patterns are built here (host side, NumPy or torch) and the kernels walk them. Under
TRITON_INTERPRET=1 the same kernels run on the CPU, which is how the tests check that a chase visits
exactly the elements the pattern says; the timings only mean something on a GPU
(bench/experiments/memory_hierarchy.py).
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

LINE = 128          # bytes per cache line in NVIDIA GPUs' L1 and L2; the chase's stride unit


# --8<-- [start:patterns]
def chase_pattern(torch, working_set: int, device, seed: int = 0, stride: int = LINE):
    """An int32 tensor of working_set bytes in which the element at each visited slot holds the index of
    the next slot to visit: one slot per `stride` bytes, all slots linked in the order of one random
    permutation (a single cycle through all of them), so every load depends on the previous one and no
    prefetcher can guess the next line. Elements between slots are never read."""
    n = working_set // 4
    step = stride // 4
    slots = torch.arange(0, n, step, dtype=torch.int64, device=device)
    if slots.numel() < 2:
        raise ValueError(f"working set {working_set} B holds fewer than two {stride}-byte slots")
    g = torch.Generator(device=device).manual_seed(seed)
    order = slots[torch.randperm(slots.numel(), generator=g, device=device)]
    nxt = torch.zeros(n, dtype=torch.int32, device=device)
    nxt[order] = torch.roll(order, -1).to(torch.int32)
    return nxt, int(order[0])


def page_pattern(torch, pages: int, device, page: int = 2 << 20, seed: int = 0):
    """An int64 tensor spanning `pages` pages in which one 128-byte line per page is visited, in random
    order: the cache footprint is pages × 128 B (it stays in L2), but every access needs a different
    address translation, so the latency rises once `pages` exceeds what the TLBs cover. The line used
    inside each page moves with the page index so the lines do not all fall into the same cache set."""
    per_page = page // 8
    lines_per_page = page // LINE
    p = torch.arange(pages, dtype=torch.int64, device=device)
    pos = p * per_page + ((p * 7) % lines_per_page) * (LINE // 8)
    g = torch.Generator(device=device).manual_seed(seed)
    order = pos[torch.randperm(pages, generator=g, device=device)]
    nxt = torch.zeros(pages * per_page, dtype=torch.int64, device=device)
    nxt[order] = torch.roll(order, -1)
    return nxt, int(order[0])
# --8<-- [end:patterns]


# --8<-- [start:kernels]
@triton.jit
def chase_kernel(nxt_ptr, out_ptr, start, steps, SKIP_L1: tl.constexpr):
    """One program, one dependent load after another: the time per step is the load-to-use latency.
    SKIP_L1 loads with .cg (cache in L2 only), so every step pays at least the L2 latency."""
    idx = start.to(tl.int64)                    # int64 either way: the page chase spans more than 2^31 elements
    for _ in range(steps):
        if SKIP_L1:
            idx = tl.load(nxt_ptr + idx, cache_modifier=".cg").to(tl.int64)
        else:
            idx = tl.load(nxt_ptr + idx).to(tl.int64)
    tl.store(out_ptr, idx)                      # the final index, so the loop cannot be removed


@triton.jit
def read_kernel(x_ptr, out_ptr, n, reps, spread, BLOCK: tl.constexpr):
    """Every program reads the whole working set `reps` times. The per-SM footprint is the working set,
    so small sets hit L1, sets under the L2 size hit L2 and larger ones stream from HBM. The programs
    start `spread` blocks apart, so a block one program has just read is read by the next only after
    the whole set has gone by (otherwise a set larger than L2 would still be served from L2)."""
    pid = tl.program_id(0)
    nblocks = tl.cdiv(n, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(reps):
        for b in range(nblocks):
            blk = (b + pid * spread) % nblocks
            offs = blk * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc))
# --8<-- [end:kernels]


def chase(torch, nxt, steps: int, start: int = 0, skip_l1: bool = False) -> int:
    """Run the chase on nxt's device and return the index it ends on."""
    out = torch.empty(1, dtype=nxt.dtype, device=nxt.device)
    chase_kernel[(1,)](nxt, out, start, steps, SKIP_L1=skip_l1, num_warps=1)
    return int(out.item())


def chase_reference(nxt, steps: int, start: int = 0) -> int:
    """The same walk on the host, one index at a time."""
    nxt = np.asarray(nxt)
    idx = start
    for _ in range(steps):
        idx = int(nxt[idx])
    return idx


def read_all(torch, x, programs: int, reps: int, block: int = 1024):
    out = torch.empty(programs, dtype=torch.float32, device=x.device)
    nblocks = -(-x.numel() // block)
    read_kernel[(programs,)](x, out, x.numel(), reps, max(1, nblocks // programs), BLOCK=block, num_warps=4)
    return out
