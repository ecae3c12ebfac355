"""code/compiler/difftest.py: three summation orders differ bitwise but all stay inside Higham's reassociation bound;
the differential fuzzer finds the input that breaks an unsafe x * 0 -> 0 rewrite and none for the safe passes."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import difftest as D  # noqa: E402
import graph_opt as go  # noqa: E402


def test_orders_differ_but_stay_within_the_bound():
    x = np.random.default_rng(0).standard_normal(1 << 14).astype(np.float32) * 100
    exact = x.astype(np.float64).sum()
    results = [D.sum_sequential(x), D.sum_pairwise(x), D.sum_blocked(x)]
    assert len({float(r) for r in results}) == 3  # pairwise different, as correctness.md says
    bound = D.reassociation_bound(x)
    for r in results:
        assert abs(float(r) - exact) <= bound
    # the numbers quoted on correctness.md (NumPy's PCG64 stream with seed 0 is fixed across versions)
    assert exact == pytest.approx(9497.2056, abs=1e-3) and bound == pytest.approx(1276.5, abs=0.1)
    errors = [float(r) - exact for r in results]
    assert errors == pytest.approx([-1.4e-2, 4.8e-4, -4.4e-3], rel=0.05)


def f(x):
    return torch.relu(x * 0 + x) * 1


def test_fuzzer_catches_the_unsafe_rewrite_and_passes_the_safe_ones():
    bad = D.fuzz(f, D.simplify_unsafe)
    assert bad is not None and not np.isfinite(bad).all()  # the counterexample contains inf or NaN

    def safe(gm):
        go.cse(gm)
        go.simplify(gm)
        go.dce(gm)
        return gm

    assert D.fuzz(f, safe) is None
