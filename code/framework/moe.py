"""Expert-parallel bookkeeping for a top-k MoE layer: capacity, dropped tokens, per-expert load and the
bytes of the dispatch/combine all-to-alls. Checked by tests/test_framework_parallel.py; embedded by
docs/framework/expert-parallel.md."""
from __future__ import annotations

import math

import torch


# --8<-- [start:capacity]
def capacity(tokens: int, experts: int, k: int, factor: float) -> int:
    """Slots per expert: factor x the perfectly balanced share of the tokens * k assignments."""
    return math.ceil(factor * tokens * k / experts)


def route_and_drop(logits: torch.Tensor, k: int, factor: float):
    """Top-k routing with a fixed capacity. Assignments beyond an expert's capacity are dropped
    (first come, first served in token order). Returns per-expert load and the number dropped."""
    T, E = logits.shape
    cap = capacity(T, E, k, factor)
    experts = logits.topk(k, dim=-1).indices.reshape(-1)  # (T*k,) in token order
    onehot = torch.nn.functional.one_hot(experts, E)
    position = onehot.cumsum(0)[torch.arange(T * k), experts] - 1  # arrival index at its expert
    kept = position < cap
    load = onehot.sum(0)
    return load, int((~kept).sum()), cap
# --8<-- [end:capacity]


# --8<-- [start:a2a]
def a2a_bytes_per_rank(tokens_per_rank: int, k: int, h: int, ep: int, dispatch_bytes: int = 2,
                       combine_bytes: int = 2, uniform: bool = True) -> dict:
    """Bytes one rank sends in one MoE layer's forward: each of its tokens goes to k experts; with uniform
    routing a fraction (ep-1)/ep of those copies live on other ranks. Backward sends the same again."""
    remote = (ep - 1) / ep if uniform else 1.0
    return {"dispatch": tokens_per_rank * k * h * dispatch_bytes * remote,
            "combine": tokens_per_rank * k * h * combine_bytes * remote}
# --8<-- [end:a2a]


def imbalance(load: torch.Tensor, ep: int) -> float:
    """max / mean tokens per EP rank (experts split contiguously): the MoE layer runs at the slowest rank."""
    per_rank = load.reshape(ep, -1).sum(1).double()
    return float(per_rank.max() / per_rank.mean())
