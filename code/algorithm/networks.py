"""Small, checkable formulas behind the classic-networks page (docs/algorithm/classic-networks.md).

Each section is embedded in the page and tested in tests/test_algorithm_networks.py against
PyTorch (parameter counts, FLOP counter, autograd receptive field, nn.LSTMCell) or against an
independent numerical computation (GAN optimum and JS divergence, Gaussian KL, DDPM marginals).
"""
from __future__ import annotations

import math

import numpy as np
import torch


# --8<-- [start:conv]
def conv2d_cost(c_in, c_out, k, h_out, w_out, groups=1, bias=True):
    """Parameters and FLOPs (1 multiply-add = 2 FLOPs) of one Conv2d layer, square kernel k."""
    params = c_out * (c_in // groups) * k * k + (c_out if bias else 0)
    flops = 2 * h_out * w_out * c_out * (c_in // groups) * k * k
    return params, flops


def receptive_field(layers):
    """layers: list of (kernel, stride, dilation). Returns the receptive field of one output
    pixel and the jump (distance in input pixels between adjacent outputs)."""
    r, j = 1, 1
    for k, s, d in layers:
        r += (d * (k - 1)) * j      # each layer widens the field by (effective kernel - 1) jumps
        j *= s
    return r, j
# --8<-- [end:conv]


# --8<-- [start:lstm]
def lstm_cell(x, h, c, W_ih, W_hh, b_ih, b_hh):
    """One LSTM step with PyTorch's gate order (i, f, g, o)."""
    gates = x @ W_ih.T + b_ih + h @ W_hh.T + b_hh
    i, f, g, o = gates.chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_new = f * c + i * g            # additive cell path: d c_new / d c = diag(f) (+ gate terms)
    h_new = o * torch.tanh(c_new)
    return h_new, c_new
# --8<-- [end:lstm]


# --8<-- [start:gan]
def gan_value(p_data, p_g, d):
    """V(D, G) = E_data[log D] + E_g[log(1 - D)] for discrete distributions."""
    return float(np.sum(p_data * np.log(d)) + np.sum(p_g * np.log(1 - d)))


def optimal_discriminator(p_data, p_g):
    return p_data / (p_data + p_g)


def js_divergence(p, q):
    m = 0.5 * (p + q)
    def kl(a, b):                        # 0 log 0 = 0
        pos = a > 0
        return float(np.sum(a[pos] * np.log(a[pos] / b[pos])))

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)
# --8<-- [end:gan]


# --8<-- [start:vae]
def gaussian_kl(mu, logvar):
    """KL( N(mu, diag(exp(logvar))) || N(0, I) ), summed over the last axis."""
    return 0.5 * (mu ** 2 + logvar.exp() - logvar - 1).sum(-1)


def reparameterise(mu, logvar, eps):
    return mu + (0.5 * logvar).exp() * eps      # z is a differentiable function of (mu, logvar)
# --8<-- [end:vae]


# --8<-- [start:ddpm]
def ddpm_schedule(T=1000, beta_1=1e-4, beta_T=0.02):
    betas = torch.linspace(beta_1, beta_T, T, dtype=torch.float64)
    alphas = 1 - betas
    alpha_bar = torch.cumprod(alphas, 0)
    return betas, alphas, alpha_bar


def q_sample(x0, t, alpha_bar, eps):
    """x_t ~ q(x_t | x_0) = N(sqrt(abar_t) x_0, (1 - abar_t) I) in one step."""
    a = alpha_bar[t].to(x0.dtype).view(-1, *([1] * (x0.dim() - 1)))
    return a.sqrt() * x0 + (1 - a).sqrt() * eps


def p_mean_from_eps(x_t, t, eps_hat, betas, alphas, alpha_bar):
    """Mean of p(x_{t-1} | x_t) when the network predicts the noise."""
    return (x_t - betas[t] / math.sqrt(1 - alpha_bar[t]) * eps_hat) / math.sqrt(alphas[t])


def posterior_mean(x0, x_t, t, betas, alphas, alpha_bar):
    """Mean of the true posterior q(x_{t-1} | x_t, x_0), t >= 1."""
    ab, ab_prev = alpha_bar[t], alpha_bar[t - 1]
    return (math.sqrt(ab_prev) * betas[t] / (1 - ab)) * x0 + (math.sqrt(alphas[t]) * (1 - ab_prev) / (1 - ab)) * x_t
# --8<-- [end:ddpm]
