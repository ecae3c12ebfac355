"""Three programming paradigms on one small problem, for docs/compiler/dataflow-analysis.md.

- imperative: a loop that mutates state step by step;
- functional: the same result as a composition of pure functions (and what jax.jit does with a side
  effect: it runs once, when the function is traced);
- logic: Datalog rules evaluated to a fixed point by semi-naive iteration, the same least-fixed-point
  computation as a dataflow analysis's worklist.
Checked by tests/test_compiler_paradigms.py.
"""
from __future__ import annotations

from functools import reduce


# --8<-- [start:styles]
def reachable_imperative(edges: set[tuple[str, str]], start: str) -> set[str]:
    """Imperative: a worklist and a visited set, changed in place."""
    seen, work = {start}, [start]
    while work:
        node = work.pop()
        for a, b in edges:
            if a == node and b not in seen:
                seen.add(b)
                work.append(b)
    return seen


def reachable_functional(edges: frozenset[tuple[str, str]], start: str) -> frozenset[str]:
    """Functional: no assignment to shared state; each step is a new value, recursion until nothing changes."""
    def step(nodes: frozenset[str]) -> frozenset[str]:
        return nodes | frozenset(b for a, b in edges if a in nodes)

    def fix(nodes: frozenset[str]) -> frozenset[str]:
        nxt = step(nodes)
        return nodes if nxt == nodes else fix(nxt)

    return fix(frozenset({start}))
# --8<-- [end:styles]


# --8<-- [start:datalog]
def datalog(facts: dict[str, set[tuple]], rules) -> dict[str, set[tuple]]:
    """Semi-naive evaluation. A rule is (head, body, join): join(rel, delta) yields new head tuples using at
    least one tuple from `delta` (the facts that are new since the last round), so old combinations are
    never recomputed. Stops at the least fixed point: a round that derives nothing new."""
    rel = {k: set(v) for k, v in facts.items()}
    delta = {k: set(v) for k, v in rel.items()}
    rounds = 0
    while any(delta.values()):
        rounds += 1
        new: dict[str, set[tuple]] = {}
        for head, join in rules:
            for t in join(rel, delta):
                if t not in rel.setdefault(head, set()):
                    new.setdefault(head, set()).add(t)
        for k, v in new.items():
            rel[k] |= v
        delta = new
    rel["_rounds"] = {(rounds,)}
    return rel


def _join(left: set[tuple], right: set[tuple]):
    """r(X, Z) :- left(X, Y), right(Y, Z)."""
    by_first: dict = {}
    for y, z in right:
        by_first.setdefault(y, []).append(z)
    return {(x, z) for x, y in left for z in by_first.get(y, ())}


# path(X, Y) :- edge(X, Y).        path(X, Z) :- path(X, Y), edge(Y, Z).
PATH_RULES = [
    ("path", lambda rel, d: set(d.get("edge", ()))),
    ("path", lambda rel, d: _join(d.get("path", set()), rel.get("edge", set()))
                            | _join(rel.get("path", set()), d.get("edge", set()))),
]

# Andersen-style points-to for four statement kinds:
#   p = &a  -> addr(p, a)      p = q -> copy(p, q)      p = *q -> load(p, q)      *p = q -> store(p, q)
# pts(P, A) :- addr(P, A).
# pts(P, A) :- copy(P, Q), pts(Q, A).
# pts(P, A) :- load(P, Q), pts(Q, B), pts(B, A).
# pts(B, A) :- store(P, Q), pts(P, B), pts(Q, A).
def _pts_rules():
    def copy(rel, d):
        return _join(rel.get("copy", set()), d.get("pts", set())) | _join(d.get("copy", set()), rel.get("pts", set()))

    def load(rel, d):
        pts, dp = rel.get("pts", set()), d.get("pts", set())
        via = _join(rel.get("load", set()), dp) | _join(d.get("load", set()), pts)  # (P, B)
        return _join(via, pts) | _join(_join(rel.get("load", set()), pts), dp)

    def store(rel, d):
        pts, dp = rel.get("pts", set()), d.get("pts", set())
        out = set()
        for p, q in rel.get("store", set()):
            for a_p, b in pts:
                if a_p != p:
                    continue
                for a_q, a in pts:
                    if a_q == q and ((a_p, b) in dp or (a_q, a) in dp or (p, q) in d.get("store", set())):
                        out.add((b, a))
        return out

    return [("pts", lambda rel, d: set(d.get("addr", ()))), ("pts", copy), ("pts", load), ("pts", store)]


PTS_RULES = _pts_rules()
# --8<-- [end:datalog]


def points_to_naive(addr, copy, load, store) -> set[tuple[str, str]]:
    """The same analysis by brute force: apply every rule to everything until nothing changes."""
    pts = set(addr)
    while True:
        nxt = set(pts)
        nxt |= {(p, a) for p, q in copy for q2, a in pts if q == q2}
        nxt |= {(p, a) for p, q in load for q2, b in pts if q == q2 for b2, a in pts if b == b2}
        nxt |= {(b, a) for p, q in store for p2, b in pts if p == p2 for q2, a in pts if q == q2}
        if nxt == pts:
            return pts
        pts = nxt


# --8<-- [start:jit]
def traced_side_effects(shapes) -> tuple[int, list]:
    """A Python side effect inside jax.jit runs when the function is traced, not when it is called:
    jit assumes the function is pure, caches the traced computation per input shape and dtype,
    and replays that computation on later calls."""
    import jax
    import jax.numpy as jnp

    log: list[tuple] = []

    @jax.jit
    def f(x):
        log.append(x.shape)  # impure: runs only while tracing
        return jnp.sum(x * x)

    results = [float(f(jnp.ones(s))) for s in shapes]
    return len(log), results
# --8<-- [end:jit]


def total(xs):
    """sum of squares of the even numbers, written as a fold: the functional form of an accumulator loop."""
    return reduce(lambda acc, x: acc + x * x, filter(lambda x: x % 2 == 0, xs), 0)
