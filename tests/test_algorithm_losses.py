"""code/algorithm/losses.py against PyTorch and the identities on docs/algorithm/losses.md."""
from __future__ import annotations

import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("algorithm_losses", ROOT / "code" / "algorithm" / "losses.py")
L = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(L)

D = torch.float64
TOL = dict(rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_cross_entropy_and_label_smoothing_match_torch_and_gradient(eps):
    torch.manual_seed(0)
    z = torch.randn(8, 5, dtype=D, requires_grad=True)
    t = torch.randint(0, 5, (8,))
    mine = L.cross_entropy(z, t, eps)
    torch.testing.assert_close(mine, F.cross_entropy(z, t, label_smoothing=eps), **TOL)
    (g,) = torch.autograd.grad(mine, z)
    target = F.one_hot(t, 5).to(D) * (1 - eps) + eps / 5
    torch.testing.assert_close(g, (torch.softmax(z, 1) - target) / 8, **TOL)   # gradient p - t


def test_cross_entropy_is_entropy_plus_kl_and_mle():
    torch.manual_seed(1)
    p = torch.softmax(torch.randn(4, 6, dtype=D), 1)
    q = torch.softmax(torch.randn(4, 6, dtype=D), 1)
    h, kl = L.entropy_plus_kl(p, q)
    torch.testing.assert_close(h + kl, -(p * q.log()).sum(1), **TOL)
    assert (kl >= 0).all()
    # MLE: the average NLL of samples drawn from p converges to H(p, q) (law of large numbers)
    gen = torch.Generator().manual_seed(2)
    samples = torch.multinomial(p[0], 200_000, replacement=True, generator=gen)
    nll = -q[0].log()[samples].mean()
    # standard error = sd(-log q) / sqrt(n) with sd computed under p (about 0.43 here): ~1e-3; allow 5 s.e.
    nll_p = -q[0].log()
    se = ((p[0] * (nll_p - (h + kl)[0]) ** 2).sum().sqrt() / math.sqrt(samples.numel())).item()
    assert abs(nll - (h + kl)[0]) < 5 * se


def test_focal_reduces_to_bce_and_downweights_easy_examples():
    torch.manual_seed(3)
    z = torch.randn(50, dtype=D) * 3
    y = (torch.rand(50, dtype=D) > 0.5).to(D)
    bce = F.binary_cross_entropy_with_logits(z, y, reduction="sum")
    torch.testing.assert_close(L.focal_loss(z, y, gamma=0.0, alpha=None), bce, **TOL)
    # an easy positive (p = 0.9) loses a factor (1 - 0.9)^2 = 100; a hard one (p = 0.1) only 1/0.81
    easy, hard = torch.tensor([math.log(9.0)], dtype=D), torch.tensor([-math.log(9.0)], dtype=D)
    one = torch.ones(1, dtype=D)
    r_easy = L.focal_loss(easy, one, 2.0, None) / F.binary_cross_entropy_with_logits(easy, one, reduction="sum")
    r_hard = L.focal_loss(hard, one, 2.0, None) / F.binary_cross_entropy_with_logits(hard, one, reduction="sum")
    torch.testing.assert_close(r_easy, torch.tensor(0.01, dtype=D), **TOL)
    torch.testing.assert_close(r_hard, torch.tensor(0.81, dtype=D), **TOL)
    # p_t = 0.968 loses about 1000x (Lin et al.: (1 - 0.968)^2 = 1.0e-3)
    z968 = torch.tensor([math.log(0.968 / 0.032)], dtype=D)
    r968 = L.focal_loss(z968, one, 2.0, None) / F.binary_cross_entropy_with_logits(z968, one, reduction="sum")
    torch.testing.assert_close(r968, torch.tensor(0.032 ** 2, dtype=D), **TOL)


def test_focal_alpha_weights_positives_by_alpha_and_negatives_by_one_minus_alpha():
    """FL = -alpha_t (1 - p_t)^gamma log p_t, written out element by element from the paper's definition."""
    torch.manual_seed(8)
    z = torch.randn(40, dtype=D) * 2
    y = (torch.rand(40, dtype=D) > 0.5).to(D)
    p = torch.sigmoid(z)
    p_t = torch.where(y == 1, p, 1 - p)
    alpha_t = torch.where(y == 1, torch.tensor(0.25, dtype=D), torch.tensor(0.75, dtype=D))
    ref = (-alpha_t * (1 - p_t) ** 2 * torch.log(p_t)).sum()
    torch.testing.assert_close(L.focal_loss(z, y, gamma=2.0, alpha=0.25), ref, **TOL)


def test_asymmetric_loss_reduces_to_bce_and_ignores_very_easy_negatives():
    torch.manual_seed(4)
    z = torch.randn(6, 7, dtype=D)
    y = (torch.rand(6, 7) > 0.7).to(D)
    torch.testing.assert_close(L.asymmetric_loss(z, y, 0.0, 0.0, 0.0),
                               F.binary_cross_entropy_with_logits(z, y, reduction="sum"), **TOL)
    # a negative with p < clip contributes exactly zero loss and zero gradient
    z_neg = torch.tensor([-4.0], dtype=D, requires_grad=True)          # p = 0.018 < 0.05
    loss = L.asymmetric_loss(z_neg, torch.zeros(1, dtype=D))
    loss.backward()
    assert loss.item() == 0.0 and z_neg.grad.item() == 0.0
    # a negative above the margin: -(p - m)^gamma_neg * log(1 - (p - m)), from the paper's L_-
    z_hi = torch.tensor([1.0], dtype=D)
    pm = torch.sigmoid(z_hi) - 0.05
    torch.testing.assert_close(L.asymmetric_loss(z_hi, torch.zeros(1, dtype=D)), (-(pm ** 4) * torch.log(1 - pm)).sum(), **TOL)


def test_class_balanced_weights_limits():
    counts = [1000, 100, 10]
    torch.testing.assert_close(L.class_balanced_weights(counts, beta=0.0), torch.ones(3, dtype=D))
    w = L.class_balanced_weights(counts, beta=1 - 1e-9)                  # beta -> 1: inverse frequency
    inv = 1 / torch.tensor(counts, dtype=D)
    torch.testing.assert_close(w, inv * 3 / inv.sum(), rtol=1e-5, atol=0)


def test_logit_adjustment_recovers_balanced_bayes_rule():
    """With z = log p(y|x) (the Bayes posterior under a skewed prior), z - log prior ranks classes by
    the likelihood p(x|y): the Bayes rule for a uniform prior, i.e. for balanced error."""
    torch.manual_seed(5)
    prior = torch.tensor([0.9, 0.09, 0.01], dtype=D)
    means = torch.tensor([-2.0, 0.0, 2.0], dtype=D)
    x = torch.linspace(-4, 4, 801, dtype=D)[:, None] + 0.0037   # off the exact decision boundaries
    loglik = -0.5 * (x - means) ** 2
    posterior_logits = loglik + prior.log()
    adjusted = posterior_logits - prior.log()
    torch.testing.assert_close(adjusted, loglik, **TOL)
    assert torch.equal(adjusted.argmax(1), loglik.argmax(1))
    assert (posterior_logits.argmax(1) == 2).sum() < (loglik.argmax(1) == 2).sum()   # plain rule under-predicts rare class
    z = torch.randn(5, 3, dtype=D)
    t = torch.randint(0, 3, (5,))
    uniform = torch.full((3,), 1 / 3, dtype=D)
    torch.testing.assert_close(L.logit_adjusted_cross_entropy(z, t, uniform), F.cross_entropy(z, t), **TOL)


def test_info_nce_is_diagonal_cross_entropy_and_bound():
    torch.manual_seed(6)
    n = 16
    q = torch.randn(n, 8, dtype=D)
    k_good = q + 0.05 * torch.randn(n, 8, dtype=D)
    k_rand = torch.randn(n, 8, dtype=D)
    loss_good, loss_rand = L.info_nce(q, k_good), L.info_nce(q, k_rand)
    sim = F.normalize(q, dim=1) @ F.normalize(k_good, dim=1).T / 0.1
    ref = -torch.log_softmax(sim, 1).diagonal().mean()
    torch.testing.assert_close(loss_good, ref, **TOL)
    assert loss_good < loss_rand
    assert 0 < L.info_nce_mi_lower_bound(loss_good, n) <= math.log(n)
