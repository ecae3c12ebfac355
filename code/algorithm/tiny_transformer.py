"""A decoder-only Transformer written from nn.Linear up (docs/algorithm/transformer.md,
notebooks/algorithm/transformer-from-scratch.ipynb).

One attention module covers MHA (n_kv = n_h), GQA (1 < n_kv < n_h) and MQA (n_kv = 1);
RoPE, Pre-LN with RMSNorm, SwiGLU FFN, and a KV cache for incremental decoding.
Tested in tests/test_algorithm_transformer.py.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:attention]
def attention(q, k, v, causal=True):
    """q: (B, H, T, d_h); k, v: (B, H, S, d_h), S >= T, the last T keys being the queries' own
    positions (S > T when earlier keys come from a KV cache)."""
    T, S = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])       # (B, H, T, S)
    if causal:   # query i sits at absolute position S - T + i and sees keys 0 .. S - T + i
        allowed = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=S - T)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
# --8<-- [end:attention]


# --8<-- [start:rope]
def rope_cos_sin(positions, d_h, theta=10000.0):
    """Angles m * theta^(-2i/d_h) for pair i; returned duplicated to d_h (rotate-half layout)."""
    inv_freq = theta ** (-torch.arange(0, d_h, 2, dtype=torch.float32) / d_h)   # (d_h/2,)
    ang = positions.float()[:, None] * inv_freq[None, :]                        # (T, d_h/2)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """Rotate pairs (x_i, x_{i + d_h/2}) by the angle of their position: x * cos + rot(x) * sin."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
# --8<-- [end:rope]


# --8<-- [start:gqa]
class Attention(nn.Module):
    def __init__(self, d, n_heads, n_kv_heads):
        super().__init__()
        assert d % n_heads == 0 and n_heads % n_kv_heads == 0
        self.n_h, self.n_kv, self.d_h = n_heads, n_kv_heads, d // n_heads
        self.wq = nn.Linear(d, n_heads * self.d_h, bias=False)
        self.wk = nn.Linear(d, n_kv_heads * self.d_h, bias=False)
        self.wv = nn.Linear(d, n_kv_heads * self.d_h, bias=False)
        self.wo = nn.Linear(n_heads * self.d_h, d, bias=False)

    def forward(self, x, cos, sin, cache=None):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_h, self.d_h).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv, self.d_h).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv, self.d_h).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:            # store only n_kv heads: this is what GQA/MQA save
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        g = self.n_h // self.n_kv        # each K/V head serves g query heads
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        out = attention(q, k, v, causal=True)
        return self.wo(out.transpose(1, 2).reshape(B, T, self.n_h * self.d_h))
# --8<-- [end:gqa]


# --8<-- [start:block]
class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-LN: normalise the branch input, add the branch output to the untouched stream."""
    def __init__(self, d, n_heads, n_kv_heads, d_ff):
        super().__init__()
        self.norm1, self.attn = RMSNorm(d), Attention(d, n_heads, n_kv_heads)
        self.norm2, self.ffn = RMSNorm(d), SwiGLU(d, d_ff)

    def forward(self, x, cos, sin, cache=None):
        x = x + self.attn(self.norm1(x), cos, sin, cache)
        return x + self.ffn(self.norm2(x))
# --8<-- [end:block]


# --8<-- [start:model]
class TinyLM(nn.Module):
    def __init__(self, vocab, d=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=172, rope_theta=10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, n_heads, n_kv_heads, d_ff) for _ in range(n_layers))
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.d_h, self.rope_theta = d // n_heads, rope_theta

    def forward(self, idx, caches=None, start_pos=0):
        T = idx.shape[1]
        cos, sin = rope_cos_sin(torch.arange(start_pos, start_pos + T), self.d_h, self.rope_theta)
        x = self.embed(idx)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))

    @torch.no_grad()
    def generate(self, idx, n_new):
        """Greedy decoding with a KV cache: one prefill, then one token per step."""
        caches = [{} for _ in self.blocks]
        logits = self(idx, caches, 0)
        out = [idx]
        pos = idx.shape[1]
        for _ in range(n_new):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            logits = self(nxt, caches, pos)
            pos += 1
        return torch.cat(out, dim=1), caches
# --8<-- [end:model]
