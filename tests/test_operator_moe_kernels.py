"""code/operator/moe_kernels.py (docs/operator/moe-kernels.md): permute/unpermute equal a per-expert loop,
the block alignment equals vLLM's layout and its padding formula equals a count, the Triton grouped GEMM and
the fused MoE forward equal per-expert references within the derived error bound, in Triton's CPU interpreter
(tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported). The lab
notebooks/operator/moe-kernels-lab.ipynb repeats these checks and adds the GPU timing cell.
"""
from __future__ import annotations

import pytest
import torch

from conftest import ROOT, load_listing

M = load_listing(ROOT / "code" / "operator" / "moe_kernels.py", "operator_moe_kernels")
PAGE = ROOT / "docs" / "operator" / "moe-kernels.md"
U32 = 2.0**-24


def _layer(t, e, d, f, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, d, generator=g)
    return x, torch.randn(e, 2 * f, d, generator=g) / d**0.5, torch.randn(e, d, f, generator=g) / f**0.5, g


@pytest.mark.parametrize("t,e,k", [(1, 4, 2), (29, 8, 3), (16, 16, 1)])
def test_permute_matches_loop_and_inverts(t, e, k):
    g = torch.Generator().manual_seed(t)
    w, ids = M.topk_route(torch.randn(t, e, generator=g), k)
    order, counts, offsets, inverse = M.permute(ids, e)
    rows = ids.tolist()
    assert order.tolist() == [s * k + j for x in range(e) for s in range(t) for j in range(k) if rows[s][j] == x]
    assert counts.tolist() == [sum(r.count(x) for r in rows) for x in range(e)] and offsets[-1] == t * k
    assert torch.equal(inverse[order], torch.arange(t * k))
    x = torch.randn(t, 5, generator=g)
    torch.testing.assert_close(M.unpermute(M.permute_rows(x, order, k), inverse, w), x * w.sum(1, keepdim=True))


@pytest.mark.parametrize("bm", [1, 4, 16])
def test_align_block_size_layout_and_padding_formula(bm):
    g = torch.Generator().manual_seed(1)
    t, e, k = 23, 6, 2
    ids = M.zipf_ids(t, e, k, g)
    sorted_ids, block_expert, total, counts = M.align_block_size(ids, e, bm)
    order = M.permute(ids, e)[0].tolist()
    expect_ids, expect_blocks = [], []
    for x in range(e):
        slots = [s for s in order if ids.flatten()[s] == x]
        pad = -(-len(slots) // bm) * bm
        expect_ids += slots + [t * k] * (pad - len(slots))
        expect_blocks += [x] * (pad // bm)
    n = int(total)
    assert sorted_ids[:n].tolist() == expect_ids and block_expert[: n // bm].tolist() == expect_blocks
    assert (block_expert[n // bm:] == -1).all() and sorted_ids.numel() % bm == 0
    assert M.padding_waste(counts, bm) == int((sorted_ids[:n] == t * k).sum())
    cost = M.imbalance_costs(counts, bm)
    assert cost["grouped"] == n and cost["padded_bmm"] == e * int(counts.max()) and cost["useful"] == t * k


def test_balanced_routing_is_exactly_balanced():
    ids = M.balanced_ids(96, 64, 6, torch.Generator().manual_seed(0))
    assert torch.bincount(ids.flatten().long(), minlength=64).eq(9).all()
    assert all(len(set(r)) == 6 for r in ids.tolist())  # k distinct experts per token


def test_grouped_gemm_matches_per_expert_matmul():
    t, e, k, d, n = 19, 5, 2, 40, 24
    x, _, _, g = _layer(t, e, d, 8)
    w = torch.randn(e, n, d, generator=g)
    ids = M.zipf_ids(t, e, k, g)
    order, _, offsets, _ = M.permute(ids, e)
    blocks = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2)
    sorted_ids, block_expert, total, _ = M.align_block_size(ids, e, 16)
    out = torch.full((t * k, n), float("nan"))
    M.grouped_gemm(x, w, out, sorted_ids, block_expert, total, a_div=k, blocks=blocks)
    for x_e in range(e):
        slots = order[offsets[x_e]:offsets[x_e + 1]]
        rows = x[slots // k].double()
        tol = 2 * d * U32 * (rows.abs() @ w[x_e].double().abs().T) + 1e-30
        assert ((out[slots].double() - rows @ w[x_e].double().T).abs() <= tol).all()


def test_fused_moe_and_baselines_within_bound():
    """Skewed routing (an empty or near-empty expert, a hot one); the lab also runs the balanced case."""
    t, e, k, d, f = 21, 6, 2, 16, 24
    x, w13, w2, g = _layer(t, e, d, f, seed=3)
    ids = M.zipf_ids(t, e, k, g, s=1.5)
    w = torch.softmax(torch.randn(t, k, generator=g), -1)
    ref, parts = M.moe_reference(x, w13, w2, w, ids)
    bound = M.moe_error_bound(parts, w, t, d, f, U32, U32, roundings=2)
    impls = [M.fused_moe, M.moe_padded_bmm, M.moe_expert_loop]
    if hasattr(torch, "_grouped_mm"):
        impls.append(M.moe_grouped_mm)
    for fn in impls:
        out = fn(x, w13, w2, w, ids)
        assert ((out.double() - ref).abs() <= bound).all(), fn.__name__


def test_page_embeds_the_listings():
    text = PAGE.read_text(encoding="utf-8")
    for section in ("route", "permute", "align", "grouped", "fused", "baselines", "waste"):
        assert f'--8<-- "code/operator/moe_kernels.py:{section}"' in text, section


def test_lab_bench_cases_check_every_rung_on_cpu():
    import os
    import runpy

    from bench.__main__ import run_rungs
    from tools import labs

    os.environ["LAB_FORCE_CPU"] = "1"
    module = labs.as_module(ROOT / "notebooks" / "operator" / "moe-kernels-lab.ipynb", {labs.SETUP_TAG, "kernel", "bench"})
    ns = runpy.run_path(str(module), run_name="__lab__")
    assert ns["ON_GPU"] is False and set(ns["BENCH_REFERENCE"]) == set(ns["RUNGS"])
    case = ns["bench_cases"](24, experts=8, k=2, d=16, f=24)
    assert set(case["runs"]) == set(ns["RUNGS"])
    results, skipped = run_rungs(case, 24, timer=lambda fn: 1.0, sync=lambda: None, unavailable={}, log=lambda m: None)
    assert not skipped, skipped
    assert all(r["flops"] == 6 * 24 * 2 * 16 * 24 for r in results)
