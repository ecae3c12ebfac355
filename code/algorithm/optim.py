"""Initialisation and optimiser formulas of docs/algorithm/optimization.md, written out by hand.

tests/test_algorithm_optimization.py checks the variance claims of Xavier/Kaiming by propagating
signals through deep random networks, and the update rules against torch.optim.
"""
from __future__ import annotations

import math

import torch


# --8<-- [start:init]
def second_moments_through_depth(std_fn, act, depth=30, width=256, batch=512, seed=0):
    """Push a unit-variance batch through `depth` random linear layers W ~ N(0, std^2) with
    std = std_fn(fan_in, fan_out), applying `act` after each. Returns E[h^2] after every layer."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, width, generator=g, dtype=torch.float64)
    out = []
    for _ in range(depth):
        w = torch.randn(width, width, generator=g, dtype=torch.float64) * std_fn(width, width)
        h = act(h @ w)
        out.append(h.pow(2).mean().item())
    return out


def xavier_std(fan_in, fan_out):
    return math.sqrt(2.0 / (fan_in + fan_out))     # Var = 2 / (fan_in + fan_out)


def kaiming_std(fan_in, fan_out):
    return math.sqrt(2.0 / fan_in)                 # Var = 2 / fan_in, for ReLU
# --8<-- [end:init]


# --8<-- [start:adam]
def adam_step(p, grad, state, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    """One Adam (decoupled=False: L2 added to the gradient) or AdamW (decoupled=True) step, in place."""
    b1, b2 = betas
    state["t"] = state.get("t", 0) + 1
    t = state["t"]
    if decoupled:
        p.mul_(1 - lr * weight_decay)              # AdamW: shrink the weights directly
    elif weight_decay:
        grad = grad + weight_decay * p             # Adam + L2: decay goes through m and v
    m = state["m"] = b1 * state.get("m", torch.zeros_like(p)) + (1 - b1) * grad
    v = state["v"] = b2 * state.get("v", torch.zeros_like(p)) + (1 - b2) * grad * grad
    m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)   # bias correction of the zero init
    p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
    return p


def sgd_momentum_step(p, grad, state, lr, momentum=0.9, weight_decay=0.0):
    """PyTorch's convention: buf = mu * buf + g; p -= lr * buf (no dampening)."""
    grad = grad + weight_decay * p
    buf = state["buf"] = grad.clone() if "buf" not in state else momentum * state["buf"] + grad
    p.sub_(lr * buf)
    return p
# --8<-- [end:adam]


# --8<-- [start:schedule]
def warmup_cosine(step, peak_lr, warmup, total, min_lr=0.0):
    """Linear warm-up from 0 to peak_lr over `warmup` steps, then cosine decay to min_lr at `total`."""
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * progress))
# --8<-- [end:schedule]
