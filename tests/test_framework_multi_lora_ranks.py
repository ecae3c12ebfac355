"""code/framework/multi_lora.py with adapters of different ranks (notebooks/framework/multi-lora-lab.ipynb): the
SGMV kernel (Triton's CPU interpreter, TRITON_INTERPRET=1 from tests/conftest.py) stops every segment at its
adapter's own rank, so the zero padding of the stacked buffers is never read; and batch_cost's FLOPs and bytes of
the three strategies (segmented, merge per adapter, padded to the largest rank) equal counts of the real products."""
from __future__ import annotations

import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import multi_lora as ml  # noqa: E402

D_IN, D_OUT, RANKS = 24, 20, [2, 4, 8]
REQUESTS = [(5, 0), (1, 2), (1, -1), (7, 1), (1, 0), (3, 2), (2, -1)]
MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(D_OUT, D_IN, generator=g)
    r_max = max(RANKS)
    a_st, b_st = torch.zeros(len(RANKS), r_max, D_IN), torch.zeros(len(RANKS), D_OUT, r_max)
    for slot, r in enumerate(RANKS):
        a_st[slot, :r] = torch.randn(r, D_IN, generator=g) * 0.3
        b_st[slot, :, :r] = torch.randn(D_OUT, r, generator=g) * 0.3
    ta = torch.cat([torch.full((n,), s) for n, s in REQUESTS])
    return w, a_st, b_st, ta, torch.randn(len(ta), D_IN, generator=g)


def test_each_segment_stops_at_its_rank():
    w, a_st, b_st, ta, x = _batch()
    ranks = torch.tensor(RANKS, dtype=torch.int32)
    y = ml.lora_linear(x, w, a_st, b_st, ta, 0.5, ranks=ranks)
    assert torch.equal(y, ml.lora_linear(x, w, a_st, b_st, ta, 0.5))  # padding adds exact zeros
    dirty_a, dirty_b = a_st.clone(), b_st.clone()
    for slot, r in enumerate(RANKS):  # poison the padding: a kernel that read it would return NaN
        dirty_a[slot, r:] = float("nan")
        dirty_b[slot, :, r:] = float("nan")
    assert torch.equal(ml.lora_linear(x, w, dirty_a, dirty_b, ta, 0.5, ranks=ranks), y)
    start = 0
    for n, slot in REQUESTS:
        rows = slice(start, start + n)
        start += n
        if slot >= 0:
            r = RANKS[slot]
            merged = ml.merged_weight(w, a_st[slot, :r], b_st[slot, :, :r], 0.5)
            torch.testing.assert_close(y[rows], x[rows] @ merged.T, rtol=1e-5, atol=1e-5)


class _MatmulBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in MATMULS:
            self.bytes += sum(t.numel() * t.element_size() for t in (*args, out) if isinstance(t, torch.Tensor))
        return out


def _segmented_in_torch(x, w, a_st, b_st, ta, ranks):
    """The same products as the kernels, one per segment, in PyTorch (so the counters see them)."""
    y = x @ w.T
    for a in ta[ta >= 0].unique().tolist():
        rows, r = (ta == a).nonzero()[:, 0], ranks[a]
        xa = x[rows]
        v = xa @ a_st[a, :r].T  # shrink: reads x rows and A_a, writes v
        y[rows] = torch.addmm(y[rows], v, b_st[a, :, :r].T)  # expand: reads v, B_a and y rows, writes y rows
    return y


def _merge_in_torch(x, w, a_st, b_st, ta, ranks):
    y = torch.empty(x.shape[0], w.shape[0])
    for a in ta.unique().tolist():
        rows = (ta == a).nonzero()[:, 0]
        wa = w if a < 0 else torch.addmm(w, b_st[a, :, :ranks[a]], a_st[a, :ranks[a]])
        y[rows] = x[rows] @ wa.T
    return y


def test_batch_cost_equals_the_counted_products():
    w, a_st, b_st, ta, x = _batch(1)
    tokens = {a: int((ta == a).sum()) for a in range(len(RANKS))}
    n0, rank_of = int((ta < 0).sum()), dict(enumerate(RANKS))
    cases = [("sgmv", _segmented_in_torch, RANKS), ("padded", _segmented_in_torch, [max(RANKS)] * len(RANKS)),
             ("merge", _merge_in_torch, RANKS)]
    outputs = []
    for strategy, fn, ranks in cases:
        with FlopCounterMode(display=False) as fc, _MatmulBytes() as mb:
            outputs.append(fn(x, w, a_st, b_st, ta, ranks))
        assert (fc.get_total_flops(), mb.bytes) == ml.batch_cost(D_IN, D_OUT, tokens, rank_of, n0, strategy)
    for y in outputs[1:]:
        torch.testing.assert_close(y, outputs[0], rtol=1e-5, atol=1e-5)


def test_merging_pays_off_in_flops_only_for_long_segments():
    d_in, d_out = 4096, 1024
    n_star = ml.merge_pays_off_tokens(d_in, d_out)
    assert n_star == 819.2
    for r in (8, 64):
        cost = {n: {s: ml.batch_cost(d_in, d_out, {0: n}, {0: r}, 0, s)[0] for s in ("sgmv", "merge")}
                for n in (819, 820)}
        assert cost[819]["merge"] > cost[819]["sgmv"] and cost[820]["merge"] < cost[820]["sgmv"]
