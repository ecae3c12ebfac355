"""The from-scratch SMO (code/algorithm/smo.py) and second-order boosting
(code/algorithm/gbdt.py) against the libraries everyone uses: scikit-learn's SVC
(libsvm) and xgboost with tree_method="exact"."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from conftest import ROOT


def _load(name):
    spec = importlib.util.spec_from_file_location(f"algorithm_{name}", ROOT / "code" / "algorithm" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


smo = _load("smo")
gbdt = _load("gbdt")


def _pm1(y):
    return np.where(y == 1, 1.0, -1.0)


@pytest.mark.parametrize("kind", ["linear", "rbf"])
def test_smo_matches_libsvm(kind):
    from sklearn.datasets import make_blobs, make_moons
    from sklearn.svm import SVC

    if kind == "linear":
        X, y = make_blobs(120, centers=2, cluster_std=2.0, random_state=1)
        kernel, ref = smo.linear_kernel, SVC(kernel="linear", C=1.0, tol=1e-6)
    else:
        X, y = make_moons(120, noise=0.2, random_state=1)
        kernel, ref = (lambda A, B: smo.rbf_kernel(A, B, 1.0)), SVC(kernel="rbf", gamma=1.0, C=1.0, tol=1e-6)
    y = _pm1(y)
    model = smo.smo(X, y, C=1.0, kernel=kernel, tol=1e-6)
    ref.fit(X, y)
    assert model.gap < 1e-6
    assert set(model.support.tolist()) == set(ref.support_.tolist())
    # dual coefficients alpha_i y_i of the support vectors
    ay = np.zeros(len(y))
    ay[ref.support_] = ref.dual_coef_[0]
    assert np.allclose(model.alpha * y, ay, atol=1e-3)
    grid = np.random.default_rng(0).uniform(X.min(0), X.max(0), size=(200, 2))
    assert np.abs(model.decision_function(grid) - ref.decision_function(grid)).max() < 1e-3
    assert abs(np.sum(model.alpha * y)) < 1e-9          # equality constraint kept exactly
    assert model.alpha.min() >= 0 and model.alpha.max() <= 1.0 + 1e-12


def test_smo_hard_margin_on_separable_data():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [3.0, 3.0], [4.0, 3.0], [3.0, 4.0]])
    y = np.array([-1, -1, -1, 1, 1, 1.0])
    m = smo.smo(X, y, C=1e6)
    f = m.decision_function(X)
    assert np.all(y * f >= 1 - 1e-5)
    # closest points are (1,0),(0,1) and (3,3): the margin is their distance to the plane
    w = (m.alpha * y) @ X
    assert np.isclose(2 / np.linalg.norm(w), np.sqrt(2) * 2.5, rtol=1e-4)


def _xgb(X, y, objective, rounds, **p):
    import xgboost as xgb

    params = {"tree_method": "exact", "objective": objective, "base_score": 0.5, "nthread": 1,
              "eta": p["eta"], "max_depth": p["max_depth"], "lambda": p["lambda"],
              "gamma": p["gamma"], "min_child_weight": p["min_child_weight"]}
    bst = xgb.train(params, xgb.DMatrix(X, y, missing=np.nan), rounds)
    return bst, bst.predict(xgb.DMatrix(X, missing=np.nan), output_margin=True)


@pytest.mark.parametrize("missing,gamma", [(False, 0.0), (False, 0.5), (True, 0.0)])
def test_boosting_matches_xgboost_exact(missing, gamma):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    y = X[:, 0] ** 2 + np.sin(2 * X[:, 1]) + 0.3 * rng.normal(size=200)
    if missing:
        X[rng.random(X.shape) < 0.1] = np.nan
    p = {"eta": 0.3, "max_depth": 3, "lambda": 1.0, "gamma": gamma, "min_child_weight": 1.0}
    trees = gbdt.fit(X, y, gbdt.squared_error, 10, base_margin=0.5, **p)
    _, ref = _xgb(X, y, "reg:squarederror", 10, **p)
    assert np.abs(gbdt.predict_margin(trees, X, 0.5) - ref).max() < 1e-4


def test_logistic_boosting_and_reported_gain():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=200) > 0).astype(float)
    p = {"eta": 0.3, "max_depth": 2, "lambda": 2.0, "gamma": 0.0, "min_child_weight": 1.0}
    # base_score 0.5 is a margin of 0 for the logistic loss
    trees = gbdt.fit(X, y, gbdt.logistic, 8, base_margin=0.0, **p)
    bst, ref = _xgb(X, y, "binary:logistic", 8, **p)
    assert np.abs(gbdt.predict_margin(trees, X) - ref).max() < 1e-4
    # XGBoost's dumped "gain" is G_L^2/(H_L+l) + G_R^2/(H_R+l) - G^2/(H+l): no factor 1/2
    root = bst.get_dump(with_stats=True)[0].splitlines()[0]
    gain = float(root.split("gain=")[1].split(",")[0])
    assert np.isclose(gain, trees[0]["gain"], rtol=1e-5)


def test_gamma_is_post_pruning_for_exact_and_pre_pruning_for_hist():
    # XOR: the root split gains little (~5.8), its children gain a lot (~190). With gamma=10,
    # exact (grow, then prune bottom-up) keeps the root; hist skips it when expanding.
    import xgboost as xgb

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (400, 2))
    y = np.sign(X[:, 0]) * np.sign(X[:, 1]) + 0.01 * rng.normal(size=400)
    p = {"eta": 1.0, "max_depth": 2, "lambda": 1.0, "gamma": 10.0, "min_child_weight": 1.0}
    common = {"objective": "reg:squarederror", "base_score": 0.0, "nthread": 1, **p}
    n_nodes = {}
    for method in ("exact", "hist"):
        bst = xgb.train({**common, "tree_method": method}, xgb.DMatrix(X, y), 1)
        dump = bst.get_dump(with_stats=True)[0]
        n_nodes[method] = len(dump.splitlines())
        if method == "exact":
            root_gain = float(dump.splitlines()[0].split("gain=")[1].split(",")[0])
            ref = bst.predict(xgb.DMatrix(X), output_margin=True)
    assert root_gain < p["gamma"]                      # the kept root is below gamma ...
    assert n_nodes == {"exact": 7, "hist": 1}          # ... yet exact keeps the full depth-2 tree
    tree = gbdt.fit(X, y, gbdt.squared_error, 1, base_margin=0.0, **p)[0]
    assert "feature" in tree and tree["gain"] < p["gamma"]
    assert np.abs(gbdt.predict_tree(tree, X) - ref).max() < 1e-4    # float32 leaves in xgboost


def test_leaf_weight_is_newton_step():
    g = np.array([0.5, -1.0, 2.0])
    h = np.array([1.0, 0.5, 0.25])
    X = np.zeros((3, 1))
    p = {"eta": 1.0, "lambda": 1.0, "gamma": 0.0, "max_depth": 0, "min_child_weight": 1.0}
    leaf = gbdt.build_tree(X, g, h, 0, p)["leaf"]
    assert np.isclose(leaf, -g.sum() / (h.sum() + 1.0))


bv = _load("bias_variance")


def test_bias_variance_decomposition_and_tradeoff():
    rng = np.random.default_rng(0)
    f = lambda x: np.sin(3 * x)                      # noqa: E731
    x_test = np.linspace(-0.9, 0.9, 50)
    rows = {}
    for degree in (1, 3, 9):
        fp = lambda x, y, xt, d=degree: np.polyval(np.polyfit(x, y, d), xt)   # noqa: E731
        mse, noise, bias2, var = bv.bias_variance(fp, f, 0.3, x_test, 30, 2000, rng)
        assert np.isclose(mse, noise + bias2 + var, rtol=0.03)   # Monte-Carlo error ~1%
        rows[degree] = (mse, bias2, var)
    assert rows[1][1] > rows[3][1] > rows[9][1]          # bias^2 falls with the degree
    assert rows[9][2] > 10 * rows[3][2]                  # variance explodes at degree 9
    assert rows[3][0] < min(rows[1][0], rows[9][0])      # the middle degree has the lowest error
