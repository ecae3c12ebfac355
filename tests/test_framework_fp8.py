"""code/framework/fp8.py: FP8 quantisation bounds from each format's ulp, the ordering of errors across
scaling granularities, the emulated scaled GEMM against torch._scaled_mm, the FP8 linear's gradients,
delayed against current scaling, and a short training run against BF16 (docs/framework/fp8-training.md)."""
from __future__ import annotations

import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import fp8  # noqa: E402

FORMATS = [fp8.E4M3, fp8.E5M2]


@pytest.fixture
def one_thread():
    """Small CPU matmuls: one thread is faster than two fighting over a loaded machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_format_constants_match_torch():
    for dt in FORMATS:
        fi = torch.finfo(dt)
        assert fp8.FMAX[dt] == fi.max
        assert 2.0 ** fp8.EMIN[dt] == fi.smallest_normal
        assert fi.eps == 2.0 ** -fp8.MANT[dt]             # ulp of 1.0 = 2^-mantissa bits
    assert fp8.FMAX[fp8.E4M3] == 448 and fp8.FMAX[fp8.E5M2] == 57344


@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize("granularity", ["tensor", "row", "block"])
def test_roundtrip_within_half_ulp(dtype, granularity):
    """|x - deq(q(x))| <= max(2^-(m+1) |x|, s 2^(emin-m-1)): half an ulp in the normal range, half the
    subnormal spacing below it. The slack 1 + 2^-20 covers the fp32 rounding of x / s."""
    x, _ = fp8.outlier_activations(m=256, k=512)
    block = fp8.operand_blocks(granularity, "a", weight=False)
    for pow2 in (False, True):
        q, s = fp8.quantize_blocks(x, block, dtype, pow2)
        s_full = fp8.expand_scales(s, block, x.shape)
        err = (fp8.dequantize(q, s_full) - x).abs()
        assert (err <= fp8.roundtrip_bound(x, s_full, dtype) * (1 + 2 ** -20)).all()
        assert (x.abs() <= s_full * fp8.FMAX[dtype] * (1 + 2 ** -20)).all()   # the amax never overflows


def test_saturation_and_exact_grid_points():
    s = torch.tensor(1.0)
    assert fp8.dequantize(fp8.quantize(torch.tensor([1e6, -1e6]), s, fp8.E4M3), s).tolist() == [448.0, -448.0]
    assert fp8.dequantize(fp8.quantize(torch.tensor([1e9]), s, fp8.E5M2), s).tolist() == [57344.0]
    grid = torch.tensor([2.0 ** -9, 2.0 ** -6, 1.0, 1.125, 240.0, 448.0])   # representable in E4M3
    assert torch.equal(fp8.dequantize(fp8.quantize(grid, s, fp8.E4M3), s), grid)


def _err(t, granularity, side, weight, pow2):
    block = fp8.operand_blocks(granularity, side, weight)
    q, s = fp8.quantize_blocks(t, block, fp8.E4M3, pow2)
    return (fp8.dequantize_blocks(q, s, block) - t).abs()


def test_power_of_two_scales_order_errors_elementwise():
    """With power-of-two scales the coarser grid (bigger scale) is a subset of the finer one, so every
    element's error satisfies block <= row <= tensor, for activations (1x128 tiles), the transposed
    activation of the weight-gradient GEMM (128x1 tiles) and weights (128x128 blocks)."""
    x, _ = fp8.outlier_activations()
    w = torch.randn(256, 512, generator=torch.Generator().manual_seed(1)) / 512 ** 0.5
    for t, side, weight in ((x, "a", False), (x.t().contiguous(), "b", False), (w.t().contiguous(), "b", True)):
        e_t, e_r, e_b = (_err(t, g, side, weight, True) for g in ("tensor", "row", "block"))
        assert (e_b <= e_r).all() and (e_r <= e_t).all()
    e_t, e_r, e_b = (_err(x, g, "a", False, True) for g in ("tensor", "row", "block"))
    assert (e_r < e_t).sum() > 1000            # the massive activations push the body into subnormals


def test_granularity_ordering_on_outlier_tensor():
    """Plain amax/448 scales: body error and GEMM output error ordered block <= row <= tensor; BF16 beats all."""
    x, body = fp8.outlier_activations()
    w = torch.randn(256, 512, generator=torch.Generator().manual_seed(1)) / 512 ** 0.5
    y = x @ w.t()
    tokens = body.any(1)                       # the rows without a massive activation
    body_err, out_err = {}, {}
    for g in ("tensor", "row", "block"):
        block = fp8.operand_blocks(g, "a", False)
        q, s = fp8.quantize_blocks(x, block, fp8.E4M3)
        body_err[g] = fp8.rel_error(fp8.dequantize_blocks(q, s, block)[body], x[body])
        out_err[g] = fp8.rel_error(fp8.fp8_gemm(x, w.t(), g, b_weight=True)[tokens], y[tokens])
    assert body_err["block"] <= body_err["row"] <= body_err["tensor"]
    assert out_err["block"] <= out_err["row"] <= out_err["tensor"]
    assert body_err["tensor"] > 1.3 * body_err["block"]
    bf16 = fp8.rel_error(x.bfloat16().float() @ w.bfloat16().float().t(), y)
    assert bf16 < 0.2 * out_err["block"]


def test_emulation_equals_torch_scaled_mm_on_cpu():
    """torch 2.13's CPU torch._scaled_mm supports tensor-wise and row-wise scales: same result as
    dequantise -> fp32 matmul (the emulation), to fp32 accumulation-order rounding."""
    g = torch.Generator().manual_seed(2)
    a, w = torch.randn(64, 96, generator=g) * 3, torch.randn(48, 96, generator=g)
    for dta, dtb in ((fp8.E4M3, fp8.E4M3), (fp8.E5M2, fp8.E4M3)):
        sa, sb = fp8.amax_to_scale(a.abs().amax(), dta), fp8.amax_to_scale(w.abs().amax(), dtb)
        qa, qb = fp8.quantize(a, sa, dta), fp8.quantize(w, sb, dtb)
        ref = torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        mine = fp8.scaled_mm_emulated(qa, sa, qb.t(), sb)
        torch.testing.assert_close(mine, ref, rtol=1e-6, atol=1e-5)
        torch.testing.assert_close(fp8.fp8_gemm(a, w.t(), "tensor", dta, dtb, b_weight=True), ref, rtol=1e-6, atol=1e-5)
    sa = fp8.amax_to_scale(a.abs().amax(1, keepdim=True), fp8.E4M3)              # (m, 1)
    sb = fp8.amax_to_scale(w.abs().amax(1, keepdim=True), fp8.E4M3).t().contiguous()   # (1, n)
    qa, qb = fp8.quantize(a, sa, fp8.E4M3), fp8.quantize(w, sb.t(), fp8.E4M3)
    ref = torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    torch.testing.assert_close(fp8.scaled_mm_emulated(qa, sa, qb.t(), sb), ref, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(fp8.fp8_gemm(a, w.t(), "row", b_weight=True), ref, rtol=1e-6, atol=1e-5)


def test_block_gemm_equals_per_k_block_accumulation():
    """DeepSeek-V3's GEMM: per 128-wide K block, multiply the FP8 values, then apply the tile scale of A and
    the block scale of B and add to an fp32 accumulator. Same result as dequantise -> matmul."""
    g = torch.Generator().manual_seed(3)
    a, w = torch.randn(64, 384, generator=g), torch.randn(256, 384, generator=g)
    qa, sa = fp8.quantize_blocks(a, (1, 128), fp8.E4M3)            # sa: (64, 3)
    qb, sb = fp8.quantize_blocks(w.t(), (128, 128), fp8.E4M3)      # sb: (3, 2)
    acc = torch.zeros(64, 256)
    for kb in range(3):
        part = qa[:, kb * 128:(kb + 1) * 128].float() @ qb[kb * 128:(kb + 1) * 128].float()
        acc += part * sa[:, kb:kb + 1] * sb[kb].repeat_interleave(128)[None, :]
    torch.testing.assert_close(acc, fp8.fp8_gemm(a, w.t(), "block", b_weight=True), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("recipe", ["bf16", "tensor", "row", "block"])
def test_fp8_linear_gradients_track_fp32(recipe, one_thread):
    """The swapped linear's forward and its three GEMMs stay within a few FP8 ulps of the fp32 layer."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 128)
    x = torch.randn(4, 64, 256, requires_grad=True)
    y_ref = lin(x)
    gy = torch.randn_like(y_ref)
    dx_ref, dw_ref = torch.autograd.grad(y_ref, (x, lin.weight), gy)
    sw = fp8.Fp8Linear(lin, recipe)
    y = sw(x)
    dx, dw = torch.autograd.grad(y, (x, lin.weight), gy)
    tol = 0.01 if recipe == "bf16" else 0.08     # E5M2 gradients (tensor recipe) have 2^-3 relative ulps
    for a, b in ((y, y_ref), (dx, dx_ref), (dw, dw_ref)):
        assert fp8.rel_error(a, b) < tol
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    model.head = torch.nn.Linear(8, 2)
    assert fp8.swap_linears(model, recipe) == ["0"]


def test_delayed_scaling_clips_on_an_amax_jump_current_never_does():
    g = torch.Generator().manual_seed(0)
    delayed, clipped, errs = fp8.DelayedScaler(history_len=8), [], []
    for t in range(24):
        sigma = 16.0 if 10 <= t < 16 else 1.0
        x = torch.randn(4096, generator=g) * sigma
        q, s, c = delayed(x)
        qc, sc, cc = fp8.current_scaling(x)
        clipped.append(c)
        errs.append((fp8.rel_error(fp8.dequantize(q, torch.tensor(s)), x),
                     fp8.rel_error(fp8.dequantize(qc, torch.tensor(sc)), x)))
        assert cc == 0
    # the jump saturates a large part of the tensor; elsewhere only a new sample maximum slightly above the
    # history's (a handful of elements) is clipped, which is what the margin is for
    assert clipped[10] > 1000 and max(clipped[:10] + clipped[11:]) < 10
    assert errs[10][0] > 10 * errs[10][1]
    # after the drop the stale 16x scale pushes values towards the subnormals, at little cost in E4M3
    assert all(e[0] < 1.1 * e[1] for e in errs[16:24])
    s_big = fp8.DelayedScaler(history_len=4, margin=5)
    s_big(torch.ones(8))
    assert s_big(torch.full((8,), 20.0))[2] == 0                 # a 2^5 margin absorbs a 20x jump


def test_short_training_block_within_margin_of_bf16(one_thread):
    losses = {}
    corpus = fp8.markov_corpus(6000, 32)
    for r in ("bf16", "tensor", "block"):
        losses[r] = fp8.train_gpt(r, 30, corpus, 32, layers=1, h=128, heads=4, seq=32, batch=4)
    end = {r: sum(v[-10:]) / 10 for r, v in losses.items()}
    assert losses["bf16"][-1] < losses["bf16"][0] - 1.0           # it learns
    for r in ("tensor", "block"):
        assert abs(end[r] - end["bf16"]) < 0.01 * end["bf16"]


@pytest.mark.parametrize("recipe", ["tensor", "row"])
def test_scaled_mm_backend_matches_emulation(recipe, one_thread):
    """The path bench/experiments/fp8_training.py times on the H200 (torch._scaled_mm for all three GEMMs,
    bf16 output) agrees with the emulation to bf16 output rounding; torch 2.13 runs it on the CPU too."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 48)
    x = torch.randn(2, 32, 96, requires_grad=True)
    outs = {}
    for backend in ("emulate", "scaled_mm"):
        y = fp8.Fp8Linear(lin, recipe, backend)(x)
        outs[backend] = (y, *torch.autograd.grad(y.float().square().sum(), (x, lin.weight)))
    for a, b in zip(outs["scaled_mm"], outs["emulate"]):
        assert fp8.rel_error(a.float(), b.float()) < 2e-2
    a, b = torch.randn(64, 96), torch.randn(96, 48)
    torch.testing.assert_close(fp8.scaled_mm_gemm(a, b, recipe, out_dtype=torch.float32),
                               fp8.fp8_gemm(a, b, recipe), rtol=1e-6, atol=1e-5)


def test_mxfp8_floor_scale_clips_a_fifth_of_blocks_rceil_none():
    """OCP MX v1.0: X = 2^(floor(log2 amax) - 8) puts amax / X in [256, 512), above E4M3's 448 for
    log2(512/448) ~ 19% of blocks; rounding amax / 448 up to a power of two (RCEIL) never clips."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 1024, generator=g)
    amax = fp8.group_amax(x, (1, 32))
    s_floor = fp8.mx_floor_scale(amax, fp8.E4M3)
    ratio = amax / s_floor
    assert (ratio >= 256).all() and (ratio < 512).all()
    assert torch.equal(torch.log2(s_floor), torch.log2(s_floor).round())      # E8M0: powers of two
    clipped = (ratio > 448).float().mean().item()
    assert 0.10 < clipped < 0.25
    _, s_rceil = fp8.quantize_blocks(x, (1, 32), fp8.E4M3, pow2=True)
    assert (amax <= s_rceil * 448).all()
    assert fp8.operand_blocks("mx", "a", True) == (1, 32) and fp8.operand_blocks("mx", "b", True) == (32, 1)


def test_page_figures_are_computed():
    """The error figures quoted in docs/framework/fp8-training.md, recomputed (deterministic, no timing)."""
    page = (ROOT / "docs" / "framework" / "fp8-training.md").read_text(encoding="utf-8")
    x, body = fp8.outlier_activations()
    err, sub = {}, 0.0
    for g in ("tensor", "row", "block"):
        block = fp8.operand_blocks(g, "a", False)
        q, s = fp8.quantize_blocks(x, block, fp8.E4M3)
        err[g] = fp8.rel_error(fp8.dequantize_blocks(q, s, block)[body], x[body])
        if g == "tensor":
            sub = (q.float().abs() < 2.0 ** -6)[body].float().mean().item()
    assert f"约 {sub:.0%} 的主体元素落进次正规区，主体的相对误差约 {err['tensor']:.1%}" in page
    assert f"行级与分块分别约 {err['row']:.1%} 与 {err['block']:.1%}" in page
    xs, bd = fp8.outlier_activations(channel_scale=1.0, massive=1e2)
    assert f"比值 100 时误差已达约 {fp8.rel_error(fp8.int8_fake_quant(xs)[bd], xs[bd]):.0%}" in page
    g = torch.Generator().manual_seed(0)
    delayed = fp8.DelayedScaler(history_len=16)
    for t in range(21):
        xt = torch.randn(8192, generator=g) * (16.0 if t >= 20 else 1.0)
        q, s, clipped = delayed(xt)
        qc, sc, _ = fp8.current_scaling(xt)
    assert f"截断了约 {clipped / 8192:.0%} 的元素，相对误差约 {fp8.rel_error(fp8.dequantize(q, torch.tensor(s)), xt):.2f}" in page
    assert f"而当前缩放约 {fp8.rel_error(fp8.dequantize(qc, torch.tensor(sc)), xt):.3f}" in page
    gauss = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
    amax = fp8.group_amax(gauss, (1, 32))
    floor_clipped = (amax > fp8.mx_floor_scale(amax, fp8.E4M3) * 448).float().mean().item()
    assert f"实验在高斯张量上测得约 {floor_clipped:.0%}" in page
