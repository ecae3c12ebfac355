"""Counting models of the scan, compaction and histogram kernels of docs/operator/scan.md and histogram.md.

Each function runs the kernel's schedule on NumPy arrays, step by step, and counts what the page derives:
the steps (rounds separated by a barrier) and the additions of the Kogge-Stone, Brent-Kung and coarsened
block scans, the words a multi-block scan moves through global memory, and the atomic operations a
histogram issues with and without aggregation. tests/test_operator_patterns.py checks every count against
its closed form and every result against numpy/torch; the labs notebooks/operator/scan-lab.ipynb and
histogram-lab.ipynb use the same functions next to their Triton kernels.
"""
from __future__ import annotations

import math

import numpy as np


# --8<-- [start:kogge-stone]
def kogge_stone(x):
    """Inclusive scan as a Kogge-Stone block scan runs it: in step k every element i >= d = 2^k adds the
    element d to its left, all at once (the right-hand side is read before anything is written, which is
    the double buffer the kernel needs). Returns (scan, steps, additions)."""
    y = np.array(x, copy=True)
    n, steps, adds, d = len(y), 0, 0, 1
    while d < n:
        y[d:] = y[d:] + y[:-d]
        steps, adds, d = steps + 1, adds + (n - d), 2 * d
    return y, steps, adds


def kogge_stone_counts(n: int) -> tuple[int, int]:
    """Closed form: ceil(log2 n) steps; step k adds n - 2^k, so n*steps - (2^steps - 1) additions."""
    steps = math.ceil(math.log2(n)) if n > 1 else 0
    return steps, n * steps - (2**steps - 1)
# --8<-- [end:kogge-stone]


# --8<-- [start:brent-kung]
def brent_kung(x):
    """Inclusive scan as a Brent-Kung block scan runs it. Up-sweep (a reduction tree): at stride d the
    elements i = 2d-1, 4d-1, ... add the element d to their left. Down-sweep (the distribution tree): at
    stride d, from the largest down to 1, the elements i = 3d-1, 5d-1, ... add the element d to their
    left, which by then holds a complete prefix. Returns (scan, steps, additions)."""
    y = np.array(x, copy=True)
    n, steps, adds, d = len(y), 0, 0, 1
    while d < n:
        i = np.arange(2 * d - 1, n, 2 * d)
        y[i] += y[i - d]
        steps, adds, d = steps + 1, adds + len(i), 2 * d
    d //= 4
    while d >= 1:
        i = np.arange(3 * d - 1, n, 2 * d)
        if len(i):
            y[i] += y[i - d]
            steps, adds = steps + 1, adds + len(i)
        d //= 2
    return y, steps, adds


def brent_kung_counts(n: int) -> tuple[int, int]:
    """Closed form for n = 2^m: m up-sweep steps with n - 1 additions, m - 1 down-sweep steps with
    n - 1 - m additions; in all 2m - 1 steps and 2n - 2 - m additions."""
    m = n.bit_length() - 1
    assert n == 1 << m, "the closed form is for powers of two"
    return max(0, 2 * m - 1), 2 * n - 2 - m
# --8<-- [end:brent-kung]


# --8<-- [start:coarsened]
def coarsened_scan(x, threads: int):
    """The three-phase scan of PMPP §11.5 with `threads` threads, each owning a contiguous section of
    c = ceil(n / threads) elements. Phase 1: every thread scans its section sequentially. Phase 2: a
    Kogge-Stone scan of the section totals (the sections' last elements). Phase 3: every thread adds the
    total of all earlier sections to its elements except the last, which phase 2 already completed.
    Returns (scan, steps, additions); a step is one addition per thread (phases 1 and 3) or one
    Kogge-Stone round (phase 2)."""
    y = np.array(x, copy=True)
    n = len(y)
    c = -(-n // threads)
    sections = [slice(s, min(s + c, n)) for s in range(0, n, c)]
    adds = 0
    for s in sections:  # phase 1, all threads in parallel: c - 1 steps
        y[s] = np.cumsum(y[s])
        adds += len(y[s]) - 1
    lasts = np.array([s.stop - 1 for s in sections])
    y[lasts], ks_steps, ks_adds = kogge_stone(y[lasts])  # phase 2
    adds += ks_adds
    for k, s in enumerate(sections[1:], start=1):  # phase 3: c - 1 steps
        body = slice(s.start, s.stop - 1)
        y[body] += y[lasts[k - 1]]
        adds += s.stop - 1 - s.start
    return y, 2 * (c - 1) + ks_steps, adds


def coarsened_counts(n: int, threads: int) -> tuple[int, int]:
    """Closed form for n = threads * c: 2(c - 1) + log2(threads) steps; T(c-1) + KS(T) + (T-1)(c-1)
    additions, which is about 2n once c is larger than log2(threads)."""
    c = n // threads
    assert c * threads == n
    ks_steps, ks_adds = kogge_stone_counts(threads)
    return 2 * (c - 1) + ks_steps, threads * (c - 1) + ks_adds + (threads - 1) * (c - 1)
# --8<-- [end:coarsened]


# --8<-- [start:traffic]
# Global-memory words each multi-block scan moves per input element (reads + writes of the n-element
# arrays; the per-block sums are about n / tile words and are left out).
SCAN_TRAFFIC = {
    "scan-then-propagate": 4,  # scan each tile, write it and its sum (r n, w n); add the offsets (r n, w n)
    "reduce-then-scan": 3,     # sum each tile (r n); scan the sums; scan each tile again with its offset (r n, w n)
    "single-pass": 2,          # chained / decoupled look-back: read n, write n
}


def scan_bytes(method: str, n: int, itemsize: int = 4) -> int:
    return SCAN_TRAFFIC[method] * n * itemsize
# --8<-- [end:traffic]


# --8<-- [start:compact]
def compact(x, keep):
    """Stream compaction as scan + scatter: the exclusive scan of the 0/1 flags is each kept element's
    output position; the last inclusive value is how many were kept."""
    flags = np.asarray(keep, dtype=np.int64)
    pos = np.cumsum(flags) - flags  # exclusive scan
    out = np.empty(int(flags.sum()), dtype=np.asarray(x).dtype)
    out[pos[flags == 1]] = np.asarray(x)[flags == 1]  # scatter
    return out
# --8<-- [end:compact]


# --8<-- [start:histogram]
def atomics_per_element(bins) -> int:
    """The basic kernel: one atomic add per element."""
    return len(bins)


def atomics_match_any(bins, warp: int = 32) -> int:
    """__match_any_sync aggregation: per warp of consecutive elements, one atomic per distinct bin."""
    bins = np.asarray(bins)
    return sum(len(np.unique(bins[s:s + warp])) for s in range(0, len(bins), warp))


def atomics_run_aggregated(bins, chunk: int) -> int:
    """PMPP §9.6 aggregation in a coarsened thread that walks `chunk` consecutive elements: it keeps the
    current bin and a count, and issues an atomic only when the bin changes (and once at the end)."""
    bins = np.asarray(bins)
    total = 0
    for s in range(0, len(bins), chunk):
        part = bins[s:s + chunk]
        total += 1 + int(np.count_nonzero(part[1:] != part[:-1])) if len(part) else 0
    return total


def max_same_address(bins, warp: int = 32) -> int:
    """The worst contention inside one warp: how many lanes hit the same bin (those atomics serialize)."""
    bins = np.asarray(bins)
    return max(int(np.bincount(bins[s:s + warp]).max()) for s in range(0, len(bins), warp))
# --8<-- [end:histogram]
