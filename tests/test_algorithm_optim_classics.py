"""code/algorithm/optim_classics.py: GD rates, minibatch noise, Adagrad/RMSProp/Adadelta vs torch.optim,
negative sampling, hierarchical softmax and fastText n-grams, each against a closed form or a library."""
from __future__ import annotations

import math

import pytest
import torch
from algorithm_helpers import load_listing

O = load_listing("algorithm_optim_classics", "optim_classics.py")
D = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """The tensors here are tiny: intra-op threads only add overhead (and spin badly on a loaded machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _quadratic(seed=0, eigs=(0.5, 1.0, 2.0, 5.0, 10.0)):
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(len(eigs), len(eigs), generator=g, dtype=D))
    lam = torch.tensor(eigs, dtype=D)
    return Q, lam, Q @ torch.diag(lam) @ Q.T, torch.randn(len(eigs), generator=g, dtype=D)


@pytest.mark.parametrize("lr", [0.05, 0.1, 2 / 10.5, 0.21])
def test_gd_contraction_is_the_eigenvalue_formula(lr):
    Q, lam, A, x0 = _quadratic()
    xs = O.gd_quadratic(A, x0, lr, 400)
    # in the eigenbasis every coordinate is multiplied by exactly (1 - lr * lambda_i) per step
    z = xs @ Q
    err = (z[1:] - z[:-1] * (1 - lr * lam)).abs().max(1).values
    assert (err <= 1e-12 * z[:-1].norm(dim=1)).all()      # exact up to rounding, relative to the current size
    # the norm ratio tends to the slowest mode's factor max |1 - lr lambda|; above 2/L it exceeds 1
    norms = xs.norm(dim=1)
    rate = O.gd_rate(lam.tolist(), lr)
    assert abs((norms[-1] / norms[-2]).item() - rate) < 1e-6
    assert (rate < 1) == (lr < 2 / lam.max().item())


def test_best_step_and_critical_points():
    lr, rate = O.gd_best_rate(0.5, 10.0)
    assert lr == pytest.approx(2 / 10.5) and rate == pytest.approx((20 - 1) / (20 + 1))
    assert O.gd_rate([0.5, 10.0], lr) == pytest.approx(rate)
    assert O.gd_rate([0.5, 10.0], lr * 1.01) > rate and O.gd_rate([0.5, 10.0], lr * 0.99) > rate
    zero = torch.zeros(2, dtype=D)
    assert O.critical_point_kind(lambda x: x[0] ** 2 - x[1] ** 2, zero) == "saddle"
    assert O.critical_point_kind(lambda x: x[0] ** 2 + 3 * x[1] ** 2, zero) == "minimum"
    assert O.critical_point_kind(lambda x: -(x ** 2).sum(), zero) == "maximum"


def _regression(n=64, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=D)
    y = X @ torch.randn(d, generator=g, dtype=D) + 0.5 * torch.randn(n, generator=g, dtype=D)
    return X, y, g


@pytest.mark.parametrize("B", [4, 32])
def test_minibatch_gradient_covariance_is_sigma_over_b_with_fpc(B):
    X, y, g = _regression()
    G = O.per_example_grads(X, y, torch.zeros(4, dtype=D))
    emp = torch.cov(O.sample_minibatch_grads(G, B, 40_000, g).T)
    fpc, iid = O.minibatch_noise_cov(G, B), O.minibatch_noise_cov(G, B, replace=True)
    assert (emp - fpc).norm() / fpc.norm() < 0.05          # 40k draws: sampling error ~1-2 %
    if B == 32:                                            # half the data: (n - B)/(n - 1) ~ 0.51
        assert (emp - iid).norm() / iid.norm() > 0.4


def test_sgd_stationary_spread_scales_with_lr_over_b():
    X, y, g = _regression()
    wstar = torch.linalg.lstsq(X, y).solution
    H = X.T @ X / X.shape[0]
    sigma = O.minibatch_noise_cov(O.per_example_grads(X, y, wstar), 1, replace=True)
    spread = {}
    for lr, B in [(0.02, 4), (0.08, 16), (0.02, 16)]:
        W = O.sgd_chains(X, y, wstar, lr, B, 1500, 2000, g)
        spread[lr, B] = ((W - wstar) ** 2).sum(1).mean().item()
        assert spread[lr, B] == pytest.approx(O.sgd_stationary_cov(H, sigma, lr, B).trace().item(), rel=0.12)
    assert spread[0.08, 16] == pytest.approx(spread[0.02, 4], rel=0.15)       # same lr / B, same spread
    assert 3 < spread[0.02, 4] / spread[0.02, 16] < 5.5                         # 4x smaller lr / B


def _run(ours, torch_cls, kw, ours_kw, steps=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    p0 = torch.randn(7, generator=g, dtype=D)
    grads = [torch.randn(7, generator=g, dtype=D) * (1 + 5 * (i % 3)) for i in range(steps)]
    p, state = p0.clone(), {}
    ref = torch.nn.Parameter(p0.clone())
    opt = torch_cls([ref], **kw)
    for gr in grads:
        p = ours(p, gr, state, **ours_kw)
        ref.grad = gr.clone()
        opt.step()
    return (p - ref.detach()).abs().max().item()


@pytest.mark.parametrize("name", ["adagrad", "rmsprop", "adadelta", "adam"])
def test_adaptive_updates_match_torch_optim(name):
    cases = {
        "adagrad": (O.adagrad_step, torch.optim.Adagrad, {"lr": 0.1}, {"lr": 0.1}),
        "rmsprop": (O.rmsprop_step, torch.optim.RMSprop, {"lr": 0.01, "alpha": 0.9}, {"lr": 0.01, "alpha": 0.9}),
        "adadelta": (O.adadelta_step, torch.optim.Adadelta, {"lr": 1.0, "rho": 0.9}, {"lr": 1.0, "rho": 0.9}),
        "adam": (O.adam_from_rmsprop, torch.optim.Adam, {"lr": 0.01}, {"lr": 0.01}),
    }
    assert _run(*cases[name]) < 1e-6


def test_adam_without_momentum_and_correction_is_rmsprop_and_adagrad_step_decays():
    err = _run(O.adam_from_rmsprop, torch.optim.RMSprop, {"lr": 0.01, "alpha": 0.999},
               {"lr": 0.01, "betas": (0.0, 0.999), "bias_correction": False})
    assert err < 1e-6
    p, state = torch.zeros(1, dtype=D), {}
    for t in range(1, 101):                                 # constant gradient: step = lr / sqrt(t)
        q = O.adagrad_step(p, torch.ones(1, dtype=D), state, lr=0.1, eps=0.0)
        assert (p - q).item() == pytest.approx(0.1 / math.sqrt(t), rel=1e-12)
        p = q


def test_hierarchical_softmax_is_normalised_and_huffman_paths_are_short():
    g = torch.Generator().manual_seed(0)
    counts = torch.randint(1, 1000, (50,), generator=g).tolist()
    paths = O.huffman_paths(counts)
    nodes = torch.randn(49, 8, generator=g, dtype=D)
    for _ in range(3):
        assert O.hs_probs(torch.randn(8, generator=g, dtype=D), nodes, paths).sum().item() == pytest.approx(1, abs=1e-12)
    p = torch.tensor(counts, dtype=D) / sum(counts)
    L = torch.tensor([len(n) for n, _ in paths], dtype=D)
    entropy = -(p * p.log2()).sum().item()
    assert entropy <= (p * L).sum().item() < entropy + 1      # Huffman: within one bit of the entropy
    assert sum(2.0 ** -x for x in L.tolist()) == pytest.approx(1.0)   # a full binary tree (Kraft equality)
    assert L[p.argmax()] <= L[p.argmin()]


def test_negative_sampling_learns_cooccurrence():
    g = torch.Generator().manual_seed(0)
    topics, per = 4, 8
    sents = [(t % topics * per + torch.randint(per, (12,), generator=g)).tolist() for t in range(400)]
    pairs = [(s[i], s[j]) for s in sents for i in range(12) for j in range(max(0, i - 2), min(12, i + 3)) if j != i]
    counts = [sum(s.count(w) for s in sents) for w in range(topics * per)]
    vec = torch.nn.functional.normalize(O.train_sgns(pairs, counts, epochs=5, lr=0.02), dim=1)
    S = vec @ vec.T
    topic = torch.arange(topics * per) // per
    same = (topic[:, None] == topic[None, :]) & ~torch.eye(topics * per, dtype=torch.bool)
    assert S[same].mean() > S[topic[:, None] != topic[None, :]].mean() + 0.3
    assert (topic[(S - 3 * torch.eye(topics * per)).argmax(1)] == topic).all()


def test_noise_distribution_and_sgns_loss():
    p = O.noise_distribution([1000, 10])
    assert p[0].item() == pytest.approx(1000 ** 0.75 / (1000 ** 0.75 + 10 ** 0.75))
    v, u, neg = torch.zeros(4), torch.zeros(4), torch.zeros(5, 4)
    assert O.sgns_loss(v, u, neg).item() == pytest.approx(6 * math.log(2))     # k + 1 terms of log 2


def test_fasttext_ngrams_on_the_paper_example_and_oov_vectors():
    # Bojanowski et al. (2017), §3.2: "where", n = 3 -> <wh, whe, her, ere, re> plus the special sequence <where>
    assert O.char_ngrams("where", 3, 3) == ["<wh", "whe", "her", "ere", "re>", "<where>"]
    assert "<her>" not in O.char_ngrams("where", 3, 6) and "her" in O.char_ngrams("where", 3, 6)
    assert len(O.char_ngrams("where", 3, 6, include_word=False)) == 5 + 4 + 3 + 2
    assert O.fnv1a_bucket("", 2 ** 32) == 2166136261                        # FNV-1a offset basis
    assert O.fnv1a_bucket("a", 2 ** 32) == 0xE40C292C                       # the published FNV-1a test vector
    # rows = orthonormal vectors: the cosine of two composed vectors is exactly the cosine of their bucket counts,
    # i.e. |shared n-grams| / sqrt(|A| |B|) when no two n-grams collide
    table, _ = torch.linalg.qr(torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0), dtype=D))

    def counts(w):
        rows = [O.fnv1a_bucket(x, 1024) for x in O.char_ngrams(w, include_word=False)]
        return torch.bincount(torch.tensor(rows), minlength=1024).to(D)

    cos = torch.nn.functional.cosine_similarity
    a, b = O.oov_vector("wherever", table), O.oov_vector("where", table)
    assert cos(a, b, dim=0).item() == pytest.approx(cos(counts("wherever"), counts("where"), dim=0).item(), abs=1e-12)
    ga, gb = (set(O.char_ngrams(w, include_word=False)) for w in ("wherever", "where"))
    assert len({O.fnv1a_bucket(x, 1024) for x in ga | gb}) == len(ga | gb)           # no collision for this pair
    assert cos(a, b, dim=0).item() == pytest.approx(len(ga & gb) / math.sqrt(len(ga) * len(gb)), abs=1e-12)
