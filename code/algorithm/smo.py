"""SMO for the soft-margin SVM dual, written from scratch (NumPy only).

Dual problem (alpha in R^n):
    min_a  1/2 a^T Q a - e^T a,   Q_kl = y_k y_l K(x_k, x_l)
    s.t.   y^T a = 0,  0 <= a_k <= C
Each step picks the maximal violating pair (i, j), moves along the direction that
keeps y^T a = 0, and solves that one-dimensional quadratic exactly (with clipping).
The page docs/algorithm/classic-ml.md embeds the sections below; the lab
notebooks/algorithm/svm-smo.ipynb and tests/test_algorithm_classic_ml.py check the
result against scikit-learn's SVC (libsvm).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


# --8<-- [start:kernels]
def linear_kernel(A, B):
    return A @ B.T


def rbf_kernel(A, B, gamma):
    sq = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
    return np.exp(-gamma * np.maximum(sq, 0.0))
# --8<-- [end:kernels]


@dataclass
class SVMModel:
    alpha: np.ndarray      # dual variables, shape (n,)
    b: float               # intercept
    X: np.ndarray          # training inputs
    y: np.ndarray          # labels in {-1, +1}
    kernel: object         # callable (A, B) -> Gram matrix
    iterations: int
    gap: float             # final KKT violation m(a) - M(a)

    @property
    def support(self):
        return np.flatnonzero(self.alpha > 1e-8)

    def decision_function(self, Xq):
        sv = self.support
        return self.kernel(Xq, self.X[sv]) @ (self.alpha[sv] * self.y[sv]) + self.b


# --8<-- [start:smo]
def smo(X, y, C=1.0, kernel=linear_kernel, tol=1e-6, max_iter=200_000):
    """Solve the SVM dual with SMO (maximal-violating-pair working set)."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    K = kernel(X, X)
    alpha = np.zeros(n)
    G = -np.ones(n)                      # gradient of the dual objective: Q a - e
    for it in range(max_iter):
        v = -y * G                       # KKT: v_k = b for free k at the optimum
        up = ((y > 0) & (alpha < C)) | ((y < 0) & (alpha > 0))    # may move along +y_k
        low = ((y > 0) & (alpha > 0)) | ((y < 0) & (alpha < C))   # may move along -y_k
        i = np.flatnonzero(up)[np.argmax(v[up])]
        j = np.flatnonzero(low)[np.argmin(v[low])]
        gap = v[i] - v[j]
        if gap < tol:                    # m(a) - M(a) < tol: KKT satisfied
            break
        # direction d: alpha_i += y_i t, alpha_j -= y_j t  (keeps y^T a constant)
        a = max(K[i, i] + K[j, j] - 2.0 * K[i, j], 1e-12)   # curvature d^T Q d
        t = gap / a                      # unconstrained minimiser along d
        t = min(t, C - alpha[i] if y[i] > 0 else alpha[i])   # stay inside the box
        t = min(t, alpha[j] if y[j] > 0 else C - alpha[j])
        alpha[i] += y[i] * t
        alpha[j] -= y[j] * t
        G += t * y * (K[:, i] - K[:, j])  # rank-2 update of the gradient
    v = -y * G
    free = (alpha > 1e-8) & (alpha < C - 1e-8)
    if free.any():                        # b = y_k - sum_l a_l y_l K_lk on free SVs
        b = v[free].mean()
    else:                                 # no free SV: any b in [M, m] is optimal
        up = ((y > 0) & (alpha < C)) | ((y < 0) & (alpha > 0))
        low = ((y > 0) & (alpha > 0)) | ((y < 0) & (alpha < C))
        b = 0.5 * (v[up].max() + v[low].min())
    return SVMModel(alpha, float(b), np.asarray(X, float), y, kernel, it, float(gap))
# --8<-- [end:smo]


def dual_objective(model):
    K = model.kernel(model.X, model.X)
    ay = model.alpha * model.y
    return 0.5 * ay @ K @ ay - model.alpha.sum()
