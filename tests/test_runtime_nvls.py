"""code/runtime/nvls_model.py: ring and NVLS all-reduce simulated transfer by transfer (results equal the plain
sum, bytes per GPU equal the closed forms), and the SymmetricMemory all-gather + matmul model."""
from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "runtime"))
import nvls_model as nm  # noqa: E402


def _inputs(p: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(p * 1000 + n)
    return [rng.integers(-1000, 1000, n).astype(np.int64) for _ in range(p)]


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("n", [64, 120, 1000])
def test_ring_and_nvls_match_sum_and_formulas(p, n):
    x = _inputs(p, n)
    ref = sum(x)
    item = x[0].itemsize
    for fn, formula in ((nm.ring_allreduce, nm.ring_bytes), (nm.nvls_allreduce, nm.nvls_bytes)):
        out, sent, recv = fn(x)
        for o in out:
            assert np.array_equal(o, ref)
        # every byte sent is received once (ring: by the neighbour; NVLS: counted through the switch)
        if n % p == 0:
            assert all(s == formula(p, n * item) for s in sent), (fn.__name__, p, n, sent)
            assert all(r == formula(p, n * item) for r in recv), (fn.__name__, p, n, recv)
        else:  # uneven slices: the total still equals p times the formula
            assert sum(sent) == p * formula(p, n * item) and sum(recv) == p * formula(p, n * item)


def test_nvls_beats_ring_from_three_gpus():
    for p in range(2, 73):
        ratio = nm.ring_bytes(p, 1) / nm.nvls_bytes(p, 1)
        assert ratio == Fraction(2 * (p - 1), p + 1)
        assert (ratio > 1) == (p > 3) and (ratio == 1) == (p == 3)
    assert nm.ring_bytes(8, 1) == Fraction(7, 4) and nm.nvls_bytes(8, 1) == Fraction(9, 8)
    assert nm.busbw_over_link(8, "ring") == 1
    assert nm.busbw_over_link(8, "nvls") == Fraction(14, 9)  # busbw above the link bandwidth


@pytest.mark.parametrize("p", [2, 4, 5])
def test_fused_all_gather_matmul(p):
    rng = np.random.default_rng(p)
    shards = [rng.integers(-5, 5, (3, 6)) for _ in range(p)]
    b = rng.integers(-5, 5, (6, 4))
    outs, orders = nm.fused_all_gather_matmul(shards, b)
    ref = np.concatenate(shards) @ b
    for r, (o, order) in enumerate(zip(outs, orders)):
        assert np.array_equal(o, ref)
        assert order[0] == r and sorted(order) == list(range(p))
    # at each step the p ranks read p different peers: no buffer is read by two ranks at once
    for step in range(1, p):
        assert len({orders[r][step] for r in range(p)}) == p
