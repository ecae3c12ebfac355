"""Positional encodings (docs/algorithm/positional-encoding.md): sinusoidal tables, RoPE
frequencies with the context-extension rules (position interpolation, NTK-aware, YaRN) and
ALiBi slopes. Tested in tests/test_algorithm_positional.py against transformers'
RoPE utilities and against the properties the page proves.
"""
from __future__ import annotations

import math

import torch


# --8<-- [start:sinusoidal]
def sinusoidal(n_pos, d, base=10000.0):
    """PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = base^(-2i/d)."""
    w = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * w[None, :]
    pe = torch.empty(n_pos, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = ang.sin(), ang.cos()
    return pe


def shift_matrix(k, d, base=10000.0):
    """Block-diagonal rotation M_k with PE[p + k] = M_k PE[p] for every p (depends on k only)."""
    w = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.zeros(d, d, dtype=torch.float64)
    c, s = torch.cos(k * w), torch.sin(k * w)
    m[0::2, 0::2] = torch.diag(c)      # sin(a + b) = sin a cos b + cos a sin b
    m[0::2, 1::2] = torch.diag(s)
    m[1::2, 0::2] = torch.diag(-s)     # cos(a + b) = cos a cos b - sin a sin b
    m[1::2, 1::2] = torch.diag(c)
    return m
# --8<-- [end:sinusoidal]


# --8<-- [start:rope-scaling]
def rope_inv_freq(d_h, theta=10000.0, method="plain", factor=1.0, orig_len=None,
                  beta_fast=32.0, beta_slow=1.0):
    """Frequencies theta_i of RoPE pairs i = 0 .. d_h/2 - 1, and the factor that multiplies
    cos/sin (YaRN's attention temperature; 1 otherwise), for a context `factor` times longer.
      plain : theta^(-2i/d)
      pi    : every frequency divided by factor (positions squeezed into the trained range)
      ntk   : base enlarged to theta * factor^(d/(d-2)): the highest frequency is unchanged,
              the lowest is divided by exactly `factor`
      yarn  : per pair, interpolate (divide by factor) the pairs that turn less than
              beta_slow times over orig_len, keep those that turn more than beta_fast times,
              ramp linearly (in pair index) between; cos/sin scaled by 0.1 ln(factor) + 1."""
    i = torch.arange(0, d_h, 2, dtype=torch.float32) / d_h
    if method == "ntk":
        theta = theta * factor ** (d_h / (d_h - 2))
    inv = 1.0 / theta ** i
    if method in ("plain", "ntk"):
        return inv, 1.0
    if method == "pi":
        return inv / factor, 1.0
    assert method == "yarn" and orig_len is not None

    def pair_index(n_rot):     # pair (as a fraction of d_h) that turns n_rot times over orig_len
        return d_h * math.log(orig_len / (n_rot * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = max(math.floor(pair_index(beta_fast)), 0), min(math.ceil(pair_index(beta_slow)), d_h - 1)
    ramp = ((torch.arange(d_h // 2, dtype=torch.float32) - lo) / max(hi - lo, 1e-3)).clamp(0, 1)
    inv = inv / factor * ramp + inv * (1 - ramp)        # ramp 0: keep (fast pairs), 1: interpolate
    return inv, 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def rope_cos_sin_from(inv_freq, positions, mscale=1.0):
    ang = positions.float()[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos() * mscale, ang.sin() * mscale
# --8<-- [end:rope-scaling]


# --8<-- [start:alibi]
def alibi_slopes(n_heads):
    """Head h (1-based) gets slope 2^(-8h/n) for n a power of two (Press et al. 2022); other n
    take the slopes of the next lower power of two, then every other slope of the next higher."""
    def pow2(n):
        return [2 ** (-8 * h / n) for h in range(1, n + 1)]
    p = 2 ** math.floor(math.log2(n_heads))
    return pow2(p) if p == n_heads else pow2(p) + pow2(2 * p)[0::2][: n_heads - p]


def alibi_bias(n_heads, T):
    """Added to the attention logits: -slope * (i - j) for key j <= query i."""
    rel = torch.arange(T)[None, :] - torch.arange(T)[:, None]          # j - i
    return torch.tensor(alibi_slopes(n_heads))[:, None, None] * rel.clamp(max=0)
# --8<-- [end:alibi]
