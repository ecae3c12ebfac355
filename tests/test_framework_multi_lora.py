"""code/framework/multi_lora.py (docs/framework/engine-multi-lora.md): a batch that mixes adapters, computed
with one base GEMM and the segmented (SGMV) Triton kernel in Triton's CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), gives every request what its merged weight W + s B A gives it alone; the adapter memory
and the extra FLOPs per token equal the formulas on the page."""
from __future__ import annotations

import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import multi_lora as ml  # noqa: E402

D_IN, D_OUT, R, L, SCALE = 24, 20, 8, 3, 0.5
# (tokens, adapter slot): prefills of several tokens, decodes of one, and base-only requests (-1)
REQUESTS = [(5, 0), (1, 2), (1, -1), (7, 1), (1, 0), (3, 2), (2, -1), (1, 1)]


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(D_OUT, D_IN, generator=g)
    a = torch.randn(L, R, D_IN, generator=g) * 0.3
    b = torch.randn(L, D_OUT, R, generator=g) * 0.3
    token_adapter = torch.cat([torch.full((n,), s) for n, s in REQUESTS])
    x = torch.randn(len(token_adapter), D_IN, generator=g)
    return w, a, b, token_adapter, x


def _rows():
    start = 0
    for n, slot in REQUESTS:
        yield slice(start, start + n), slot
        start += n


def test_mixed_batch_equals_each_request_with_its_merged_weight():
    w, a, b, ta, x = _batch()
    y = ml.lora_linear(x, w, a, b, ta, SCALE)
    base = x @ w.T
    for rows, slot in _rows():
        if slot < 0:  # base-only rows are never touched by the low-rank kernels: bit-identical to the base GEMM
            assert torch.equal(y[rows], base[rows])
        else:
            merged = ml.merged_weight(w, a[slot], b[slot], SCALE)
            torch.testing.assert_close(y[rows], x[rows] @ merged.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, ml.lora_linear_gathered(x, w, a, b, ta, SCALE), rtol=1e-5, atol=1e-5)


def test_order_of_requests_in_the_batch_does_not_matter():
    w, a, b, ta, x = _batch(1)
    perm = torch.randperm(len(ta), generator=torch.Generator().manual_seed(2))
    y = ml.lora_linear(x, w, a, b, ta, SCALE)
    y_perm = ml.lora_linear(x[perm], w, a, b, ta[perm], SCALE)
    torch.testing.assert_close(y_perm, y[perm], rtol=1e-5, atol=1e-5)


def test_segments_group_tokens_by_adapter():
    ta = torch.tensor([2, 0, -1, 2, 0, 0, -1, 1])  # a decode batch: one token per request
    seg = ml.make_segments(ta)
    assert seg.adapter_ids.tolist() == [0, 1, 2]  # one segment per distinct adapter in the batch
    assert seg.lengths.tolist() == [3, 1, 2] and seg.starts.tolist() == [0, 3, 4]
    assert seg.token_ids.tolist() == [1, 4, 5, 7, 0, 3]  # base-only tokens 2 and 6 are left out
    assert seg.max_len == 3


def test_extra_flops_per_token_match_the_counter():
    w, a, b, ta, x = _batch()
    ta = torch.zeros_like(ta)  # every token has an adapter
    with FlopCounterMode(display=False) as counter:
        ml.lora_linear_gathered(x, w, a, b, ta, SCALE)
    t, shapes = len(ta), [(D_IN, D_OUT)]
    assert ml.lora_flops_per_token(shapes, R, 1) == 2 * R * (D_IN + D_OUT)
    assert counter.get_total_flops() == t * (2 * ml.base_params(shapes, 1) + ml.lora_flops_per_token(shapes, R, 1))


def test_adapter_memory_of_a_llama_3_8b_adapter():
    # Llama-3-8B: hidden 4096, FFN 14336, 32 query heads, 8 KV heads of 128, 32 layers; r = 16 on all 7 linears
    shapes = ml.llama_linear_shapes(4096, 14336, 32, 8, 128)
    a_b = [torch.empty(R, d_in).numel() + torch.empty(d_out, R).numel() for d_in, d_out in [(6, 5), (5, 9)]]
    assert ml.adapter_params([(6, 5), (5, 9)], R, 1) == sum(a_b)  # the formula counts the A and B tensors
    params = ml.adapter_params(shapes, 16, 32)
    assert params == 41_943_040
    assert params * 2 == 83_886_080  # bf16 bytes of one adapter: 80 MiB
    assert ml.base_params(shapes, 32) == 6_979_321_856
    assert round(params / ml.base_params(shapes, 32), 4) == 0.0060  # 0.6% of the linear weights
    # a decode step reads each distinct adapter once: 32 distinct adapters add 19% to the base's bytes
    base, many = ml.decode_step_bytes(shapes, 16, 32, 0), ml.decode_step_bytes(shapes, 16, 32, 32)
    assert round((many - base) / base, 2) == 0.19
