"""code/operator/flash_attention_hopper.py: the Hopper-oriented FlashAttention forward (tensor descriptors,
split causal loop, exp2, reversed causal blocks, warp_specialize flag) equals a float32 reference in Triton's
CPU interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported), in all three load modes;
and bench/experiments/fa_forward_sweep.py, which times it on a GPU, keeps within its compile budget.

The GPU timing is bench/experiments/fa_forward_sweep.py; the lab notebooks/operator/flash-attention-lab.ipynb
checks the same function against its own error bound and adds the `triton-tma-*` bench rungs.
"""
from __future__ import annotations

import math

import pytest
import torch

from conftest import ROOT, load_listing

FA = load_listing(ROOT / "code" / "operator" / "flash_attention_hopper.py", "operator_fa_hopper")


def _reference(q, k, v, causal):
    s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v.float(), torch.logsumexp(s, -1)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("desc,pipeline,ws", [("host", False, False), ("device", False, False), ("pointer", False, False),
                                              ("host", True, False), ("device", False, True)])
def test_forward_equals_reference_in_every_load_mode(desc, pipeline, ws, causal):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 32, generator=gen).half() for _ in range(3))
    ref, ref_lse = _reference(q, k, v, causal)
    o, lse = FA.flash_attention_hopper(q, k, v, causal, block_m=32, block_n=16, desc=desc,
                                       pipeline=pipeline, warp_specialize=ws, reverse=causal, out=torch.full_like(q, float("nan")))
    # fp16 output (2^-11 relative) plus P rounded to fp16 before the second matmul: 2^-8 of |v| ~ 4 is generous
    assert (o.float() - ref).abs().max() < 2.0**-11 * ref.abs().max() + 2.0**-8
    assert (lse - ref_lse).abs().max() < 1e-4  # natural-log logsumexp, fp32 throughout


def test_masking_and_block_order_matter():
    """A wrong diagonal (non-causal result asked for a causal one) is caught; reversing the block order is not
    a change of result."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 64, 16, generator=gen).half() for _ in range(3))
    ref, _ = _reference(q, k, v, True)
    full, _ = FA.flash_attention_hopper(q, k, v, False, block_m=32, block_n=16)
    assert (full.float() - ref).abs().max() > 0.1
    fwd, _ = FA.flash_attention_hopper(q, k, v, True, block_m=32, block_n=16)
    rev, _ = FA.flash_attention_hopper(q, k, v, True, block_m=32, block_n=16, reverse=True)
    assert torch.equal(fwd, rev)


def test_shapes_it_refuses():
    q = torch.zeros(1, 1, 48, 16, dtype=torch.float16)
    with pytest.raises(AssertionError):
        FA.flash_attention_hopper(q, q, q, False, block_m=32, block_n=16)  # N not a multiple of BLOCK_M
    with pytest.raises(AssertionError):
        FA.flash_attention_hopper(q, q, q, False, block_m=16, block_n=32)  # BLOCK_M not a multiple of BLOCK_N


def test_sweep_points_and_shared_memory_estimate():
    from bench.experiments import fa_forward_sweep as sweep

    # Triton 3.9, sm_90, BLOCK_M = 128, BLOCK_N = 64, 3 stages: 65,592 B at d = 64, 131,128 B at d = 128
    # (compiled ahead of time; the extra 56 B are barriers)
    assert FA.shared_memory_bytes(128, 64, 64, 3) == 65536 and FA.shared_memory_bytes(128, 64, 128, 3) == 131072
    points = len(sweep.POINTS) * len(sweep.VARIANTS) + len(sweep.REVERSED) * sum(
        c for _, c, _ in sweep.VARIANTS.values())
    assert points <= 62, "the sweep compiles about 60 configs at most"
    for desc, bm, bn, _, stages, _, _ in sweep.POINTS:
        assert desc in FA.DESC_MODES and bm % bn == 0 and sweep.N_CTX % bm == 0
        assert FA.shared_memory_bytes(bm, bn, 128, stages) <= 227 * 1024
