"""Numerical methods of docs/algorithm/numerical-methods.md, written out by hand.

tests/test_algorithm_numerics.py checks every claim of the page against an exact or library
reference: exact rational arithmetic (fractions), math.fsum, numpy.linalg, scipy.linalg and torch.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


# --8<-- [start:roundoff]
def unit_roundoff(dtype) -> float:
    """u = 2^-p for p significand bits (round to nearest): half of numpy's machine epsilon."""
    return float(np.finfo(dtype).eps) / 2


def rounding_error(a, b, op, dtype) -> Fraction:
    """|delta| in fl(a op b) = (a op b)(1 + delta), measured exactly with rational arithmetic."""
    x, y = dtype(a), dtype(b)
    computed = {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op]
    fx, fy = Fraction(float(x)), Fraction(float(y))
    exact = {"+": fx + fy, "-": fx - fy, "*": fx * fy, "/": fx / fy}[op]
    return abs(Fraction(float(computed)) - exact) / abs(exact)


def associativity_counterexample():
    """Floating-point addition is commutative but not associative (float32)."""
    a, b, c = np.float32(1e8), np.float32(-1e8), np.float32(1.0)
    return (a + b) + c, a + (b + c)       # 1.0 and 0.0: -1e8 + 1 rounds back to -1e8
# --8<-- [end:roundoff]


# --8<-- [start:hilbert]
def hilbert_exact(n):
    return [[Fraction(1, i + j + 1) for j in range(n)] for i in range(n)]


def hilbert_inverse_exact(n):
    """Closed form of the (integer) inverse of the n x n Hilbert matrix, 1-based i, j."""
    c = math.comb
    return [[Fraction((-1) ** (i + j) * (i + j - 1) * c(n + i - 1, n - j) * c(n + j - 1, n - i)
                      * c(i + j - 2, i - 1) ** 2) for j in range(1, n + 1)] for i in range(1, n + 1)]


def cond_inf_exact(n) -> float:
    """kappa_inf(H) = ||H||_inf * ||H^-1||_inf, exactly (H is symmetric, so kappa_1 is the same)."""
    norm = lambda m: max(sum(abs(v) for v in row) for row in m)
    return float(norm(hilbert_exact(n)) * norm(hilbert_inverse_exact(n)))


def hilbert_solve(n):
    """Solve H x = b with x = ones in float64 (LAPACK LU with partial pivoting).
    Returns (forward error, normwise backward error), both in the inf-norm."""
    H = np.array(hilbert_exact(n), dtype=np.float64)       # each entry rounded once
    b = np.array([float(sum(row)) for row in hilbert_exact(n)])  # exact row sums, rounded once
    x = np.linalg.solve(H, b)
    forward = np.abs(x - 1).max()                          # ||x - 1||_inf / ||1||_inf
    r = np.abs(b - H @ x).max()
    backward = r / (np.abs(H).sum(1).max() * np.abs(x).max() + np.abs(b).max())
    return forward, backward
# --8<-- [end:hilbert]


# --8<-- [start:summation]
def gamma(k, u):
    """Higham's gamma_k = k u / (1 - k u): the bound on k accumulated relative roundings."""
    return k * u / (1 - k * u)


def naive_sum(x):
    """Recursive summation, one float32 accumulator: cumsum is strictly left to right."""
    return np.cumsum(np.asarray(x, np.float32), dtype=np.float32)[-1]


def pairwise_sum(x):
    """Tree (pairwise) summation of depth ceil(log2 n): the shape of a GPU block reduction."""
    x = np.asarray(x, np.float32)
    while x.size > 1:
        if x.size % 2:
            x = np.append(x, np.float32(0))   # adding 0 is exact
        x = x[0::2] + x[1::2]                 # one level of the tree, all pairs at once
    return x[0]


def kahan_sum(x):
    """Kahan's compensated summation in float32: c carries the low bits lost by each addition."""
    s, c = np.float32(0), np.float32(0)
    for xi in np.asarray(x, np.float32):
        y = xi - c
        t = s + y
        c = (t - s) - y                       # (t - s) is what got added; minus y is the loss
        s = t
    return s


def chunked_sum(x, chunk):
    """What a GPU kernel does: each 'thread' sums `chunk` elements in order, then a tree."""
    x = np.asarray(x, np.float32)
    pad = (-x.size) % chunk
    parts = np.cumsum(np.append(x, np.zeros(pad, np.float32)).reshape(-1, chunk), axis=1,
                      dtype=np.float32)[:, -1]
    return pairwise_sum(parts)
# --8<-- [end:summation]


# --8<-- [start:cancellation]
def variance_one_pass(x):
    """E[x^2] - E[x]^2 in float32: subtracts two nearly equal large numbers."""
    x = np.asarray(x, np.float32)
    n = np.float32(x.size)
    mean = np.sum(x, dtype=np.float32) / n
    return np.sum(x * x, dtype=np.float32) / n - mean * mean


def variance_welford(x):
    """Welford (1962) in float32: the subtraction x - mean involves close numbers only."""
    n, mean, m2 = 0, np.float32(0), np.float32(0)
    for xi in np.asarray(x, np.float32):
        n += 1
        delta = xi - mean
        mean = mean + delta / np.float32(n)
        m2 = m2 + delta * (xi - mean)
    return m2 / np.float32(n)


def logsumexp_naive(x):
    with np.errstate(over="ignore"):
        return np.log(np.sum(np.exp(x)))


def logsumexp_stable(x):
    m = np.max(x)                              # every exponent becomes <= 0, the largest is e^0
    return m + np.log(np.sum(np.exp(x - m)))


def bce_naive(z, y):
    """Binary cross-entropy through the probability: sigmoid saturates to exactly 0 or 1."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        p = 1 / (1 + np.exp(-z))
        return -(y * np.log(p) + (1 - y) * np.log(1 - p))


def bce_with_logits(z, y):
    """-y z + log(1 + e^z), rewritten so that exp never overflows and log1p keeps small terms."""
    return np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
# --8<-- [end:cancellation]


# --8<-- [start:gemm]
def blocked_matmul(A, B, bm=32, bn=32, bk=32):
    """C = A B tile by tile, counting floating-point operations: each tile product is bm*bn*bk FMAs."""
    m, k = A.shape
    n = B.shape[1]
    C = np.zeros((m, n), dtype=np.result_type(A, B))
    flops = 0
    for i in range(0, m, bm):
        for j in range(0, n, bn):
            for p in range(0, k, bk):          # in a kernel: the tiles of A and B sit in shared memory
                a, b = A[i:i + bm, p:p + bk], B[p:p + bk, j:j + bn]
                C[i:i + bm, j:j + bn] += a @ b
                flops += 2 * a.shape[0] * b.shape[1] * a.shape[1]
    return C, flops
# --8<-- [end:gemm]


# --8<-- [start:lu]
def lu(A, pivot=True):
    """Doolittle LU, PA = LU. pivot=True picks the largest |a_ik| in column k (partial pivoting)."""
    U = np.array(A, dtype=np.float64)
    n = U.shape[0]
    L, perm = np.eye(n), np.arange(n)
    for k in range(n - 1):
        if pivot:
            p = k + int(np.argmax(np.abs(U[k:, k])))
            U[[k, p], k:] = U[[p, k], k:]
            L[[k, p], :k] = L[[p, k], :k]
            perm[[k, p]] = perm[[p, k]]
        L[k + 1:, k] = U[k + 1:, k] / U[k, k]              # multipliers; |l_ik| <= 1 with pivoting
        U[k + 1:, k:] -= np.outer(L[k + 1:, k], U[k, k:])   # rank-1 update of the trailing matrix
    return perm, L, np.triu(U)


def lu_solve(perm, L, U, b):
    y = np.linalg.solve(L, np.asarray(b, np.float64)[perm])   # triangular solves
    return np.linalg.solve(U, y)


def growth_factor(A, U):
    """rho = max|u_ij| / max|a_ij|: Wilkinson's backward error bound for LU grows with it."""
    return np.abs(U).max() / np.abs(A).max()


def wilkinson_growth_matrix(n):
    """1 on the diagonal and in the last column, -1 below the diagonal: rho = 2^(n-1) with pivoting."""
    A = np.eye(n) - np.tril(np.ones((n, n)), -1)
    A[:, -1] = 1
    return A
# --8<-- [end:lu]


# --8<-- [start:cholesky]
def cholesky(A):
    """A = L L^T for symmetric positive definite A; raises when a pivot is not positive."""
    n = A.shape[0]
    L = np.zeros_like(A, dtype=np.float64)
    for j in range(n):
        d = A[j, j] - L[j, :j] @ L[j, :j]
        if d <= 0:
            raise np.linalg.LinAlgError(f"pivot {j} is {d:.3g}: matrix not positive definite")
        L[j, j] = math.sqrt(d)
        L[j + 1:, j] = (A[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
    return L


def damped(H, percdamp=0.01):
    """GPTQ's damping: add 1 % of the mean diagonal to the diagonal before factorizing."""
    return H + percdamp * np.mean(np.diag(H)) * np.eye(H.shape[0])
# --8<-- [end:cholesky]


# --8<-- [start:qr]
def householder_qr(A):
    """QR by Householder reflections I - 2 v v^T / v^T v: Q is orthogonal to working precision."""
    R = np.array(A, dtype=np.float64)
    m, n = R.shape
    Q = np.eye(m)
    for k in range(n):
        x = R[k:, k]
        v = x.copy()
        v[0] += math.copysign(np.linalg.norm(x), x[0])   # the sign that avoids cancellation
        v /= np.linalg.norm(v)
        R[k:, :] -= 2 * np.outer(v, v @ R[k:, :])
        Q[:, k:] -= 2 * np.outer(Q[:, k:] @ v, v)
    return Q[:, :n], np.triu(R[:n])


def gram_schmidt(A, modified):
    """Classical (modified=False) or modified Gram-Schmidt."""
    A = np.array(A, dtype=np.float64)
    m, n = A.shape
    Q, R = np.zeros((m, n)), np.zeros((n, n))
    for j in range(n):
        v = A[:, j].copy()
        for i in range(j):
            R[i, j] = Q[:, i] @ (v if modified else A[:, j])   # MGS projects the updated vector
            v -= R[i, j] * Q[:, i]
        R[j, j] = np.linalg.norm(v)
        Q[:, j] = v / R[j, j]
    return Q, R


def matrix_with_condition(m, n, kappa, seed=0):
    """U diag(sigma) V^T with singular values geometrically spaced from 1 down to 1/kappa."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((m, n)))
    V, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (U * np.logspace(0, -math.log10(kappa), n)) @ V.T
# --8<-- [end:qr]


# --8<-- [start:svd]
def best_rank_k(A, k):
    """Truncated SVD: by Eckart-Young the closest rank-k matrix in both the 2- and F-norm."""
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    return (U[:, :k] * s[:k]) @ Vt[:k], s


def power_iteration_sigma_max(W, iters, seed=0):
    """Largest singular value by power iteration on W^T W (what spectral normalization runs)."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(W.shape[1])
    for _ in range(iters):
        u = W @ v
        u /= np.linalg.norm(u)
        v = W.T @ u
        v /= np.linalg.norm(v)
    return float(u @ W @ v)                     # Rayleigh-quotient style estimate u^T W v
# --8<-- [end:svd]


# --8<-- [start:iterative]
def conjugate_gradient(A, b, iters):
    """CG for SPD A. Returns the iterates; in exact arithmetic it ends in at most n steps."""
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    xs = [x.copy()]
    for _ in range(iters):
        Ap = A @ p
        alpha = (r @ r) / (p @ Ap)
        x = x + alpha * p
        r_new = r - alpha * Ap
        p = r_new + (r_new @ r_new) / (r @ r) * p
        r = r_new
        xs.append(x.copy())
    return xs


MUON_COEFFS = (3.4445, -4.7750, 2.0315)        # quintic of KellerJordan/Muon, muon.py
CUBIC_COEFFS = (1.5, -0.5, 0.0)                # classical Newton-Schulz: 3/2 X - 1/2 X X^T X


def newton_schulz(G, steps, coeffs=CUBIC_COEFFS):
    """Iterate X <- a X + (b A + c A^2) X with A = X X^T. Each singular value follows
    sigma <- a sigma + b sigma^3 + c sigma^5; the singular vectors never change, so the
    limit is the polar factor U V^T of G = U S V^T. Only matrix products: GEMM-friendly."""
    a, b, c = coeffs
    X = np.array(G, dtype=np.float64)
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.T                                # keep A = X X^T the small Gram matrix
    X = X / np.linalg.norm(X)                  # Frobenius norm >= spectral norm: sigma <= 1
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tall else X
# --8<-- [end:iterative]


# --8<-- [start:finite-diff]
def central_difference_errors(f, df, x, hs, dtype):
    """Relative error of (f(x+h) - f(x-h)) / 2h evaluated in `dtype`, for every step h."""
    x = dtype(x)
    exact = df(float(x))
    errs = []
    for h in hs:
        h = dtype(h)
        d = (f(x + h) - f(x - h)) / (dtype(2) * h)
        errs.append(abs(float(d) - exact) / abs(exact))
    return np.array(errs)


def optimal_step(u, f_abs, f3_abs):
    """Minimise h^2 |f'''| / 6 + u |f| / h: h* = (3 u |f| / |f'''|)^(1/3), about u^(1/3)."""
    return (3 * u * f_abs / f3_abs) ** (1 / 3)
# --8<-- [end:finite-diff]


# --8<-- [start:probability]
def sampling_distribution(logits, temperature=1.0, top_p=1.0):
    """Softmax(logits / T), then keep the smallest set of top tokens whose mass reaches top_p."""
    z = np.asarray(logits, np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    keep = order[: int(np.searchsorted(cum, top_p)) + 1]    # first index where cum >= top_p
    q = np.zeros_like(p)
    q[keep] = p[keep]
    return q / q.sum()


def stochastic_round(x, rng):
    """Round to an integer neighbour with probability proportional to closeness: E[SR(x)] = x."""
    lo = np.floor(x)
    return lo + (rng.random(np.shape(x)) < (x - lo))


def mean_confidence_interval(samples, z=1.96):
    """Normal-approximation 95 % interval for the mean of repeated timings: mean +- z s / sqrt(n)."""
    s = np.asarray(samples, np.float64)
    half = z * s.std(ddof=1) / math.sqrt(s.size)
    return s.mean() - half, s.mean() + half
# --8<-- [end:probability]
