"""code/algorithm/precision_debug.py against float64 references, torch.amp.GradScaler and exact arithmetic
(docs/algorithm/precision-debugging.md)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithm_helpers import load_listing

P = load_listing("algorithm_precision_debug", "precision_debug.py")
torch.set_num_threads(1)
D, T = 64, 16


def _x(seed=1, b=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, T, D, generator=g, dtype=torch.float64)


def test_unit_roundoff_and_reduction_bounds():
    assert P.unit_roundoff(torch.float16) == 2.0 ** -11 == np.finfo(np.float16).eps / 2
    assert P.unit_roundoff(torch.bfloat16) == 2.0 ** -8
    assert P.unit_roundoff(torch.float32) == 2.0 ** -24 == np.finfo(np.float32).eps / 2
    # u is the largest relative error of round-to-nearest: measure it on random float64 values
    x = torch.exp(torch.empty(200_000, dtype=torch.float64).uniform_(-5, 5, generator=torch.Generator().manual_seed(0)))
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        worst = ((x.to(dt).double() - x).abs() / x).max().item()
        assert 0.95 * P.unit_roundoff(dt) < worst <= P.unit_roundoff(dt)
    k, u = 1000, 2.0 ** -24
    assert P.reduction_error(k, torch.float32, worst=True) == pytest.approx(k * u / (1 - k * u))
    assert P.reduction_error(4096, torch.bfloat16, worst=True) == math.inf       # 4096 * 2^-8 >= 1
    assert P.reduction_error(4096, torch.bfloat16) == 0.25                         # sqrt(4096) * 2^-8
    # a float32 sum of 1000 positive numbers stays inside the worst-case bound against float64
    g = torch.Generator().manual_seed(0)
    v = torch.rand(k, generator=g, dtype=torch.float64)
    s32 = 0.0
    acc = torch.zeros((), dtype=torch.float32)
    for t in v.float():
        acc = acc + t
    s32 = acc.double().item()
    assert abs(s32 - v.sum().item()) <= P.reduction_error(k, torch.float32, worst=True) * v.sum().item()


def test_fp16_range_numbers_on_the_page():
    """fp16: max 65504, smallest normal 2^-14, smallest subnormal 2^-24; <= 2^-25 rounds to 0; e^x overflows
    past ln(65504) ~ 11.09 (values >= 65520 round to inf). numpy's float16 agrees with torch."""
    fi = torch.finfo(torch.float16)
    assert fi.max == 65504 and fi.smallest_normal == 2.0 ** -14
    v = torch.tensor([2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * (1 + 2 ** -10), 65519.0, 65520.0], dtype=torch.float64)
    got = v.half().double().tolist()
    assert got == [2.0 ** -24, 0.0, 2.0 ** -24, 65504.0, math.inf]
    with np.errstate(over="ignore"):                          # 65520 -> inf is the point
        assert got == v.numpy().astype(np.float16).astype(np.float64).tolist()
    e = torch.exp(torch.tensor([11.08, 11.10], dtype=torch.float16))
    assert math.isfinite(e[0].item()) and e[1].item() == math.inf
    assert round(math.log(65504), 2) == 11.09
    # bf16 keeps the fp32 exponent range: same smallest normal, max about 3.39e38
    assert torch.finfo(torch.bfloat16).smallest_normal == torch.finfo(torch.float32).smallest_normal
    assert torch.tensor(1e-30).bfloat16().item() != 0 and torch.tensor(1e-30).half().item() == 0


def test_assert_close_default_tolerances_table():
    """The page's table, checked through the public API: a value just inside atol + rtol*|e| passes and
    the next representable value outside it fails (e chosen so that atol does not dominate where needed)."""
    cases = [  # dtype, expected, inside, outside
        (torch.float16, 1.0, 1 + 2 ** -10, 1 + 2 * 2 ** -10),                 # rtol 1e-3
        (torch.bfloat16, 1.0, 1 + 2 * 2 ** -7, 1 + 3 * 2 ** -7),              # rtol 1.6e-2
        (torch.float32, 1000.0, 1000 + 21 * 2 ** -14, 1000 + 22 * 2 ** -14),  # 1e-5 + 1.3e-6 * 1000
        (torch.float64, 1.0, 1 + 1.9e-7, 1 + 2.1e-7),                         # 1e-7 + 1e-7
    ]
    for dt, e, inside, outside in cases:
        exp_t = torch.tensor([e], dtype=dt)
        torch.testing.assert_close(torch.tensor([inside], dtype=dt), exp_t)
        with pytest.raises(AssertionError):
            torch.testing.assert_close(torch.tensor([outside], dtype=dt), exp_t)


def test_clean_model_passes_in_fp16_and_bf16():
    ref, x = P.make_model(), _x()
    for dt in (torch.float16, torch.bfloat16):
        rows, culprit = P.compare_layers(ref, P.cast_model(ref, dt), x, dt, P.created_tolerance(dt, 4 * D))
        assert culprit is None, rows
        assert all(math.isfinite(r["total"]) for r in rows)


def test_naive_softmax_is_located():
    ref, x = P.make_model(), _x()
    with torch.no_grad():
        ref.blocks[1].attn.q.weight.mul_(20.0)      # sharp attention: logits well above 11.09
    test = P.cast_model(ref, torch.float16)
    test.blocks[1].attn.softmax.subtract_max = False
    tol = P.created_tolerance(torch.float16, 4 * D)
    rows, culprit = P.compare_layers(ref, test, x, torch.float16, tol)
    assert culprit == "blocks.1.attn.softmax"
    assert P.first_nonfinite(test, x.half()) == "blocks.1.attn.softmax"
    test.blocks[1].attn.softmax.subtract_max = True
    assert P.compare_layers(ref, test, x, torch.float16, tol)[1] is None


def test_one_pass_layernorm_is_located():
    ref, x = P.make_model(), _x()
    with torch.no_grad():
        ref.blocks[0].fc2.bias.fill_(32.0)          # residual stream of block 1 gets mean 32
    for dt in (torch.float16, torch.bfloat16):
        test = P.cast_model(ref, dt)
        for m in test.modules():
            if isinstance(m, P.LayerNorm):
                m.one_pass = True
        tol = P.created_tolerance(dt, 4 * D)
        assert P.compare_layers(ref, test, x, dt, tol)[1] == "blocks.1.ln1"
        for m in test.modules():
            if isinstance(m, P.LayerNorm):
                m.one_pass = False
        assert P.compare_layers(ref, test, x, dt, tol)[1] is None


def test_scale_after_qk_overflow_is_located():
    ref, x = P.make_model(), _x()
    with torch.no_grad():
        ref.blocks[2].attn.q.weight.mul_(120.0)
        ref.blocks[2].attn.k.weight.copy_(ref.blocks[2].attn.q.weight)
    test = P.cast_model(ref, torch.float16)
    test.blocks[2].attn.scores.scale_q_first = False
    tol = P.created_tolerance(torch.float16, 4 * D)
    assert P.compare_layers(ref, test, x, torch.float16, tol)[1] == "blocks.2.attn.scores"
    test.blocks[2].attn.scores.scale_q_first = True
    assert P.compare_layers(ref, test, x, torch.float16, tol)[1] is None


def test_bisect_by_upcasting_one_module():
    ref, x = P.make_model(), _x()
    with torch.no_grad():
        ref.blocks[1].attn.q.weight.mul_(20.0)
    test = P.cast_model(ref, torch.float16)
    test.blocks[1].attn.softmax.subtract_max = False
    assert not torch.isfinite(test(x.half())).all()
    P.keep_in_high_precision(test, ["blocks.1.attn.softmax"])
    out = test(x.half())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()


def test_sensitivity_ranks_planted_outlier_first_and_per_channel_fixes_it():
    ref, x = P.make_model(), _x()
    with torch.no_grad():
        ref.blocks[1].fc1.weight[7].mul_(40.0)      # one output channel 40x larger than the rest
    mse = lambda y, r: ((y - r) ** 2).mean().item()  # noqa: E731
    ranking = P.layer_sensitivity(ref, x, lambda w: P.fake_quant(w, 4), mse)
    assert ranking[0][0] == "blocks.1.fc1"
    per_ch = dict(P.layer_sensitivity(ref, x, lambda w: P.fake_quant(w, 4, per_channel=True), mse))
    assert per_ch["blocks.1.fc1"] < ranking[0][1] / 10


def test_loss_scaler_matches_gradscaler_schedule():
    mine = P.LossScaler(init=2.0 ** 4, interval=3)
    ref = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4, growth_interval=3)
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.0)
    for finite in [True, True, True, False, True, True, True, True, False, False]:
        opt.zero_grad()
        loss = (p * (1.0 if finite else math.inf)).sum()
        ref.scale(loss).backward()
        ref.step(opt)
        ref.update()
        _, ok = mine.unscale_and_check([p.grad])   # same finite/non-finite decision
        assert ok == finite
        mine.update(ok)
        assert mine.scale == ref.get_scale()


def test_fp16_gradient_underflow_and_loss_scaling():
    g = torch.full((4,), 2.0 ** -26, dtype=torch.float64)   # below half the smallest fp16 subnormal
    assert (g.half() == 0).all()
    s = P.LossScaler()
    scaled = (g * s.scale).half()                            # 2^-10: a normal fp16 number
    back, ok = s.unscale_and_check([scaled])
    assert ok and torch.equal(back[0].double(), g)
    # the same through a real backward pass, AMP-style: fp16 activations, fp32 loss. The gradient that
    # flows back into the fp16 part is c = 2^-26 (or c * S) and is rounded to fp16 there.
    gen = torch.Generator().manual_seed(0)
    x64 = torch.rand(64, generator=gen, dtype=torch.float64) + 0.5
    c = 2.0 ** -26
    w64 = torch.ones(64, dtype=torch.float64, requires_grad=True)
    (c * (w64 * x64).sum()).backward()                        # float64 reference gradient c * x
    for scale in (1.0, s.scale):
        w = torch.ones(64, dtype=torch.float16, requires_grad=True)
        loss = c * (w * x64.half()).sum().float()              # fp32 loss
        (loss * scale).backward()
        assert w.grad.dtype == torch.float16
        grad = w.grad.float() / scale                          # unscale in fp32
        if scale == 1.0:
            assert (grad == 0).all()                           # every gradient underflowed
        else:                                                  # x and the product each rounded once
            torch.testing.assert_close(grad.double(), w64.grad, rtol=2 * 2.0 ** -11, atol=0)


def test_bf16_update_lost_and_recovered():
    lr_g, n = 1e-3, 200                   # 1e-3 < 2^-9: half the bf16 spacing just below 1
    assert P.sgd_bf16(1.0, lr_g, n, "naive") == 1.0
    exact = 1.0 - n * lr_g
    nearest = torch.tensor(exact, dtype=torch.float64).bfloat16().item()   # 0.80078125
    assert P.sgd_bf16(1.0, lr_g, n, "master") == nearest
    assert P.sgd_bf16(1.0, lr_g, n, "kahan") == pytest.approx(exact, abs=2.0 ** -9)   # half the bf16 spacing at 0.8
    sr = [P.sgd_bf16(1.0, lr_g, n, "stochastic", seed=s) for s in range(8)]
    assert abs(sum(sr) / len(sr) - exact) < 0.02
