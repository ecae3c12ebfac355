"""Inference-time reasoning (docs/algorithm/reasoning.md): the accuracy of self-consistency's
majority vote, a breadth-first tree-of-thoughts search with an evaluator and a depth limit,
and the token cost of each method. Tested in tests/test_algorithm_reasoning.py.
"""
from __future__ import annotations

import itertools
from fractions import Fraction
from math import comb


# --8<-- [start:vote]
def majority_vote_accuracy(p, n):
    """n independent samples, each right with probability p, all wrong samples giving the same
    wrong answer (the hardest case for voting). The vote is right when more than n/2 samples are
    right; a tie counts as half. Scattered wrong answers only make the vote more accurate."""
    acc = 0.0
    for r in range(n + 1):
        pr = comb(n, r) * p ** r * (1 - p) ** (n - r)
        if 2 * r > n:
            acc += pr
        elif 2 * r == n:
            acc += 0.5 * pr
    return acc
# --8<-- [end:vote]


# --8<-- [start:tot]
def tot_bfs(root, expand, value, is_goal, breadth=5, max_depth=3):
    """Tree of thoughts, BFS variant: expand every kept state into candidate thoughts, score each
    with the evaluator, keep the `breadth` best, stop at max_depth (the tree is finite because
    depth and breadth are bounded). Returns (goal state or None, number of evaluator calls)."""
    frontier, calls = [root], 0
    for _ in range(max_depth):
        children = [c for s in frontier for c in expand(s)]
        calls += len(children)
        goals = [c for c in children if is_goal(c)]
        if goals:
            return goals[0], calls
        frontier = sorted(children, key=value, reverse=True)[:breadth]
    return None, calls


def game24_expand(state):
    """state: tuple of (value, expression). A thought combines two numbers with + - * /."""
    out = []
    for i, j in itertools.permutations(range(len(state)), 2):
        (a, ea), (b, eb) = state[i], state[j]
        rest = tuple(state[m] for m in range(len(state)) if m not in (i, j))
        cands = [(a + b, f"({ea}+{eb})"), (a - b, f"({ea}-{eb})"), (a * b, f"({ea}*{eb})")]
        if b != 0:
            cands.append((a / b, f"({ea}/{eb})"))
        out += [rest + (c,) for c in cands]
    return out


def game24_value(state):
    """A cheap evaluator: prefer states whose numbers can still reach 24 in one step."""
    vals = [v for v, _ in state]
    if len(vals) == 1:
        return 1.0 if vals[0] == 24 else 0.0
    if len(vals) == 2:
        a, b = vals
        hits = [a + b, a - b, b - a, a * b] + ([a / b] if b else []) + ([b / a] if a else [])
        return 1.0 if 24 in hits else 0.0
    return -min(abs(v - 24) for v in vals) / 24


def game24_root(numbers):
    return tuple((Fraction(n), str(n)) for n in numbers)
# --8<-- [end:tot]


# --8<-- [start:cost]
def generated_tokens(method, answer_tokens, n_samples=1, breadth=1, depth=1, k_children=1, eval_tokens=0):
    """Tokens the model generates per question (prompt processing excluded).
    direct: the answer; cot: reasoning + answer (answer_tokens includes it); self-consistency:
    n_samples chains; ToT-BFS: per level, breadth states x k_children thoughts plus one
    evaluation per child."""
    if method in ("direct", "cot"):
        return answer_tokens
    if method == "self-consistency":
        return n_samples * answer_tokens
    if method == "tot":
        per_thought = answer_tokens / depth
        return depth * breadth * k_children * (per_thought + eval_tokens)
    raise ValueError(method)
# --8<-- [end:cost]
