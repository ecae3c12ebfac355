"""Monte-Carlo bias-variance decomposition of the squared error (docs/algorithm/classic-ml.md).

tests/test_algorithm_classic_ml.py checks that the measured test error equals
noise + bias^2 + variance and that polynomial degree trades bias for variance.
"""
from __future__ import annotations

import numpy as np


# --8<-- [start:decompose]
def bias_variance(fit_predict, f, sigma, x_test, n_train, trials, rng):
    """Train on `trials` fresh training sets; return (test MSE, noise, bias^2, variance),
    each averaged over x_test. fit_predict(x, y, x_test) -> predictions at x_test."""
    preds = np.empty((trials, len(x_test)))
    for k in range(trials):
        x = rng.uniform(-1, 1, n_train)
        preds[k] = fit_predict(x, f(x) + sigma * rng.normal(size=n_train), x_test)
    mean = preds.mean(0)                                   # E over training sets of f_hat(x)
    bias2 = np.mean((mean - f(x_test)) ** 2)
    var = np.mean(preds.var(0))
    y_test = f(x_test) + sigma * rng.normal(size=preds.shape)   # fresh noise at test time
    mse = np.mean((y_test - preds) ** 2)
    return mse, sigma ** 2, bias2, var
# --8<-- [end:decompose]
