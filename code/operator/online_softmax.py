"""A NumPy model of the CUDA kernel in code/operator/online-softmax.cu, row for row and thread for thread.

docs/operator/softmax.md embeds the `reference` section to show what the kernel does with a row that is
entirely masked (every logit -inf), and tests/test_operator_softmax.py checks it against torch.softmax:
partially masked rows must match, a fully masked row must come out as zeros (or NaN with the guard off).
Everything is float32, as on the GPU: each of the `threads` lanes of a row's block walks the columns
lane, lane + threads, ... keeping its own (m, d); the lanes' pairs are then merged by a butterfly, the
pattern of the kernel's __shfl_xor_sync rounds; the second pass writes exp(x - m) / d.
"""
from __future__ import annotations

import numpy as np

FLT_MAX = np.float32(np.finfo(np.float32).max)


# --8<-- [start:reference]
def md_merge(m_a, d_a, m_b, d_b):
    """Merge two partial results (max m, d = sum of exp(x - m)) onto their common max."""
    m = np.maximum(m_a, m_b)
    return m, d_a * np.exp(m_a - m) + d_b * np.exp(m_b - m)


def online_softmax(x, threads: int = 256, guard_empty_rows: bool = True) -> np.ndarray:
    """Row-wise softmax computed like online_softmax in online-softmax.cu (threads: a power of two).

    A row that is entirely -inf keeps the initial m = -FLT_MAX and ends with d = 0. Its second pass
    computes exp(-inf + FLT_MAX) * (1 / 0) = 0 * inf = NaN unless the guard replaces 1/d by 0 when
    d == 0, which makes the row all zeros, the convention of FlashAttention and PyTorch's SDPA.
    Partially masked rows are unaffected either way: their d >= 1, and each -inf adds exp(-inf) = 0."""
    x = np.asarray(x, dtype=np.float32)
    rows, cols = x.shape
    steps = -(-cols // threads)
    lanes = np.full((rows, steps * threads), -np.inf, dtype=np.float32)   # padding adds exp(-inf) = 0
    lanes[:, :cols] = x
    lanes = lanes.reshape(rows, steps, threads)
    m = np.full((rows, threads), -FLT_MAX, dtype=np.float32)
    d = np.zeros((rows, threads), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # np.where evaluates both sides
        for j in range(steps):                       # first pass: each lane's own (m, d)
            v = lanes[:, j, :]
            bigger = v > m
            d = np.where(bigger, d * np.exp(m - v) + np.float32(1), d + np.exp(v - m))
            m = np.where(bigger, v, m)
        offset = threads // 2
        while offset:                                # butterfly: lane i merges with lane i ^ offset
            partner = np.arange(threads) ^ offset
            m, d = md_merge(m, d, m[:, partner], d[:, partner])
            offset //= 2
        m, d = m[:, :1], d[:, :1]                    # every lane now holds the row's (m, d)
        if guard_empty_rows:
            inv_d = np.where(d > 0, np.float32(1) / d, np.float32(0))
        else:
            inv_d = np.float32(1) / d
        return np.exp(x - m) * inv_d                 # second pass
# --8<-- [end:reference]
