"""Classic optimisation and word-embedding training results (d2l.ai ch. 12 and 15), written out by hand.

docs/algorithm/optimization.md embeds the gradient-descent, minibatch-noise and adaptive-step sections,
docs/algorithm/losses.md the negative-sampling / hierarchical-softmax section and
docs/algorithm/tokenization.md the fastText n-gram section. tests/test_algorithm_optim_classics.py and
notebooks/algorithm/optim-classics-lab.ipynb check each result against torch or a closed form.
"""
from __future__ import annotations

import heapq
import math

import torch
import torch.nn.functional as F


# --8<-- [start:gd]
def gd_quadratic(A, x0, lr, steps):
    """Gradient descent on f(x) = x^T A x / 2 (gradient A x). Returns the iterates x_0 .. x_steps."""
    xs = [x0]
    for _ in range(steps):
        xs.append(xs[-1] - lr * (A @ xs[-1]))
    return torch.stack(xs)


def gd_rate(eigs, lr):
    """Per-step contraction of the error: x_t = (I - lr A)^t x_0, so the slowest mode shrinks by
    max_i |1 - lr * lambda_i| each step; it is < 1 exactly when 0 < lr < 2 / L (L = largest eigenvalue)."""
    return max(abs(1 - lr * lam) for lam in eigs)


def gd_best_rate(mu, L):
    """The best fixed step lr = 2 / (mu + L) balances the two extreme modes: rate (kappa - 1) / (kappa + 1)."""
    kappa = L / mu
    return 2 / (mu + L), (kappa - 1) / (kappa + 1)


def critical_point_kind(f, x):
    """Classify a point with zero gradient by the signs of the Hessian's eigenvalues."""
    eig = torch.linalg.eigvalsh(torch.autograd.functional.hessian(f, x))
    if (eig > 0).all():
        return "minimum"
    if (eig < 0).all():
        return "maximum"
    return "saddle" if (eig > 0).any() and (eig < 0).any() else "degenerate"
# --8<-- [end:gd]


# --8<-- [start:sgd-noise]
def per_example_grads(X, y, w):
    """Squared loss (x_i^T w - y_i)^2 / 2: per-example gradient g_i = x_i (x_i^T w - y_i), shape (n, d)."""
    return X * (X @ w - y)[:, None]


def minibatch_noise_cov(G, B, replace=False):
    """Covariance of the mean of a minibatch of B rows of G (n per-example gradients).
    Sigma is the population covariance of one example's gradient; with replacement the B draws are
    independent (Sigma / B); without replacement they are negatively correlated, which multiplies by the
    finite-population correction (n - B) / (n - 1)."""
    n = G.shape[0]
    D = G - G.mean(0)
    sigma = D.T @ D / n
    return sigma / B if replace else sigma / B * (n - B) / (n - 1)


def sample_minibatch_grads(G, B, draws, generator):
    """Empirical minibatch-mean gradients: `draws` batches of B distinct rows (sampling without replacement)."""
    idx = torch.rand(draws, G.shape[0], generator=generator, dtype=G.dtype).argsort(dim=1)[:, :B]
    return G[idx].mean(1)


def sgd_stationary_cov(H, sigma, lr, B):
    """Near the optimum, SGD is w_{t+1} - w* = (I - lr H)(w_t - w*) - lr * xi_t with Cov(xi) = sigma / B, so
    the stationary covariance C solves C = (I - lr H) C (I - lr H) + lr^2 sigma / B (a discrete Lyapunov
    equation). For small lr, tr C ~ lr / (2B) * tr(H^-1 sigma): the noise scale is lr / B."""
    d = H.shape[0]
    M = torch.eye(d, dtype=H.dtype) - lr * H
    K = torch.kron(M, M)                                  # vec(M C M^T) = (M kron M) vec(C)
    vec = torch.linalg.solve(torch.eye(d * d, dtype=H.dtype) - K, (lr ** 2 * sigma / B).reshape(-1))
    return vec.reshape(d, d)


def sgd_chains(X, y, w0, lr, B, steps, chains, generator):
    """Run `chains` independent SGD chains (B examples drawn with replacement per step), return final w."""
    n = X.shape[0]
    w = w0.expand(chains, -1).clone()
    for _ in range(steps):
        idx = torch.randint(n, (chains, B), generator=generator)
        xb, yb = X[idx], y[idx]                                        # (chains, B, d), (chains, B)
        r = torch.einsum("cbd,cd->cb", xb, w) - yb
        w -= lr * torch.einsum("cbd,cb->cd", xb, r) / B
    return w
# --8<-- [end:sgd-noise]


# --8<-- [start:adaptive]
def adagrad_step(p, g, state, lr=1e-2, eps=1e-10):
    """Adagrad: s += g^2 (never forgets), step lr * g / (sqrt(s) + eps): the step shrinks like 1/sqrt(t)."""
    s = state["s"] = state.get("s", torch.zeros_like(p)) + g * g
    return p - lr * g / (s.sqrt() + eps)


def rmsprop_step(p, g, state, lr=1e-2, alpha=0.99, eps=1e-8):
    """RMSProp: replace Adagrad's sum with a leaky average v = alpha v + (1 - alpha) g^2."""
    v = state["v"] = alpha * state.get("v", torch.zeros_like(p)) + (1 - alpha) * g * g
    return p - lr * g / (v.sqrt() + eps)


def adadelta_step(p, g, state, lr=1.0, rho=0.9, eps=1e-6):
    """Adadelta: RMSProp's v, but the numerator is the RMS of past *updates*, so the step has the
    units of the parameter and no learning rate is needed (PyTorch keeps an lr multiplier, default 1)."""
    v = state["v"] = rho * state.get("v", torch.zeros_like(p)) + (1 - rho) * g * g
    dx = (state.get("u", torch.zeros_like(p)) + eps).sqrt() / (v + eps).sqrt() * g
    state["u"] = rho * state.get("u", torch.zeros_like(p)) + (1 - rho) * dx * dx
    return p - lr * dx


def adam_from_rmsprop(p, g, state, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, bias_correction=True):
    """Adam = RMSProp's second moment (beta2) + momentum as a leaky average of g (beta1) + bias correction
    of both zero-initialised averages. beta1 = 0 without bias correction is exactly RMSProp(alpha=beta2)."""
    b1, b2 = betas
    t = state["t"] = state.get("t", 0) + 1
    m = state["m"] = b1 * state.get("m", torch.zeros_like(p)) + (1 - b1) * g
    v = state["v"] = b2 * state.get("v", torch.zeros_like(p)) + (1 - b2) * g * g
    if bias_correction:
        m, v = m / (1 - b1 ** t), v / (1 - b2 ** t)
    return p - lr * m / (v.sqrt() + eps)
# --8<-- [end:adaptive]


# --8<-- [start:negative-sampling]
def noise_distribution(counts, power=0.75):
    """word2vec's noise distribution P_n(w) ~ count(w)^(3/4): flatter than the unigram distribution."""
    c = torch.as_tensor(counts, dtype=torch.float64) ** power
    return c / c.sum()


def sgns_loss(v_center, u_context, u_negatives):
    """Skip-gram with negative sampling, per (center, context) pair with k sampled negatives:
    -log sigma(u_o . v_c) - sum_k log sigma(-u_k . v_c). k + 1 dot products, no sum over the vocabulary."""
    pos = F.logsigmoid((u_context * v_center).sum(-1))
    neg = F.logsigmoid(-(u_negatives @ v_center.unsqueeze(-1)).squeeze(-1)).sum(-1)
    return -(pos + neg)


def train_sgns(pairs, counts, dim=16, k=5, epochs=30, lr=0.05, batch=256, seed=0):
    """Train skip-gram with negatives on (center, context) id pairs. Returns the center vectors."""
    g = torch.Generator().manual_seed(seed)
    V = len(counts)
    v = torch.nn.Parameter(torch.randn(V, dim, generator=g) * 0.1)   # center ("input") vectors
    u = torch.nn.Parameter(torch.zeros(V, dim))                        # context ("output") vectors
    noise = noise_distribution(counts).float()
    opt = torch.optim.Adam([v, u], lr=lr)
    pairs = torch.as_tensor(pairs)
    for _ in range(epochs):
        for b in pairs[torch.randperm(len(pairs), generator=g)].split(batch):
            neg = torch.multinomial(noise, len(b) * k, replacement=True, generator=g).view(len(b), k)
            loss = sgns_loss(v[b[:, 0]], u[b[:, 1]], u[neg]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return v.detach()
# --8<-- [end:negative-sampling]


# --8<-- [start:hsoftmax]
def huffman_paths(counts):
    """Binary Huffman tree over the vocabulary. Returns, per word, the inner nodes on its root-to-leaf
    path and the branch taken at each (+1 left, -1 right). Frequent words get short paths."""
    V = len(counts)
    heap = [(c, i, i) for i, c in enumerate(counts)]          # (count, tie-break, node id); leaves are 0..V-1
    heapq.heapify(heap)
    parent, side, nxt = {}, {}, V
    while len(heap) > 1:
        c1, _, a = heapq.heappop(heap)
        c2, _, b = heapq.heappop(heap)
        parent[a], side[a] = nxt, 1.0
        parent[b], side[b] = nxt, -1.0
        heapq.heappush(heap, (c1 + c2, nxt, nxt))
        nxt += 1
    root = nxt - 1
    paths = []
    for w in range(V):
        nodes, signs, x = [], [], w
        while x != root:
            nodes.append(parent[x] - V)                          # inner nodes numbered 0 .. V-2
            signs.append(side[x])
            x = parent[x]
        paths.append((nodes[::-1], signs[::-1]))
    return paths


def hs_probs(v_center, node_vecs, paths):
    """Hierarchical softmax: p(w | c) = prod over the path of sigma(sign * u_node . v_c). At every inner
    node the two branches get sigma(s) + sigma(-s) = 1, so the leaves sum to 1 without any normaliser."""
    out = []
    for nodes, signs in paths:
        s = node_vecs[nodes] @ v_center * torch.tensor(signs, dtype=v_center.dtype)
        out.append(torch.sigmoid(s).prod())
    return torch.stack(out)
# --8<-- [end:hsoftmax]


# --8<-- [start:fasttext]
def char_ngrams(word, nmin=3, nmax=6, include_word=True):
    """fastText's subwords: wrap the word in < and >, take every character n-gram with nmin <= n <= nmax,
    and (for a word in the vocabulary) add the whole wrapped word as its own unit (Bojanowski et al. 2017, §3.2)."""
    w = f"<{word}>"
    grams = [w[i:i + n] for n in range(nmin, nmax + 1) for i in range(len(w) - n + 1)]
    return grams + [w] if include_word else grams


def fnv1a_bucket(s, buckets=2_000_000):
    """fastText hashes n-grams into a fixed table (2M rows by default) with 32-bit FNV-1a on the UTF-8 bytes;
    like its C++ (`h ^ uint32_t(int8_t(c))`), a byte >= 128 is sign-extended before the xor."""
    h = 2166136261
    for byte in s.encode():
        h = ((h ^ (byte if byte < 128 else byte | 0xFFFFFF00)) * 16777619) & 0xFFFFFFFF
    return h % buckets


def oov_vector(word, ngram_table, nmin=3, nmax=6):
    """A vector for a word never seen in training: it has no whole-word row, so it is the mean of its
    n-gram rows (fastText's getWordVector averages the rows it finds; the paper writes the sum)."""
    rows = [fnv1a_bucket(g, ngram_table.shape[0]) for g in char_ngrams(word, nmin, nmax, include_word=False)]
    return ngram_table[rows].mean(0)
# --8<-- [end:fasttext]


def full_softmax_cost(V):
    """Dot products per (center, context) update: full softmax V, negatives k + 1, hierarchical ~ log2 V."""
    return {"softmax": V, "hierarchical": math.ceil(math.log2(V))}
