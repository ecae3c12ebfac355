"""code/framework/batch_invariance.py (docs/framework/engine-determinism.md): in float32 on the CPU, a matmul
whose split-K depends on the batch size, an RMSNorm that shares a row between cores at small batch, and a
split-KV attention with a fixed split count give a request different bits in different batches; the
batch-invariant versions (one split, fixed split size) give bit-identical rows (torch.equal) at every batch
size, and both stay within float32 error of a float64 reference. Seeded sampling does not depend on the
batch; the cost is the SMs a fixed split leaves idle."""
from __future__ import annotations

import sys

import pytest
import torch
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import batch_invariance as bi  # noqa: E402

H200 = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]["nvidia-h200"]
BATCHES = (1, 4, 16, 64)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _distinct(rows):
    out = []
    for r in rows:
        if not any(torch.equal(r, o) for o in out):
            out.append(r)
    return len(out)


def test_split_k_follows_the_batch_size_and_changes_the_bits():
    k, n = 256, 32
    g = _gen()
    w, x = torch.randn(k, n, generator=g), torch.randn(max(BATCHES), k, generator=g)
    assert [bi.choose_split_k(m, n, k, sms=16) for m in BATCHES] == [8, 8, 8, 2]
    dependent = [bi.matmul_batch_dependent(x[:m], w)[0] for m in BATCHES]  # request 0 in 4 batches
    invariant = [bi.matmul_batch_invariant(x[:m], w)[0] for m in BATCHES]
    assert _distinct(dependent) == 2  # split 8 and split 2: two different answers for the same request
    assert all(torch.equal(invariant[0], r) for r in invariant)
    ref = x[:1].double() @ w.double()
    for r in (dependent[0], dependent[-1], invariant[0]):  # every order is an equally good float32 answer
        torch.testing.assert_close(r.double(), ref[0], rtol=0, atol=1e-4)


def test_rmsnorm_with_a_fixed_reduction_is_batch_invariant():
    h = 128
    g = _gen(1)
    weight, x = torch.randn(h, generator=g), torch.randn(32, h, generator=g)
    dependent = [bi.rmsnorm_batch_dependent(x[:m], weight)[0] for m in (1, 2, 8, 32)]
    invariant = [bi.rmsnorm_batch_invariant(x[:m], weight)[0] for m in (1, 2, 8, 32)]
    assert _distinct(dependent) > 1
    assert all(torch.equal(invariant[0], r) for r in invariant)
    ref = x[0].double() / torch.sqrt((x[0].double() ** 2).mean() + 1e-6) * weight.double()
    torch.testing.assert_close(dependent[-1].double(), ref, rtol=1e-5, atol=1e-6)


def _qkv(batch=16, length=64, d=16, seed=2):
    g = _gen(seed)
    return (torch.randn(batch, d, generator=g), torch.randn(batch, length, d, generator=g),
            torch.randn(batch, length, d, generator=g))


def test_attention_fixed_split_size_is_batch_invariant():
    q, k, v = _qkv()
    assert [bi.splits_for_batch(b, 1, 16) for b in (1, 2, 4, 16)] == [8, 8, 4, 1]
    dependent = [bi.attention_batch_dependent(q[:b], k[:b], v[:b])[0] for b in (1, 2, 4, 16)]
    invariant = [bi.attention_batch_invariant(q[:b], k[:b], v[:b])[0] for b in (1, 2, 4, 16)]
    assert _distinct(dependent) > 1
    assert all(torch.equal(invariant[0], r) for r in invariant)
    p = torch.softmax((q.double()[:, None, :] * k.double()).sum(-1) / 4, dim=1)
    ref = (p[:, :, None] * v.double()).sum(1)
    torch.testing.assert_close(bi.attention_batch_invariant(q, k, v).double(), ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(bi.attention_batch_dependent(q[:1], k[:1], v[:1]).double(), ref[:1], rtol=0, atol=1e-6)


def test_prefix_cache_and_chunked_prefill_need_aligned_cuts():
    """KV that came from the prefix cache (or an earlier prefill chunk) is reduced on its own: the result
    is unchanged only if the cut falls on a multiple of the split size (SGLang aligns its chunks so)."""
    q, k, v = _qkv(batch=4)
    whole = bi.attention_batch_invariant(q, k, v, split_size=16)
    assert bi.prefix_bounds(64, 32, 16) == bi.fixed_size_bounds(64, 16)
    assert torch.equal(bi.decode_attention(q, k, v, bi.prefix_bounds(64, 32, 16)), whole)
    assert not torch.equal(bi.decode_attention(q, k, v, bi.prefix_bounds(64, 20, 16)), whole)


def test_seeded_sampling_ignores_the_batch_and_follows_softmax():
    g = _gen(3)
    logits = torch.randn(6, 8, generator=g)
    seeds, steps = torch.tensor([11, 12, 13, 14, 15, 16]), torch.tensor([0, 5, 2, 9, 1, 3])
    together = bi.seeded_sample(logits, seeds, steps)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert torch.equal(bi.seeded_sample(logits[perm], seeds[perm], steps[perm]), together[perm])
    assert torch.equal(bi.seeded_sample(logits[2:3], seeds[2:3], steps[2:3]), together[2:3])
    # over many steps, one row's samples follow softmax(logits): Gumbel-max with hashed uniforms
    n = 4000
    row = logits[0].expand(n, -1)
    draws = bi.seeded_sample(row, torch.full((n,), 7), torch.arange(n))
    freq = torch.bincount(draws, minlength=8).double() / n
    p = torch.softmax(logits[0].double(), 0)
    assert (freq - p).abs().max() < 4 * torch.sqrt(p * (1 - p) / n).max()


def test_what_a_fixed_split_costs_on_h200():
    sms = H200["sm_count"]
    assert sms == 132
    # decode at batch 1 through a 4096-wide linear, 128 x 128 tiles: 32 programs, a quarter of the SMs
    assert bi.matmul_programs(1, 4096) == 32
    assert bi.sm_fill(bi.matmul_programs(1, 4096), sms) == pytest.approx(32 / 132)
    assert bi.sm_fill(bi.matmul_programs(1, 4096, split=4), sms) == pytest.approx(128 / 132)
    assert bi.sm_fill(bi.matmul_programs(1024, 4096), sms) == 1.0  # 1024 tokens (a prefill) fill it without split-K
    # decode attention, 8 KV heads, batch 1: one chunk per head leaves 124 SMs idle; split size 2048 on a
    # 32k context gives 128 programs; on a 1k context the same fixed size gives 8 again
    assert bi.attention_programs(1, 8, 32768, splits=1) == 8
    assert bi.attention_programs(1, 8, 32768, split_size=2048) == 128
    assert bi.attention_programs(1, 8, 1024, split_size=2048) == 8
