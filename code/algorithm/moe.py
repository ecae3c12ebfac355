"""Mixture-of-experts routing (docs/algorithm/moe.md, notebooks/algorithm/moe-routing.ipynb):
top-k gating, the Switch/GShard load-balancing loss, router z-loss, capacity-factor token
dropping and DeepSeek's auxiliary-loss-free bias. Tested in tests/test_algorithm_moe.py.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:router]
def top_k_route(logits, k, bias=None):
    """logits: (T, E). Choose experts by logits (+ bias, used only for choosing), weight them by
    a softmax over the chosen k logits. Returns indices (T, k), gates (T, k), probs (T, E)."""
    probs = torch.softmax(logits, dim=-1)
    choose = logits if bias is None else logits + bias
    idx = choose.topk(k, dim=-1).indices
    gates = torch.softmax(logits.gather(-1, idx), dim=-1)
    return idx, gates, probs


def load_balancing_loss(probs, idx, n_experts):
    """Switch Transformer / GShard: E * sum_i f_i P_i, f_i = share of routing slots that went
    to expert i, P_i = mean router probability of expert i. Equals 1 when both are uniform."""
    f = torch.bincount(idx.flatten(), minlength=n_experts).float() / idx.numel()
    p = probs.mean(0)
    return n_experts * (f * p).sum()


def router_z_loss(logits):
    """ST-MoE: mean over tokens of logsumexp(logits)^2, keeps router logits small."""
    return torch.logsumexp(logits, dim=-1).pow(2).mean()
# --8<-- [end:router]


# --8<-- [start:capacity]
def capacity(n_tokens, n_experts, k, factor):
    """Slots per expert: ceil(factor * T * k / E)."""
    return math.ceil(factor * n_tokens * k / n_experts)


def dispatch_mask(idx, n_experts, cap):
    """keep[t, j] = True if token t's j-th choice fits in its expert's buffer. Slots are filled
    by choice rank first (all first choices, then second choices), in token order within a rank."""
    T, k = idx.shape
    keep = torch.zeros(T, k, dtype=torch.bool)
    used = torch.zeros(n_experts, dtype=torch.long)
    for j in range(k):
        onehot = F.one_hot(idx[:, j], n_experts)                        # (T, E)
        position = used[None, :] + onehot.cumsum(0) - 1                 # slot each token would take
        pos_t = (position * onehot).sum(-1)
        keep[:, j] = pos_t < cap
        used += (onehot * keep[:, j, None]).sum(0)
    return keep
# --8<-- [end:capacity]


# --8<-- [start:layer]
class MoE(nn.Module):
    def __init__(self, d, d_ff, n_experts, k, n_shared=0):
        super().__init__()
        self.k, self.n_experts = k, n_experts
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))
                                     for _ in range(n_experts))
        self.shared = nn.ModuleList(nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))
                                    for _ in range(n_shared))
        self.register_buffer("bias", torch.zeros(n_experts))          # aux-loss-free balancing

    def forward(self, x, capacity_factor=None, use_bias=False):
        """x: (T, d). Gather the tokens of each expert, run it once, scatter back weighted."""
        logits = self.router(x)
        idx, gates, probs = top_k_route(logits, self.k, self.bias if use_bias else None)
        keep = torch.ones_like(idx, dtype=torch.bool)
        if capacity_factor is not None:
            keep = dispatch_mask(idx, self.n_experts, capacity(x.shape[0], self.n_experts, self.k, capacity_factor))
        out = sum(e(x) for e in self.shared) if self.shared else torch.zeros_like(x)
        for e in range(self.n_experts):
            tok, slot = torch.nonzero((idx == e) & keep, as_tuple=True)
            if tok.numel():
                out = out.index_add(0, tok, gates[tok, slot, None] * self.experts[e](x[tok]))
        self.last = dict(logits=logits, idx=idx, probs=probs, keep=keep)
        return out

    def aux_loss(self):
        return load_balancing_loss(self.last["probs"], self.last["idx"], self.n_experts)

    @torch.no_grad()
    def update_bias(self, gamma=1e-3):
        """DeepSeek-V3: raise the bias of under-loaded experts, lower it for over-loaded ones."""
        load = torch.bincount(self.last["idx"].flatten(), minlength=self.n_experts).float()
        self.bias += gamma * torch.sign(load.mean() - load)
# --8<-- [end:layer]
