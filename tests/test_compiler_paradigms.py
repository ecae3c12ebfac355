"""code/compiler/paradigms.py: the three styles agree, Datalog equals brute force, jit traces once per shape."""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code" / "compiler"))
import paradigms as pg  # noqa: E402


def _graph(seed, n=12, m=20):
    rng = random.Random(seed)
    return {(f"n{rng.randrange(n)}", f"n{rng.randrange(n)}") for _ in range(m)}


def test_imperative_functional_and_datalog_reachability_agree():
    for seed in range(20):
        edges = _graph(seed)
        rel = pg.datalog({"edge": edges}, pg.PATH_RULES)
        for start in {a for a, _ in edges}:
            imp = pg.reachable_imperative(edges, start)
            fun = pg.reachable_functional(frozenset(edges), start)
            dl = {start} | {b for a, b in rel["path"] if a == start}
            assert imp == set(fun) == dl


def test_semi_naive_rounds_are_bounded_by_the_longest_shortest_path():
    chain = {(f"v{i}", f"v{i + 1}") for i in range(10)}
    rel = pg.datalog({"edge": chain}, pg.PATH_RULES)
    assert len(rel["path"]) == 10 * 11 // 2
    (rounds,), = rel["_rounds"]
    assert rounds == 11  # one round per path length 1..10, and a last round that derives nothing


def test_points_to_equals_brute_force():
    rng = random.Random(1)
    names = [f"p{i}" for i in range(6)] + [f"o{i}" for i in range(4)]
    for _ in range(30):
        stmts = {k: {(rng.choice(names), rng.choice(names)) for _ in range(rng.randrange(1, 6))}
                 for k in ("addr", "copy", "load", "store")}
        got = pg.datalog(stmts, pg.PTS_RULES).get("pts", set())
        assert got == pg.points_to_naive(stmts["addr"], stmts["copy"], stmts["load"], stmts["store"])


def test_points_to_of_a_tiny_program():
    # a = &x; b = &y; p = &a; c = *p; *p = b
    facts = {"addr": {("a", "x"), ("b", "y"), ("p", "a")}, "copy": set(), "load": {("c", "p")}, "store": {("p", "b")}}
    pts = pg.datalog(facts, pg.PTS_RULES)["pts"]
    assert {o for v, o in pts if v == "a"} == {"x", "y"}  # the store through p makes a point to y as well
    assert {o for v, o in pts if v == "c"} == {"x", "y"}


def test_jit_runs_python_side_effects_once_per_traced_shape():
    n_traces, results = pg.traced_side_effects([(3,), (3,), (3,), (4,), (4,)])
    assert n_traces == 2
    assert results == [3.0, 3.0, 3.0, 4.0, 4.0]


def test_fold_equals_loop():
    xs = list(range(-5, 12))
    acc = 0
    for x in xs:
        if x % 2 == 0:
            acc += x * x
    assert pg.total(xs) == acc
