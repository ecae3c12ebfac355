"""Per-GPU link traffic of an all-reduce: the ring over point-to-point links against NVLink SHARP (NVLS),
where the NVSwitch reduces (multimem.ld_reduce) and multicasts (multimem.st); and a model of PyTorch
SymmetricMemory's pipelined all-gather + matmul.

Every transfer is simulated explicitly on NumPy arrays and its bytes are added to the link it crosses, so
the closed forms (``ring_bytes``, ``nvls_bytes``) are checked against a brute-force count, and the reduced
values against a plain sum. Checked by tests/test_runtime_nvls.py; embedded in docs/runtime/nccl-advanced.md.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np


def _slices(n: int, p: int) -> list[slice]:
    """Split n elements into p contiguous slices (the first n % p get one element more)."""
    bounds = np.cumsum([0] + [n // p + (i < n % p) for i in range(p)])
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


# --8<-- [start:ring]
def ring_allreduce(x: list[np.ndarray]) -> tuple[list[np.ndarray], list[int], list[int]]:
    """Ring reduce-scatter then all-gather; returns results and the bytes each GPU sends and receives."""
    p, n = len(x), x[0].size
    item = x[0].itemsize
    buf = [v.copy() for v in x]
    sl = _slices(n, p)
    sent, recv = [0] * p, [0] * p
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(p - 1):
            # rank r sends chunk (r - s) (RS) or (r + 1 - s) (AG) to r + 1, all ranks at the same time
            msgs = []
            for r in range(p):
                c = (r - s) % p if phase == "reduce-scatter" else (r + 1 - s) % p
                msgs.append(((r + 1) % p, c, buf[r][sl[c]].copy()))
                sent[r] += msgs[-1][2].size * item
            for dst, c, data in msgs:
                recv[dst] += data.size * item
                if phase == "reduce-scatter":
                    buf[dst][sl[c]] += data
                else:
                    buf[dst][sl[c]] = data
    return buf, sent, recv
# --8<-- [end:ring]


# --8<-- [start:nvls]
def nvls_allreduce(x: list[np.ndarray]) -> tuple[list[np.ndarray], list[int], list[int]]:
    """NVLS all-reduce: GPU s owns slice s. multimem.ld_reduce makes the switch read slice s from every GPU
    (each GPU's uplink carries it once), add, and return one copy to s; multimem.st sends the sum up once
    and the switch multicasts it down to every GPU. Returns results and bytes sent/received per GPU link."""
    p, n = len(x), x[0].size
    item = x[0].itemsize
    out = [v.copy() for v in x]
    sent, recv = [0] * p, [0] * p
    for s, sl in enumerate(_slices(n, p)):
        m = (sl.stop - sl.start) * item
        for g in range(p):  # ld_reduce: the switch pulls slice s from every member, the owner included
            sent[g] += m
        total = sum(v[sl] for v in x)  # the addition happens inside the NVSwitch
        recv[s] += m  # reduced slice back to its owner
        sent[s] += m  # multimem.st: the owner pushes the result once ...
        for g in range(p):  # ... and the switch replicates it to every GPU
            recv[g] += m
            out[g][sl] = total
    return out, sent, recv
# --8<-- [end:nvls]


# --8<-- [start:formulas]
def ring_bytes(p: int, n_bytes: int) -> Fraction:
    """Bytes each GPU sends (and receives) in a ring all-reduce of n bytes: 2(p-1)/p * n."""
    return Fraction(2 * (p - 1), p) * n_bytes


def nvls_bytes(p: int, n_bytes: int) -> Fraction:
    """Bytes each GPU sends (and receives) in an NVLS all-reduce: n (reduce reads) + n/p (one store)."""
    return Fraction(p + 1, p) * n_bytes


def busbw_over_link(p: int, algo: str) -> Fraction:
    """nccl-tests' busbw (algbw * 2(p-1)/p) divided by the per-direction link bandwidth, when the link is the
    only limit: above 1 for NVLS, because the switch does part of the work."""
    per_gpu = ring_bytes(p, 1) if algo == "ring" else nvls_bytes(p, 1)
    return Fraction(2 * (p - 1), p) / per_gpu
# --8<-- [end:formulas]


# --8<-- [start:symm]
def fused_all_gather_matmul(shards: list[np.ndarray], b: np.ndarray) -> tuple[list[np.ndarray], list[list[int]]]:
    """Model of SymmetricMemory's pipelined all-gather + matmul (all_gather(A) @ B) on p ranks.

    Every rank copies its shard into its own symmetric buffer; after a barrier, rank r reads the peers'
    buffers in the order r+1, r+2, ... (peer loads or copy-engine copies over NVLink) and multiplies each
    shard as soon as it arrives, so the matmul of one shard overlaps the copy of the next. Returns each
    rank's product and the order in which it consumed the shards."""
    p = len(shards)
    symm = [s.copy() for s in shards]  # symm_mem.empty + rendezvous: one buffer per rank, mapped by all
    outs, orders = [], []
    for r in range(p):
        rows = shards[0].shape[0]
        out = np.empty((rows * p, b.shape[1]), dtype=np.result_type(shards[0], b))
        order = [r]
        out[r * rows:(r + 1) * rows] = shards[r] @ b  # own shard first: no communication needed
        for step in range(1, p):
            src = (r + step) % p
            chunk = symm[src].copy()  # read from the peer's symmetric buffer
            out[src * rows:(src + 1) * rows] = chunk @ b
            order.append(src)
        outs.append(out)
        orders.append(order)
    return outs, orders
# --8<-- [end:symm]
