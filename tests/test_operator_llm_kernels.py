"""code/operator/llm_kernels.py (docs/operator/llm-kernels.md): the cost formulas equal what is counted,
and every Triton kernel equals the PyTorch (or NumPy) reference at edge sizes, in Triton's CPU interpreter
(tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported).

The lab notebooks/operator/llm-kernels-lab.ipynb repeats these checks with the error bounds explained and
adds the GPU timing cell; the CUDA listings cluster-dsmem.cu and mbarrier-pipeline.cu are compiled by
tests/test_cuda_sources.py (sm_90 only, by their `// nvcc-arch:` line) and run by `make gpu-check`.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT, load_listing

L = load_listing(ROOT / "code" / "operator" / "llm_kernels.py", "operator_llm_kernels")
TT = load_listing(ROOT / "code" / "algorithm" / "tiny_transformer.py", "operator_llm_tiny_transformer")
DET = load_listing(ROOT / "code" / "algorithm" / "detection.py", "operator_llm_detection")
PAGE = ROOT / "docs" / "operator" / "llm-kernels.md"
U32 = 2.0**-24


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _fp16_ulp(v):
    a = v.abs().double()
    return torch.where(a < 2**-14, torch.full_like(a, 2.0**-24), 2.0 ** (torch.floor(torch.log2(a.clamp_min(2**-14))) - 10))


# ------------------------------------------------------------------ formulas equal counts
def test_gemv_formula_equals_flop_counter_and_tensor_bytes():
    from torch.utils.flop_counter import FlopCounterMode

    m, k = 96, 80
    w, x = torch.randn(m, k).half(), torch.randn(k).half()
    with FlopCounterMode(display=False) as counter:
        F.linear(x[None].float(), w.float())  # batch-1 linear layer: counted as a (1, k) x (k, m) matmul
    flops, moved = L.gemv_traffic(m, k)
    assert counter.get_total_flops() == flops == 2 * m * k
    assert moved == w.numel() * 2 + x.numel() * 2 + m * 2
    # batch 1: about 1 FLOP per byte in fp16; the H200 ridge (about 206 FLOP/B) needs B/(1+2B/4096) = 206, B ≈ 229
    assert L.linear_intensity(1, 4096, 4096) == pytest.approx(1.0, rel=1e-3)
    assert L.linear_intensity(206, 4096, 4096) == pytest.approx(2 * 206 * 4096**2 / (2 * (4096**2 + 2 * 206 * 4096)))
    assert 180 < L.linear_intensity(256, 4096, 4096) < 256


def test_swiglu_traffic_equals_eager_count():
    t, f = 5, 24
    g, u = torch.randn(t, 2 * f).half().chunk(2, dim=-1)
    eager, ops = L.eager_traffic(lambda a, b: F.silu(a) * b, g, u)
    assert [name for name, _ in ops] == ["silu", "mul"]
    assert eager == L.swiglu_traffic(t * f, fused=False) == 5 * t * f * 2
    assert L.swiglu_traffic(t * f) == 3 * t * f * 2


def test_rope_eager_moves_more_than_the_fused_kernel():
    t, h, d = 8, 4, 32
    x = torch.randn(t, h, d).half()
    cos, sin = TT.rope_cos_sin(torch.arange(t), d)
    eager, ops = L.eager_traffic(TT.apply_rope, x, cos[:, None].half(), sin[:, None].half())
    assert [name for name, _ in ops] == ["mul", "neg", "cat", "mul", "add"]
    x_bytes = x.numel() * 2
    # mul reads x + cos, writes x; neg reads and writes half of x; cat reads and writes x; mul, add as the first
    table = t * d * 2
    assert eager == (2 * x_bytes + table) + x_bytes + 2 * x_bytes + (2 * x_bytes + table) + 3 * x_bytes
    assert L.rope_traffic(t, h, d) == 2 * x_bytes + t * d * 4


def test_merge_traffic():
    assert L.merge_traffic(3, 2, 8) == 3 * 2 * (3 * 8 * 2 + 12)


# ------------------------------------------------------------------ GEMV and dot
@pytest.mark.parametrize("m,k", [(1, 1), (1, 257), (37, 300), (300, 16), (5, 1000), (17, 33)])
@pytest.mark.parametrize("method", ["scalar", "vec", "tile", "splitk"])
def test_gemv_matches_torch_mv(m, k, method):
    g = _gen(m * 1000 + k)
    w, x = torch.randn(m, k, generator=g).half(), torch.randn(k, generator=g).half()
    out = torch.full((m,), float("nan"), dtype=torch.float16)
    y = L.gemv(w, x, method, out=out)
    ref = w.double() @ x.double()
    tol = (k * U32 / (1 - k * U32)) * (w.double().abs() @ x.double().abs()) + 2.0**-11 * ref.abs()
    assert ((y.double() - ref).abs() <= tol).all()
    torch.testing.assert_close(y.float(), torch.mv(w.float(), x.float()).half().float(), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(y.float(), F.linear(x[None].float(), w.float())[0].half().float(), rtol=2e-3, atol=2e-3)


def test_gemv_split_k_slices():
    assert L.splitk_factor(256, 4096, sms=132) == 16      # 16 row programs x 16 slices = 256 programs, about 1.9 per SM
    assert L.splitk_factor(16384, 4096, sms=132) == 1      # enough rows: no split
    assert L.splitk_factor(4, 100, sms=132) == 1           # one chunk of K: nothing to split
    w, x = torch.randn(8, 4096).half(), torch.randn(4096).half()
    for split in (1, 3, 16):                               # a split that does not divide K's chunks
        y = L.gemv(w, x, "splitk", split=split)
        torch.testing.assert_close(y.float(), (w.float() @ x.float()).half().float(), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("n", [1, 2, 2047, 2049, 70_001])
def test_dot_matches_torch_dot(n):
    g = _gen(n)
    a, b = torch.randn(n, generator=g).half(), torch.randn(n, generator=g).half()
    exact = (a.double() * b.double()).sum().item()
    scale = (a.double() * b.double()).abs().sum().item()
    got = L.dot(a, b).item()
    assert abs(got - exact) <= n * U32 / (1 - n * U32) * scale
    assert got == pytest.approx(torch.dot(a.float(), b.float()).item(), rel=1e-5, abs=1e-5 * scale)


# ------------------------------------------------------------------ RoPE
@pytest.mark.parametrize("t,h,d", [(1, 1, 2), (5, 3, 64), (4, 7, 128), (3, 2, 80), (2, 33, 16)])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("fly", [False, True])
def test_rope_matches_references(t, h, d, interleaved, fly):
    g = _gen(t * h * d)
    x = torch.randn(t, h, d, generator=g).half()
    pos = torch.randint(0, 512, (t,), generator=g)
    y = L.rope(x, pos, interleaved, table=None if fly else L.rope_table(512, d),
               inv_freq=L.rope_inv_freq(d) if fly else None)
    if interleaved:
        ref = L.rope_reference_interleaved(x, pos)
    else:
        cos, sin = TT.rope_cos_sin(pos, d)
        ref = TT.apply_rope(x.float(), cos[:, None, :], sin[:, None, :])
    a = x.float().abs()
    pair = a[..., 0::2] + a[..., 1::2] if interleaved else a[..., : d // 2] + a[..., d // 2:]
    bound = 2.0**-10 * (pair.repeat_interleave(2, -1) if interleaved else torch.cat([pair, pair], -1)) + 1e-6
    assert ((y.float() - ref).abs() <= bound).all()


def test_rope_layouts_differ_by_a_permutation_and_rope_is_relative():
    d = 32
    x = torch.randn(3, 2, d)
    pos = torch.tensor([0, 5, 900])
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    table = L.rope_table(1024, d)
    gptj = L.rope(x, pos, True, table=table)
    neox = L.rope(x[..., perm].contiguous(), pos, False, table=table)
    torch.testing.assert_close(gptj[..., perm], neox, rtol=0, atol=1e-6)
    # a score between positions m and n depends on m - n only (the page's relative property)
    q, k = torch.randn(1, 1, d), torch.randn(1, 1, d)
    def score(m, n):
        return (L.rope(q, torch.tensor([m]), True, table=table) * L.rope(k, torch.tensor([n]), True, table=table)).sum()
    assert score(10, 3).item() == pytest.approx(score(507, 500).item(), abs=1e-4)


# ------------------------------------------------------------------ embedding
@pytest.mark.parametrize("vocab,d,n", [(1, 1, 1), (50, 33, 40), (7, 1030, 12), (100, 8, 0), (1000, 64, 300)])
def test_embedding_forward_and_backward(vocab, d, n):
    g = _gen(vocab + d + n)
    weight = torch.randn(vocab, d, generator=g).half()
    probs = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    idx = torch.multinomial(probs, n, replacement=True, generator=g) if n else torch.empty(0, dtype=torch.int64)
    if n:
        assert torch.equal(L.embedding(idx, weight), F.embedding(idx, weight))
    grad = torch.randn(n, d, generator=g)
    ref = torch.ops.aten.embedding_dense_backward(grad.double(), idx, vocab, -1, False)
    scale = torch.ops.aten.embedding_dense_backward(grad.double().abs(), idx, vocab, -1, False)
    c = int(torch.bincount(idx, minlength=vocab).max()) if n else 0
    w_leaf = weight.float().requires_grad_()
    F.embedding(idx, w_leaf).backward(grad)
    for dw in (L.embedding_backward(idx, grad, vocab, "atomic"), L.embedding_backward(idx, grad, vocab, "sorted"),
               w_leaf.grad):
        assert dw.shape == (vocab, d)
        assert ((dw.double() - ref).abs() <= c * U32 / (1 - c * U32) * scale).all()


def test_sorted_backward_is_deterministic_and_sums_in_sorted_order():
    idx = torch.tensor([3, 1, 3, 3, 0, 1])
    grad = torch.tensor([[1e8], [1.0], [1.0], [-1e8], [2.0], [3.0]])
    dw = L.embedding_backward(idx, grad, 5, "sorted")
    # row 3 gets grad rows 0, 2, 3 in that (stable) order: (1e8 + 1) - 1e8 = 0 in fp32
    assert dw[3].item() == ((np.float32(1e8) + np.float32(1.0)) - np.float32(1e8))
    assert dw[1].item() == 4.0 and dw[0].item() == 2.0 and dw[2].item() == 0.0 and dw[4].item() == 0.0
    assert all(torch.equal(dw, L.embedding_backward(idx, grad, 5, "sorted")) for _ in range(3))


# ------------------------------------------------------------------ activations
ACTS = {"gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "silu": F.silu,
        "sigmoid": torch.sigmoid, "hardswish": F.hardswish}


def _every_fp16():
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16)
    return bits[bits.isfinite()]


@pytest.mark.parametrize("kind", list(ACTS))
def test_activations_fp16_exhaustive_and_fp32(kind):
    x = _every_fp16()
    assert x.numel() == 63488
    exact = ACTS[kind](x.double())
    y = L.activation(x, kind)
    cancel = 4 * U32 * x.double().abs() if kind == "gelu" else 0   # 1 + erf(t) cancels in the left tail
    assert y.dtype == torch.float16 and y.isfinite().all()
    assert ((y.double() - exact).abs() <= _fp16_ulp(exact) + cancel).all()
    y32 = L.activation(x.float(), kind)
    assert ((y32.double() - exact).abs() <= 8 * U32 * exact.abs() + 4 * U32 * x.double().abs() + 2.0**-149).all()
    torch.testing.assert_close(y32, ACTS[kind](x.float()), rtol=1e-5, atol=1e-6)


def test_tanh_gelu_gap_and_fp16_sigmoid_overflow():
    gap, where = L.gelu_tanh_max_gap()
    assert 4.6e-4 < gap < 4.8e-4 and -2.8 < where < -2.6           # the figure the page quotes
    x = torch.tensor([11.0, 12.0, 20.0, -20.0], dtype=torch.float16)
    naive = torch.exp(x) / (1 + torch.exp(x))
    assert naive[1:3].isnan().all() and naive[0].isfinite()        # e^x overflows fp16 from x > 11.09
    assert math.log(65504) == pytest.approx(11.09, abs=0.005)
    assert L.activation(x, "sigmoid").isfinite().all()


@pytest.mark.parametrize("t,f", [(1, 1), (7, 300), (3, 1025)])
def test_swiglu_on_the_halves_of_one_projection(t, f):
    gu = torch.randn(t, 2 * f, generator=_gen(f)).half()
    g, u = gu.chunk(2, dim=-1)                                     # strided views, no copy
    y = L.swiglu(g, u)
    exact = F.silu(g.double()) * u.double()
    assert ((y.double() - exact).abs() <= _fp16_ulp(exact)).all()


# ------------------------------------------------------------------ merge of attention states
@pytest.mark.parametrize("t,h,d,s1,s2", [(3, 4, 16, 7, 13), (5, 2, 64, 1, 40), (4, 3, 32, 0, 9), (2, 1, 24, 5, 0),
                                         (1, 1, 128, 300, 200)])
def test_merge_equals_sdpa_over_all_keys(t, h, d, s1, s2):
    g = _gen(t + s1 + s2)
    q = torch.randn(t, h, d, generator=g)
    k, v = torch.randn(s1 + s2, h, d, generator=g), torch.randn(s1 + s2, h, d, generator=g)
    o1, l1 = L.attention_with_lse(q, k[:s1], v[:s1])
    o2, l2 = L.attention_with_lse(q, k[s1:], v[s1:])
    o, lse = L.merge_states(o1, l1, o2, l2)
    full = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)).transpose(0, 1)
    torch.testing.assert_close(o, full, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lse, L.attention_with_lse(q, k, v)[1], rtol=1e-5, atol=1e-5)
    oe, le = L.merge_states_torch(o1, l1, o2, l2)
    torch.testing.assert_close(oe, o, rtol=1e-5, atol=1e-6)


def test_merge_is_stable_and_handles_empty_segments():
    o_a, o_b = torch.ones(1, 1, 4), torch.zeros(1, 1, 4)
    o, lse = L.merge_states(o_a, torch.tensor([[1000.0]]), o_b, torch.tensor([[999.0]]))
    assert torch.allclose(o, torch.full_like(o, 1 / (1 + math.exp(-1))))
    assert lse.item() == pytest.approx(1000 + math.log1p(math.exp(-1)), abs=1e-3)
    ninf = torch.tensor([[float("-inf")]])
    o, lse = L.merge_states(o_a, ninf, o_b, ninf)                   # both empty: zeros, -inf
    assert (o == 0).all() and lse.item() == float("-inf")
    o, lse = L.merge_states(o_a, ninf, o_b, torch.tensor([[3.0]]))  # one empty: the other
    assert (o == 0).all() and lse.item() == 3.0
    # merging is associative: three segments merged in either order give the same output
    g = _gen(7)
    parts = [(torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, generator=g)) for _ in range(3)]
    ab = L.merge_states(*parts[0], *parts[1])
    left = L.merge_states(*ab, *parts[2])
    bc = L.merge_states(*parts[1], *parts[2])
    right = L.merge_states(*parts[0], *bc)
    torch.testing.assert_close(left[0], right[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(left[1], right[1], rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ NMS
@pytest.mark.parametrize("n", [0, 1, 2, 63, 64, 65, 129, 300])
@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_nms_bitmask_equals_greedy_reference(n, thr):
    rng = np.random.default_rng(n)
    xy = rng.integers(0, 800, (n, 2)) / 8           # multiples of 1/8: fp32 areas are exact
    wh = rng.integers(8, 400, (n, 2)) / 8
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.permutation(n).astype(np.float32)
    got = L.nms(torch.from_numpy(boxes), torch.from_numpy(scores), thr).numpy()
    assert np.array_equal(got, DET.nms(boxes.astype(np.float64), scores, thr))


def test_nms_identical_and_disjoint_boxes():
    boxes = torch.tensor([[0, 0, 10, 10], [0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 0, 0.0]])
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    # the duplicate is suppressed; the empty box has IoU 0 (0/0 is never a hit) and is kept
    assert L.nms(boxes, scores, 0.5).tolist() == [0, 2, 3]


def test_page_embeds_the_listings():
    text = PAGE.read_text(encoding="utf-8")
    for section in ("cost", "gemv", "dot", "rope", "embedding", "activation", "merge", "nms"):
        assert f'--8<-- "code/operator/llm_kernels.py:{section}"' in text


# ------------------------------------------------------------------ the lab's bench cell, at toy sizes
def test_lab_bench_cases_check_every_rung_on_cpu():
    """The cells `python -m bench` runs (setup, kernel, bench), with bench_cases at toy dimensions: every rung
    runs, passes its check on a poisoned output, and is charged its own operator's bytes."""
    import os
    import runpy

    from bench.__main__ import run_rungs
    from tools import labs

    os.environ["LAB_FORCE_CPU"] = "1"
    module = labs.as_module(ROOT / "notebooks" / "operator" / "llm-kernels-lab.ipynb", {labs.SETUP_TAG, "kernel", "bench"})
    ns = runpy.run_path(str(module), run_name="__lab__")
    assert ns["ON_GPU"] is False and set(ns["BENCH_REFERENCE"]) == set(ns["RUNGS"])
    case = ns["bench_cases"](4096, hidden=64, heads=2, head_dim=32, vocab=100)
    assert set(case["runs"]) == set(ns["RUNGS"])
    results, skipped = run_rungs(case, 4096, timer=lambda fn: 1.0, sync=lambda: None, unavailable={}, log=lambda m: None)
    assert not skipped, skipped
    by = {r["rung"]: r for r in results}
    assert by["triton-gemv-vec"]["bytes"] == L.gemv_traffic(64, 64)[1]
    assert by["triton-swiglu"]["bytes"] == L.swiglu_traffic(4096) and by["torch-dot"]["bytes"] == 4 * 4096
    for rung, ref in ns["BENCH_REFERENCE"].items():   # a rung and its reference are charged the same bytes
        refs = [ref] if isinstance(ref, str) else ref
        assert all(by[r]["bytes"] == by[rung]["bytes"] for r in refs), rung
