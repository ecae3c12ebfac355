"""Second-order gradient boosting (the XGBoost objective), written from scratch.

Each round fits a regression tree to the per-sample gradient g and Hessian h of the
loss at the current prediction, using the exact greedy split search and
    leaf weight  w* = -G / (H + lambda)
    split score  G_L^2/(H_L+lambda) + G_R^2/(H_R+lambda) - G^2/(H+lambda)
(the textbook gain is half of this score minus gamma; XGBoost reports and prunes on
this score, without the 1/2, against gamma). Missing values (NaN) are sent left and
right in turn and the better side becomes the node's default direction.
The lab notebooks/algorithm/gbdt-xgboost.ipynb and tests/test_algorithm_classic_ml.py
check predictions against xgboost with tree_method="exact".
"""
from __future__ import annotations

import numpy as np


# --8<-- [start:losses]
def squared_error(y, f):
    """l = (f - y)^2 / 2 -> g = f - y, h = 1."""
    return f - y, np.ones_like(f)


def logistic(y, f):
    """l = -y log p - (1-y) log(1-p), p = sigmoid(f) -> g = p - y, h = p (1 - p)."""
    p = 1.0 / (1.0 + np.exp(-f))
    return p - y, p * (1.0 - p)
# --8<-- [end:losses]


# --8<-- [start:split]
def score(G, H, lam):
    return G * G / (H + lam)


def best_split(x, g, h, lam, min_child_weight):
    """Exact greedy search on one feature. Returns (gain, threshold, default_left)."""
    miss = np.isnan(x)
    if miss.all():
        return (0.0, None, False)
    order = np.argsort(x[~miss], kind="stable")
    xs, gs, hs = x[~miss][order], g[~miss][order], h[~miss][order]
    G, H = g.sum(), h.sum()
    Gm, Hm = g[miss].sum(), h[miss].sum()          # statistics of the missing values
    GL = np.concatenate([[0.0], np.cumsum(gs)])     # left = first k present values,
    HL = np.concatenate([[0.0], np.cumsum(hs)])     # k = 0 .. n_present
    cut = np.concatenate([[False], xs[1:] > xs[:-1], [False]])  # between distinct values
    thr = np.concatenate([[np.nan], 0.5 * (xs[1:] + xs[:-1]), [np.nan]])
    if miss.any():               # also "all present values | missing ones", as XGBoost does
        thr[0], thr[-1] = xs[0] - abs(xs[0]) - 1e-6, xs[-1] + abs(xs[-1]) + 1e-6
    best = (0.0, None, False)
    for default_left in (False, True):              # missing go right, then left
        ok = cut.copy()
        if miss.any():
            ok[-1 if not default_left else 0] = True
        gl = GL + Gm * default_left
        hl = HL + Hm * default_left
        gr, hr = G - gl, H - hl
        ok &= (hl >= min_child_weight) & (hr >= min_child_weight)
        gain = score(gl, hl, lam) + score(gr, hr, lam) - score(G, H, lam)
        gain = np.where(ok, gain, -np.inf)
        if gain.size and gain.max() > best[0] + 1e-12:
            k = int(np.argmax(gain))
            best = (float(gain[k]), float(thr[k]), default_left)
    return best
# --8<-- [end:split]


# --8<-- [start:tree]
def build_tree(X, g, h, depth, p):
    """Grow a tree to max_depth, then prune splits whose score is below gamma."""
    G, H = g.sum(), h.sum()
    leaf = {"leaf": -G / (H + p["lambda"]) * p["eta"]}
    if depth == p["max_depth"]:
        return leaf
    best = (1e-6, None, None, False)                 # XGBoost requires a gain > 1e-6
    for f in range(X.shape[1]):
        gain, thr, dleft = best_split(X[:, f], g, h, p["lambda"], p["min_child_weight"])
        if thr is not None and gain > best[0]:
            best = (gain, f, thr, dleft)
    gain, f, thr, dleft = best
    if f is None:
        return leaf
    col = X[:, f]
    go_left = np.where(np.isnan(col), dleft, col < thr)
    node = {"feature": f, "threshold": thr, "default_left": dleft, "gain": gain,
            "left": build_tree(X[go_left], g[go_left], h[go_left], depth + 1, p),
            "right": build_tree(X[~go_left], g[~go_left], h[~go_left], depth + 1, p),
            **leaf}
    # post-pruning with gamma, bottom-up: a split both of whose children are leaves
    if "leaf" in node["left"] and "leaf" in node["right"] and "feature" not in node["left"] \
            and "feature" not in node["right"] and gain < p["gamma"]:
        return leaf
    return node


def predict_tree(node, X):
    out = np.empty(len(X))
    for r, x in enumerate(X):
        n = node
        while "feature" in n:
            v = x[n["feature"]]
            n = n["left"] if (n["default_left"] if np.isnan(v) else v < n["threshold"]) else n["right"]
        out[r] = n["leaf"]
    return out
# --8<-- [end:tree]


# --8<-- [start:boost]
def fit(X, y, loss, n_rounds, base_margin=0.0, **params):
    p = {"eta": 0.3, "lambda": 1.0, "gamma": 0.0, "max_depth": 6, "min_child_weight": 1.0}
    p.update(params)
    f = np.full(len(y), base_margin, dtype=float)
    trees = []
    for _ in range(n_rounds):
        g, h = loss(y, f)                 # first and second derivatives at the current margin
        g, h = (a.astype(np.float32).astype(np.float64) for a in (g, h))  # XGBoost stores them in float32
        tree = build_tree(X, g, h, 0, p)
        f += predict_tree(tree, X)
        trees.append(tree)
    return trees


def predict_margin(trees, X, base_margin=0.0):
    return base_margin + sum(predict_tree(t, X) for t in trees)
# --8<-- [end:boost]
