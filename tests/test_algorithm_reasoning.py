"""code/algorithm/reasoning.py against simulation and brute force."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from algorithm_helpers import load_listing

rs = load_listing("algorithm_reasoning", "reasoning.py")


def test_majority_vote_matches_simulation_and_condorcet():
    rng = np.random.default_rng(0)
    for p, n in ((0.6, 5), (0.6, 20), (0.4, 9), (0.7, 40)):
        right = rng.random((200_000, n)) < p
        r = right.sum(1)
        sim = np.mean((2 * r > n) + 0.5 * (2 * r == n))
        assert abs(sim - rs.majority_vote_accuracy(p, n)) < 0.005
    assert math.isclose(rs.majority_vote_accuracy(0.6, 1), 0.6)
    accs = [rs.majority_vote_accuracy(0.6, n) for n in (1, 5, 21, 41)]
    assert accs == sorted(accs) and accs[-1] > 0.9
    assert rs.majority_vote_accuracy(0.4, 41) < 0.4           # voting amplifies a wrong majority
    assert round(rs.majority_vote_accuracy(0.6, 40), 3) == 0.898


def test_tot_bfs_solves_game24_within_limits():
    def check(numbers, breadth):
        goal, calls = rs.tot_bfs(rs.game24_root(numbers), rs.game24_expand, rs.game24_value,
                                 lambda s: len(s) == 1 and s[0][0] == 24, breadth=breadth, max_depth=3)
        return goal, calls

    goal, calls = check((4, 9, 10, 13), breadth=5)
    assert goal is not None and eval(goal[0][1], {}, {}) == 24
    # the full tree has 4*3*4 * 3*2*4 * 2*1*4 = 9216 leaves; the beam evaluates far fewer nodes
    assert calls < 9216
    # greedy search (breadth 1) fails on the same problem: width trades evaluator calls for recall
    goal1, calls1 = check((4, 9, 10, 13), breadth=1)
    assert goal1 is None and calls1 < calls
    assert (calls, calls1) == (208, 80)


def test_cost_model():
    assert rs.generated_tokens("self-consistency", 300, n_samples=40) == 12_000
    assert rs.generated_tokens("tot", 300, breadth=5, depth=3, k_children=5, eval_tokens=20) == 3 * 5 * 5 * 120
