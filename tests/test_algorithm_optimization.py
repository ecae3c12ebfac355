"""code/algorithm/optim.py: initialisation variance claims and optimiser updates against torch."""
from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("algorithm_optim", ROOT / "code" / "algorithm" / "optim.py")
O = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(O)


def test_torch_init_stds_match_the_formulas():
    torch.manual_seed(0)
    w = torch.empty(1024, 2048)                     # (fan_out, fan_in) for nn.Linear
    torch.nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w.std().item() / math.sqrt(2 / 2048) - 1) < 0.01     # 2M samples: s.e. of std ~0.05 %
    torch.nn.init.xavier_uniform_(w)
    bound = math.sqrt(6 / (2048 + 1024))            # uniform(-a, a) has variance a^2 / 3 = 2 / (fan_in + fan_out)
    assert w.abs().max().item() <= bound and abs(w.var().item() / (2 / 3072) - 1) < 0.01


def test_kaiming_keeps_relu_signal_and_xavier_halves_it():
    relu = torch.relu
    kaiming = O.second_moments_through_depth(O.kaiming_std, relu, depth=30)
    xavier = O.second_moments_through_depth(O.xavier_std, relu, depth=30)
    # Kaiming: E[h^2] stays ~1 (each layer multiplies it by 2 * 1/2 = 1); finite width adds drift
    assert all(0.5 < m < 2.0 for m in kaiming)
    # Xavier with fan_in = fan_out gives Var(w) = 1/n, so each ReLU layer multiplies E[h^2] by 1/2
    ratios = [b / a for a, b in zip(xavier, xavier[1:])]
    assert abs(sum(ratios) / len(ratios) - 0.5) < 0.02
    assert xavier[-1] < 1e-8


def test_xavier_suits_tanh_and_too_small_init_vanishes():
    tanh = O.second_moments_through_depth(O.xavier_std, torch.tanh, depth=30)
    small = O.second_moments_through_depth(lambda i, o: 0.5 / math.sqrt(i), torch.tanh, depth=30)
    assert tanh[-1] > 0.01                           # shrinks only slowly (tanh saturates, ~1/sqrt(l))
    assert small[-1] < 1e-15                         # gain 0.5 < 1: geometric decay 0.25^l


@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_and_adamw_match_torch(decoupled):
    torch.manual_seed(1)
    p0 = torch.randn(10, dtype=torch.float64)
    target = torch.randn(10, dtype=torch.float64)
    mine, state = p0.clone(), {}
    ref = p0.clone().requires_grad_(True)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls([ref], lr=0.05, weight_decay=0.1)
    for _ in range(50):
        O.adam_step(mine, 2 * (mine - target), state, lr=0.05, weight_decay=0.1, decoupled=decoupled)
        opt.zero_grad()
        ((ref - target) ** 2).sum().backward()
        opt.step()
    torch.testing.assert_close(mine, ref.detach(), rtol=1e-12, atol=1e-12)


def test_adam_l2_decay_is_normalised_away_but_adamw_is_not():
    """With no loss gradient, Adam + L2 moves every weight by ~lr per step whatever the decay
    strength (m/sqrt(v) = sign), while AdamW shrinks by the factor (1 - lr * wd) as intended."""
    p0 = torch.tensor([1.0, 1.0], dtype=torch.float64)
    results = {}
    for wd in (1e-4, 1e-2):
        adam = torch.nn.Parameter(p0.clone())
        adamw = torch.nn.Parameter(p0.clone())
        o1 = torch.optim.Adam([adam], lr=1e-3, weight_decay=wd)
        o2 = torch.optim.AdamW([adamw], lr=1e-3, weight_decay=wd)
        for _ in range(100):
            for p, o in ((adam, o1), (adamw, o2)):
                o.zero_grad()
                p.grad = torch.zeros_like(p)
                o.step()
        results[wd] = (adam.item() if adam.numel() == 1 else adam[0].item(), adamw[0].item())
    # Adam + L2: about 100 * lr = 0.1 of shrinkage for both decay strengths (100x apart); slightly
    # less than 0.1 because v (beta2 = 0.999) remembers the larger early gradients wd * p
    assert all(0.895 < results[wd][0] < 0.905 for wd in results)
    assert abs(results[1e-4][0] - results[1e-2][0]) < 0.005
    # AdamW: (1 - lr wd)^100, i.e. 0.99999 and 0.999
    assert abs(results[1e-4][1] - (1 - 1e-7) ** 100) < 1e-12
    assert abs(results[1e-2][1] - (1 - 1e-5) ** 100) < 1e-12


def test_sgd_momentum_matches_torch():
    torch.manual_seed(2)
    p0 = torch.randn(6, dtype=torch.float64)
    mine, state = p0.clone(), {}
    ref = p0.clone().requires_grad_(True)
    opt = torch.optim.SGD([ref], lr=0.01, momentum=0.9, weight_decay=1e-3)
    for _ in range(30):
        O.sgd_momentum_step(mine, 2 * mine ** 3, state, lr=0.01, weight_decay=1e-3)
        opt.zero_grad()
        (0.5 * ref ** 4).sum().backward()
        opt.step()
    torch.testing.assert_close(mine, ref.detach(), rtol=1e-12, atol=1e-12)


def test_warmup_cosine_endpoints():
    lrs = [O.warmup_cosine(s, 1.0, 10, 110, 0.1) for s in range(111)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0) and lrs[10] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.55) and lrs[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


def test_inverted_dropout_preserves_the_mean():
    torch.manual_seed(3)
    x = torch.ones(1_000_000)
    y = torch.nn.functional.dropout(x, p=0.3, training=True)
    assert abs(y.mean().item() - 1.0) < 0.005       # s.e. = sqrt(0.3/0.7/1e6) ~ 6.5e-4
    vals = torch.unique(y)
    assert len(vals) == 2 and vals[0] == 0 and abs(vals[1].item() - 1 / 0.7) < 1e-6
