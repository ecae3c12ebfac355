"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) on models given as functions
from a context to a next-token distribution (docs/framework/speculative-decoding.md)."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Dist = Callable[[Sequence[int]], np.ndarray]


# --8<-- [start:step]
def speculative_step(p: Dist, q: Dist, ctx: Sequence[int], k: int,
                     rng: np.random.Generator) -> tuple[list[int], int]:
    """One step: the draft q proposes k tokens, the target p checks them.

    Returns (new tokens, number of draft tokens accepted). Always yields between 1 and k+1
    tokens, each distributed exactly as sampling from p would give.
    """
    ctx = list(ctx)
    drafts, q_dists = [], []
    for _ in range(k):  # k cheap sequential draft steps
        qd = q(ctx + drafts)
        drafts.append(int(rng.choice(len(qd), p=qd)))
        q_dists.append(qd)
    # In a real engine these k+1 target distributions come from ONE forward pass.
    p_dists = [p(ctx + drafts[:i]) for i in range(k + 1)]
    out = []
    for i, x in enumerate(drafts):
        if rng.random() < min(1.0, p_dists[i][x] / q_dists[i][x]):
            out.append(x)  # accept
            continue
        residual = np.maximum(p_dists[i] - q_dists[i], 0.0)  # reject: resample from (p - q)+
        out.append(int(rng.choice(len(residual), p=residual / residual.sum())))
        return out, i
    out.append(int(rng.choice(len(p_dists[k]), p=p_dists[k])))  # all accepted: one bonus token
    return out, k
# --8<-- [end:step]


def generate(p: Dist, q: Dist, ctx: Sequence[int], n: int, k: int, rng: np.random.Generator) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        new, _ = speculative_step(p, q, list(ctx) + out, k, rng)
        out += new
    return out[:n]


# --8<-- [start:expected]
def acceptance_rate(p: np.ndarray, q: np.ndarray) -> float:
    """alpha = sum_x min(p(x), q(x)) = 1 - total variation distance."""
    return float(np.minimum(p, q).sum())


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """E[tokens per target pass] = 1 + alpha + ... + alpha^k (Leviathan et al., eq. 1)."""
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def walltime_speedup(alpha: float, k: int, c: float) -> float:
    """Speedup over plain decoding when one draft step costs c target steps."""
    return expected_tokens_per_step(alpha, k) / (k * c + 1)
# --8<-- [end:expected]


def bigram(table: np.ndarray) -> Dist:
    """A 'model' whose next-token distribution depends only on the last token."""
    return lambda ctx: table[ctx[-1]]
