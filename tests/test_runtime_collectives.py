"""code/runtime/collectives.py on gloo ranks (p = 2, 3, 4: results equal torch.distributed's collectives, bytes
sent per rank equal the cost model's volume term) and code/runtime/checkpoint_sim.py (Young/Daly against the
exact expectation and a Monte Carlo run)."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
sys.path.insert(0, str(ROOT / "code" / "runtime"))
import checkpoint_sim as ck  # noqa: E402
import collectives as C  # noqa: E402
import dist_launch  # noqa: E402

NUMEL = 240  # divisible by 2 * p for p = 2, 3, 4 and by 2 * q for the power-of-two sub-groups


@pytest.mark.parametrize("p", [2, 3, 4])
def test_collectives_match_torch_and_volume(p):
    res = dist_launch.launch(C.worker_check, p, NUMEL, list(C.ALGOS), timeout=120)
    n = NUMEL * 4
    for r, o in enumerate(res):
        assert o["numel_bytes"] == n
        for algo in C.ALGOS:
            out, sent = o[algo]
            # integer-valued float32 inputs: every order of summation is exact, so equality is bitwise
            assert np.array_equal(out, o["ref"]), (p, algo, r)
            assert sent == C.sent_bytes_formula(algo, p, n, r), (p, algo, r, sent)
        chunk, own, rs_ref, sent = o["ring_rs"]
        assert own == (r + 1) % p
        assert np.array_equal(chunk, np.array_split(o["ref"], p)[own])
        assert np.array_equal(rs_ref, np.array_split(o["ref"], p)[r])
        assert sent == C.sent_bytes_formula("ring_rs", p, n, r) == (p - 1) * n // p
        ag, ag_ref, sent = o["ring_ag"]
        assert np.array_equal(ag, ag_ref) and sent == (p - 1) * n // p
        a2a, a2a_ref, sent = o["a2a"]
        assert np.array_equal(a2a, a2a_ref) and sent == (p - 1) * n // p
    # every algorithm moves 2(p-1)n bytes in total; the ring is the one that spreads them evenly
    for algo in ("ring", "tree", "dbtree"):
        assert sum(o[algo][1] for o in res) == 2 * (p - 1) * n
    assert all(o["ring"][1] == 2 * (p - 1) * n // p for o in res)


def test_double_tree_properties():
    for p in range(2, 33):
        for t in (0, 1):
            parents = [C.dbtree(p, r, t)[0] for r in range(p)]
            assert parents.count(-1) == 1  # one root
            for r in range(p):  # parent/child links agree
                for c in C.dbtree(p, r, t)[1]:
                    assert parents[c] == r
        if p % 2 == 0:  # mirrored: no rank is an inner node of both trees, so no rank sends more than 2n
            inner = [{r for r in range(p) if C.dbtree(p, r, t)[1]} for t in (0, 1)]
            assert not inner[0] & inner[1]
            assert max(C.sent_bytes_formula("dbtree", p, 8 * p, r) for r in range(p)) <= 2 * 8 * p
        if p >= 4:  # a single binary tree makes some inner rank send 3n
            assert max(C.sent_bytes_formula("tree", p, 8, r) for r in range(p)) == 3 * 8


def test_cost_models():
    a, b = 5e-6, 1 / 50e9
    p, n = 8, 64 * 2**20
    assert C.model_time("ring", "allreduce", p, n, a, b) == pytest.approx(14 * a + 1.75 * n * b)
    assert C.model_time("rabenseifner", "allreduce", p, n, a, b) == pytest.approx(6 * a + 1.75 * n * b)
    # ring and recursive doubling cross where the formula says
    x = C.crossover_ring_rd(p, a, b)
    assert C.model_time("ring", "allreduce", p, x, a, b) == pytest.approx(C.model_time("rd", "allreduce", p, x, a, b))
    assert C.model_time("rd", "allreduce", p, x / 10, a, b) < C.model_time("ring", "allreduce", p, x / 10, a, b)
    assert C.model_time("ring", "allreduce", p, x * 10, a, b) < C.model_time("rd", "allreduce", p, x * 10, a, b)
    # pipelined trees: bandwidth term tends to c*n*beta (c = 3 single, 2 double) as n grows
    big = 2**40
    for algo, c in (("tree", 3), ("dbtree", 2)):
        assert C.model_time(algo, "allreduce", 64, big, a, b) / (c * big * b) == pytest.approx(1, rel=0.01)
    assert C.BUSBW_FACTOR["allreduce"](8) == 1.75 and C.BUSBW_FACTOR["allgather"](8) == 0.875


def test_young_daly_against_exact_optimum():
    for delta, mtbf in [(5, 11134), (60, 3 * 3600), (300, 3600)]:
        best = ck.optimal_interval_numeric(delta, mtbf)
        assert ck.daly_interval(delta, mtbf) == pytest.approx(best, rel=1e-3)
        # Young is first order: its error grows like sqrt(delta / M)
        assert abs(ck.young_interval(delta, mtbf) / best - 1) < 1.5 * math.sqrt(delta / mtbf)
        # and being 10 % off the optimum costs little: the curve is flat near its minimum
        f = lambda t: float(ck.expected_wall_time(t, delta, mtbf, 0.0, 1.0))  # noqa: E731
        assert f(1.1 * best) / f(best) < 1.01


def test_monte_carlo_matches_daly_expectation():
    tau, delta, mtbf, restart, segs = 1200.0, 60.0, 3 * 3600.0, 120.0, 20
    wall = ck.simulate_wall_time(tau, delta, mtbf, restart, segs, runs=4000, seed=1)
    exact = float(ck.expected_wall_time(tau, delta, mtbf, restart, segs * tau))
    sem = wall.std() / math.sqrt(wall.size)
    assert abs(wall.mean() - exact) < 4 * sem  # 4 standard errors: a false alarm has odds below 1e-4


def test_straggler_detector():
    rng = np.random.default_rng(0)
    times = rng.normal(1.0, 0.01, (16, 50))
    times[5] *= 1.2  # a rank 20 % slower on every step
    times[9, 3] = 5.0  # a single hiccup must not flag rank 9
    assert ck.find_stragglers(times) == [5]
    assert ck.find_stragglers(np.ones((8, 10))) == []
