"""code/compiler/dataflow.py against hand-computed liveness, reaching definitions, constant propagation and memory plans."""
from __future__ import annotations

import random
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "compiler"))
import dataflow as df  # noqa: E402

I, B = df.Instr, df.Block


def loop_program():
    """B0: x=3; y=4; i=0 → B1: z=x+y; c=i<10; br c → B2: i=i+1; x=x*1 → B1 | B3: r=z+i; ret r."""
    return df.CFG(
        {
            "B0": B("B0", [I("x", "const", (3,)), I("y", "const", (4,)), I("i", "const", (0,))], ["B1"]),
            "B1": B("B1", [I("z", "add", ("x", "y")), I("c", "lt", ("i", 10)), I(None, "br", ("c",))], ["B2", "B3"]),
            "B2": B("B2", [I("i", "add", ("i", 1)), I("x", "mul", ("x", 1))], ["B1"]),
            "B3": B("B3", [I("r", "add", ("z", "i")), I(None, "ret", ("r",))], []),
        },
        "B0",
    )


def test_liveness_matches_the_hand_solution():
    live_in, live_out = df.liveness(loop_program())
    assert live_in == {"B0": set(), "B1": {"x", "y", "i"}, "B2": {"x", "y", "i"}, "B3": {"z", "i"}}
    # y is live around the loop although B2 never reads it: B1 reads it on the next iteration
    assert live_out == {"B0": {"x", "y", "i"}, "B1": {"x", "y", "i", "z"}, "B2": {"x", "y", "i"}, "B3": set()}


def test_reaching_definitions_at_the_loop_header():
    reach_in, _ = df.reaching_definitions(loop_program())
    defs_of_i = sorted(d for d in reach_in["B1"] if d[2] == "i")
    assert defs_of_i == [("B0", 2, "i"), ("B2", 0, "i")]
    assert {d for d in reach_in["B3"] if d[2] == "z"} == {("B1", 0, "z")}


def test_constant_propagation_keeps_x_and_z_but_not_i():
    prog = loop_program()
    env_in, env_out, _ = df.constant_propagation(prog, ["x", "y", "i", "z", "c", "r"])
    assert env_in["B1"]["x"] == 3 and env_in["B1"]["y"] == 4  # x*1 = 3 on the back edge agrees with 3
    assert env_in["B1"]["i"] == df.NAC  # 0 from B0 meets i+1 = 1 from B2
    assert env_out["B1"]["z"] == 7 and env_in["B3"]["z"] == 7
    assert env_out["B1"]["c"] == df.NAC and env_out["B3"]["r"] == df.NAC


def test_constant_propagation_straight_line_folds_everything():
    cfg = df.CFG({"B0": B("B0", [I("a", "const", (6,)), I("b", "mul", ("a", 7)), I("c", "sub", ("b", "a"))], [])}, "B0")
    _, out, steps = df.constant_propagation(cfg, ["a", "b", "c"])
    assert out["B0"] == {"a": 6, "b": 42, "c": 36} and steps == 1


def test_meet_is_the_constant_lattice():
    assert df.meet_value(df.UNDEF, 5) == 5 and df.meet_value(5, 5) == 5
    assert df.meet_value(5, 6) == df.NAC and df.meet_value(df.NAC, df.UNDEF) == df.NAC


def test_memory_plan_of_the_hand_example():
    ops = [("a", ["x"]), ("b", ["a"]), ("c", ["a", "b"]), ("d", ["c"]), ("e", ["d", "b"])]
    sizes = {"a": 4, "b": 2, "c": 4, "d": 1, "e": 2}
    ts = df.lifetimes(ops, sizes, outputs=["e"])
    assert {t.name: (t.producer, t.last_use) for t in ts} == {"a": (0, 2), "b": (1, 4), "c": (2, 3), "d": (3, 4), "e": (4, 5)}
    assert df.peak_live_bytes(ts) == 10  # step 2: a + b + c
    offsets, arena = df.plan_greedy_by_size(ts, align=1)
    assert offsets == {"a": 0, "c": 4, "b": 8, "e": 0, "d": 2} and arena == 10
    df.check_plan(ts, offsets)
    assert sum(sizes.values()) == 13  # naive: every tensor its own buffer


def test_memory_plan_is_valid_on_random_graphs():
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(3, 25)
        ops = [(f"t{i}", [f"t{j}" for j in rng.sample(range(i), min(i, rng.randint(1, 3)))] if i else ["x"]) for i in range(n)]
        sizes = {f"t{i}": rng.choice([64, 128, 256, 1024, 4096]) for i in range(n)}
        ts = df.lifetimes(ops, sizes, outputs=[f"t{n - 1}"])
        offsets, arena = df.plan_greedy_by_size(ts)
        df.check_plan(ts, offsets)
        assert all(off % 64 == 0 for off in offsets.values())
        assert df.peak_live_bytes(ts) <= arena <= sum(sizes.values())
