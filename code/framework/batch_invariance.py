"""Batch invariance (docs/framework/engine-determinism.md): why a request's output depends on the batch it
was served in, and kernels whose reduction order does not.

Everything here is float32 on the CPU, written with element-wise tensor operations and explicit loops over
the reduced dimension, so the order of every addition is exactly the one the code states, for any batch
size. A "kernel" that picks its split of the reduction from the batch size (split-K for a matmul, several
cores per row for RMSNorm, split-KV for decode attention) changes that order when the batch changes; the
batch-invariant version fixes it.
"""
from __future__ import annotations

import math

import torch


# --8<-- [start:ordered-sum]
def ordered_sum(terms: torch.Tensor, split: int) -> torch.Tensor:
    """Sum terms (..., K) over the last dim the way a split reduction does: cut K into `split` equal
    chunks, accumulate each chunk left to right (one partial per core / thread block), then add the
    partials left to right. split=1 is a plain sequential sum."""
    k = terms.shape[-1]
    assert k % split == 0
    chunks = terms.reshape(*terms.shape[:-1], split, k // split)
    part = chunks[..., 0]
    for j in range(1, k // split):  # every core walks its chunk in order
        part = part + chunks[..., j]
    total = part[..., 0]
    for s in range(1, split):  # then the partials are combined in order
        total = total + part[..., s]
    return total
# --8<-- [end:ordered-sum]


# --8<-- [start:matmul]
def choose_split_k(m: int, n: int, k: int, sms: int, block_m: int = 16, block_n: int = 16,
                   max_split: int = 8) -> int:
    """A typical heuristic: if the output tiles cannot fill the SMs, split K until they (nearly) do.
    Small batches (few rows, few tiles) get split-K; large batches do not."""
    tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
    split = 1
    while tiles * split * 2 <= sms and split * 2 <= max_split and k % (split * 2) == 0:
        split *= 2
    return split


def matmul(x: torch.Tensor, w: torch.Tensor, split: int) -> torch.Tensor:
    """x (M, K) @ w (K, N) with the K reduction split `split` ways (see ordered_sum)."""
    return ordered_sum((x[:, :, None] * w[None, :, :]).transpose(1, 2), split)


def matmul_batch_dependent(x, w, sms=16):
    return matmul(x, w, choose_split_k(x.shape[0], w.shape[1], x.shape[1], sms))


def matmul_batch_invariant(x, w, split=1):
    """One split for every batch size: what batch-invariant GEMMs do (no split-K, one tile config)."""
    return matmul(x, w, split)
# --8<-- [end:matmul]


# --8<-- [start:rmsnorm]
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, split: int, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm with the sum of squares of each row reduced `split` ways."""
    ms = ordered_sum(x * x, split) / x.shape[-1]
    return x / torch.sqrt(ms + eps)[:, None] * weight


def rmsnorm_batch_dependent(x, weight, sms=16):
    """One row per core when the batch fills the machine; with fewer rows than cores, a row is shared by
    several cores (a split reduction), so a row's sum is added in a different order."""
    split = 1
    while x.shape[0] * split * 2 <= sms and x.shape[-1] % (split * 2) == 0:
        split *= 2
    return rmsnorm(x, weight, split)


def rmsnorm_batch_invariant(x, weight):
    return rmsnorm(x, weight, 1)  # always one core per row: idle cores at small batch are the price
# --8<-- [end:rmsnorm]


# --8<-- [start:attention]
def fixed_size_bounds(length: int, size: int) -> list[tuple[int, int]]:
    """Chunks of `size` keys counted from position 0 (the last one shorter): fixed split SIZE."""
    return [(s, min(s + size, length)) for s in range(0, length, size)]


def fixed_count_bounds(length: int, splits: int) -> list[tuple[int, int]]:
    """`splits` chunks of equal length: fixed split COUNT, so the boundaries move with the count."""
    return fixed_size_bounds(length, math.ceil(length / splits))


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     bounds: list[tuple[int, int]]) -> torch.Tensor:
    """Split-KV (FlashDecoding) attention of one query per row over keys k, v (B, L, d).

    Each chunk keeps (max m_c, sum l_c, unnormalised output o_c); the chunks are merged in order with the
    log-sum-exp rescaling of online softmax. The dot products q.k are summed over d in a fixed order."""
    d = q.shape[-1]
    scores = ordered_sum(q[:, None, :] * k, 1) / math.sqrt(d)  # (B, L)
    parts = []
    for s, e in bounds:
        sc = scores[:, s:e]
        m_c = sc.max(dim=1).values  # max is exact: its order does not matter
        p = torch.exp((sc - m_c[:, None]).double()).float()  # same value wherever an element sits
        l_c = ordered_sum(p, 1)
        o_c = ordered_sum((p[:, :, None] * v[:, s:e, :]).transpose(1, 2), 1)  # (B, d)
        parts.append((m_c, l_c, o_c))
    m = torch.stack([pm for pm, _, _ in parts]).max(dim=0).values
    l_sum, o_sum = torch.zeros_like(m), torch.zeros_like(q)
    for m_c, l_c, o_c in parts:  # merge the partial results in chunk order
        alpha = torch.exp((m_c - m).double()).float()
        l_sum = l_sum + alpha * l_c
        o_sum = o_sum + alpha[:, None] * o_c
    return o_sum / l_sum[:, None]


def splits_for_batch(batch: int, heads: int, sms: int, max_splits: int = 8) -> int:
    """Fixed-count split-KV: as many chunks per (row, head) as needed to give every SM work."""
    return max(1, min(max_splits, sms // (batch * heads)))


def attention_batch_dependent(q, k, v, heads=1, sms=16):
    return decode_attention(q, k, v, fixed_count_bounds(k.shape[1], splits_for_batch(q.shape[0], heads, sms)))


def attention_batch_invariant(q, k, v, split_size=16):
    return decode_attention(q, k, v, fixed_size_bounds(k.shape[1], split_size))


def prefix_bounds(length: int, cached: int, size: int) -> list[tuple[int, int]]:
    """Chunks when the first `cached` keys come from the prefix cache (or an earlier prefill chunk) and
    are reduced separately from the new ones: fixed-size chunks on each side of the cut."""
    return fixed_size_bounds(cached, size) + [(s + cached, e + cached)
                                              for s, e in fixed_size_bounds(length - cached, size)]
# --8<-- [end:attention]


# --8<-- [start:seeded-sampling]
M32 = 0xFFFFFFFF


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mix (int64 arithmetic that never overflows): counter-based randomness."""
    for _ in range(2):
        x = ((x ^ (x >> 16)) * 0x45D9F3B) & M32
    return x ^ (x >> 16)


def seeded_sample(logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
                  temperature: float = 1.0) -> torch.Tensor:
    """Gumbel-max sampling whose noise is a function of (seed, step, token id) only, not of the row the
    request sits in or of the other rows (SGLang's multinomial_with_seed follows the same idea)."""
    vocab = torch.arange(logits.shape[1], dtype=torch.int64)
    h = hash32(hash32(hash32(seeds.to(torch.int64) & M32)[:, None] ^ steps.to(torch.int64)[:, None]) ^ vocab)
    u = (h.double() + 0.5) / 2.0**32  # uniform in (0, 1)
    gumbel = -torch.log(-torch.log(u))
    return torch.argmax(logits.double() / temperature + gumbel, dim=1)
# --8<-- [end:seeded-sampling]


# --8<-- [start:cost]
def sm_fill(programs: int, sms: int) -> float:
    """Fraction of SMs that get a program (one wave): what a fixed split gives up at small batch."""
    return min(1.0, programs / sms)


def matmul_programs(m, n, block_m=128, block_n=128, split=1):
    return math.ceil(m / block_m) * math.ceil(n / block_n) * split


def attention_programs(batch, kv_heads, length, split_size=None, splits=1):
    """Decode attention programs: one per (row, KV head, chunk)."""
    chunks = math.ceil(length / split_size) if split_size else splits
    return batch * kv_heads * chunks
# --8<-- [end:cost]
