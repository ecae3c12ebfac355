"""code/algorithm/networks.py against PyTorch and independent computations."""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("algorithm_networks", ROOT / "code" / "algorithm" / "networks.py")
net = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(net)


@pytest.mark.parametrize("c_in,c_out,k,stride,groups", [(16, 32, 3, 1, 1), (8, 8, 3, 2, 8), (6, 12, 5, 1, 3), (64, 128, 1, 1, 1)])
def test_conv_params_and_flops_match_torch(c_in, c_out, k, stride, groups):
    from torch.utils.flop_counter import FlopCounterMode

    conv = torch.nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, groups=groups)
    x = torch.randn(1, c_in, 20, 20)
    with FlopCounterMode(display=False) as counter:
        y = conv(x)
    params, flops = net.conv2d_cost(c_in, c_out, k, y.shape[2], y.shape[3], groups=groups)
    assert params == sum(p.numel() for p in conv.parameters())
    assert flops == counter.get_total_flops()       # PyTorch counts 2 FLOPs per MAC, bias excluded


def test_resnet_layer_numbers_on_the_page():
    params, flops = net.conv2d_cost(256, 256, 3, 56, 56, bias=False)
    assert params == 589_824 and flops == 3_699_376_128


@pytest.mark.parametrize("layers", [
    [(3, 1, 1)] * 3,
    [(7, 2, 1), (3, 2, 1), (3, 1, 1), (3, 1, 1)],
    [(3, 1, 1), (3, 1, 2), (3, 1, 4)],
])
def test_receptive_field_matches_autograd(layers):
    torch.manual_seed(0)
    mods = [torch.nn.Conv2d(1, 1, k, stride=s, dilation=d, bias=False) for k, s, d in layers]
    for m in mods:
        torch.nn.init.constant_(m.weight, 1.0)      # positive weights: no accidental cancellation
    x = torch.zeros(1, 1, 96, 96, requires_grad=True)
    y = x
    for m in mods:
        y = m(y)
    y[0, 0, y.shape[2] // 2, y.shape[3] // 2].backward()
    rows = torch.nonzero(x.grad[0, 0].abs().sum(1))
    r, _ = net.receptive_field(layers)
    assert rows.max().item() - rows.min().item() + 1 == r


def test_three_3x3_convs_see_7x7():
    assert net.receptive_field([(3, 1, 1)] * 3)[0] == 7
    assert net.conv2d_cost(64, 64, 3, 1, 1, bias=False)[0] * 3 < net.conv2d_cost(64, 64, 7, 1, 1, bias=False)[0]


def test_lstm_cell_matches_torch():
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(5, 7).double()
    x, h, c = torch.randn(3, 5).double(), torch.randn(3, 7).double(), torch.randn(3, 7).double()
    h_ref, c_ref = cell(x, (h, c))
    h_new, c_new = net.lstm_cell(x, h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    assert torch.allclose(h_new, h_ref, atol=1e-12) and torch.allclose(c_new, c_ref, atol=1e-12)
    assert sum(p.numel() for p in cell.parameters()) == 4 * (7 * (5 + 7) + 2 * 7)


def test_lstm_gradient_through_cell_path_is_the_forget_gate():
    torch.manual_seed(1)
    cell = torch.nn.LSTMCell(4, 6).double()
    x, h = torch.randn(1, 4).double(), torch.randn(1, 6).double()
    c = torch.randn(1, 6, dtype=torch.float64, requires_grad=True)
    _, c_new = net.lstm_cell(x, h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    jac = torch.autograd.functional.jacobian(
        lambda cc: net.lstm_cell(x, h, cc, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)[1], c)
    gates = x @ cell.weight_ih.T + cell.bias_ih + h @ cell.weight_hh.T + cell.bias_hh
    f = torch.sigmoid(gates.chunk(4, -1)[1])
    assert torch.allclose(jac[0, :, 0, :], torch.diag(f[0]), atol=1e-12)   # h fixed: dc_t/dc_{t-1} = diag(f)


def test_gan_optimal_discriminator_and_js_identity():
    rng = np.random.default_rng(0)
    p = rng.random(10); p /= p.sum()
    q = rng.random(10); q /= q.sum()
    d_star = net.optimal_discriminator(p, q)
    v_star = net.gan_value(p, q, d_star)
    assert math.isclose(v_star, -math.log(4) + 2 * net.js_divergence(p, q), rel_tol=1e-12)
    for _ in range(20):                                 # any other D does worse
        d = np.clip(d_star + rng.normal(0, 0.05, 10), 1e-3, 1 - 1e-3)
        assert net.gan_value(p, q, d) <= v_star + 1e-12
    assert math.isclose(net.js_divergence(p, p), 0.0, abs_tol=1e-15)
    # disjoint supports: JS = log 2 whatever the distance
    assert math.isclose(net.js_divergence(np.array([1.0, 0, 0]), np.array([0, 0, 1.0])), math.log(2))


def test_gaussian_kl_and_reparameterisation():
    torch.manual_seed(0)
    mu, logvar = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    q = torch.distributions.Normal(mu, (0.5 * logvar).exp())
    ref = torch.distributions.kl_divergence(q, torch.distributions.Normal(0.0, 1.0)).sum(-1)
    assert torch.allclose(net.gaussian_kl(mu, logvar), ref, atol=1e-12)
    mu.requires_grad_(True)
    z = net.reparameterise(mu, logvar, torch.randn(4, 3, dtype=torch.float64))
    z.sum().backward()
    assert torch.allclose(mu.grad, torch.ones_like(mu))


def test_ddpm_closed_form_marginal_and_posterior():
    betas, alphas, abar = net.ddpm_schedule(T=200)
    torch.manual_seed(0)
    x0 = torch.full((20000, 1), 2.0, dtype=torch.float64)
    x = x0.clone()
    t = 120
    for s in range(t + 1):                               # step-by-step forward chain
        x = alphas[s].sqrt() * x + betas[s].sqrt() * torch.randn_like(x)
    # 20000 samples of variance 1 - abar_t ~ 0.52: standard errors of the mean and of the variance
    # are both ~0.005, so 0.03 is about 6 sigma (and still far below the signal 2 sqrt(abar_t) ~ 1.4)
    assert abs(x.mean().item() - 2.0 * abar[t].sqrt().item()) < 0.03
    assert abs(x.var().item() - (1 - abar[t]).item()) < 0.03
    # the noise-prediction mean equals the true posterior mean when eps_hat is the true noise
    eps = torch.randn(5, 2, dtype=torch.float64)
    x0 = torch.randn(5, 2, dtype=torch.float64)
    xt = net.q_sample(x0, torch.full((5,), t), abar, eps)
    assert torch.allclose(net.p_mean_from_eps(xt, t, eps, betas, alphas, abar),
                          net.posterior_mean(x0, xt, t, betas, alphas, abar), atol=1e-10)
