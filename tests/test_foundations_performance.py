"""The CS:APP chapter 5 and 6 examples: code/foundations/cpp/combine.c, locality.c and the CPE runner cpe-bench.py.

docs/foundations/cpp/optimizing-performance.md and cache-friendly-code.md explain them and quote the committed record
data/records/cpu-amd-epyc-2c/cpe.json. The tests check correctness (every rung of the ladder against its reference in
all four type/operation variants and at -O1 and -O2, the transposes and the matrix products against each other), the
code gcc emits for the aliasing rungs, that the runner writes a complete record, and, on the committed record only,
orderings that the latency and throughput bounds guarantee, with wide margins. No test asserts a live timing.
"""
from __future__ import annotations

import importlib.util
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPP = ROOT / "code" / "foundations" / "cpp"
RECORD = ROOT / "data" / "records" / "cpu-amd-epyc-2c" / "cpe.json"
VARIANTS = {("long", "add"): [], ("long", "mul"): ["-DOP_MUL"], ("double", "add"): ["-DDATA_DOUBLE"],
            ("double", "mul"): ["-DDATA_DOUBLE", "-DOP_MUL"]}
RUNGS = re.findall(r'\{"(combine\w+)", combine\w+, [01]\}', (CPP / "combine.c").read_text(encoding="utf-8"))

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or platform.machine() != "x86_64",
                               reason="the examples are C for x86-64, built with gcc")


def build(tmp: Path, source: str, *flags: str) -> Path:
    exe = tmp / (source + "".join(flags).replace("-", "_").replace("=", "_"))
    proc = subprocess.run(["gcc", "-std=c17", "-Wall", "-Wextra", "-Werror", *flags, str(CPP / source), "-o", str(exe)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return exe


def test_the_rung_table_lists_eleven_rungs():
    assert RUNGS == ["combine1", "combine2", "combine3", "combine3r", "combine4", "combine5", "combine6", "combine7",
                     "combine4x4", "combine8x8", "combine8x1a"]


@needs_gcc
@pytest.mark.parametrize("opt", ["-O1", "-O2"])
@pytest.mark.parametrize("variant", list(VARIANTS), ids=lambda v: "-".join(v))
def test_every_rung_matches_the_reference(tmp_path, variant, opt):
    """Integers bit for bit; doubles bit for bit where the order of operations is combine4's, within the
    reassociation error bound otherwise; and the aliased call of combine3 differs from combine4."""
    flags = [opt, *VARIANTS[variant]]
    for extra in ([], ["-g", "-fsanitize=address,undefined"]) if opt == "-O1" else ([],):
        out = subprocess.run([str(build(tmp_path, "combine.c", *flags, *extra))], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        typ, op = variant
        assert out.stdout.strip() == (f"combine self-check ok: {typ} {'+' if op == 'add' else '*'}, "
                                      f"{len(RUNGS)} rungs, aliasing changes the result")


def loop_body(asm: str, function: str) -> list[str]:
    """The instructions of the function's innermost loop: from the target of its last backward jump to that jump."""
    body = asm.split(f"\n{function}:\n", 1)[1].split("\t.size", 1)[0].splitlines()
    lines = [line.strip() for line in body]
    for i in range(len(lines) - 1, -1, -1):
        m = re.match(r"j(?!mp\t)\w+\t(\.L\d+)$", lines[i])  # a conditional jump
        if m and f"{m.group(1)}:" in lines[:i]:
            return lines[lines.index(f"{m.group(1)}:") + 1:i]
    raise AssertionError(f"{function}: no loop")


@needs_gcc
@pytest.mark.parametrize("variant", list(VARIANTS), ids=lambda v: "-".join(v))
def test_aliasing_keeps_the_accumulator_in_memory_unless_restrict_says_otherwise(variant):
    asm = subprocess.run(["gcc", "-std=c17", "-O1", "-S", "-fno-asynchronous-unwind-tables", *VARIANTS[variant],
                          str(CPP / "combine.c"), "-o", "-"], capture_output=True, text=True, check=True).stdout
    # a write to memory: an instruction (not a compare) whose last operand, the destination in AT&T syntax, is memory
    store = re.compile(r"^(?!cmp|test)(\w+)\t.*, (-?\d*\(%\w+\))$")
    c3 = loop_body(asm, "combine3")
    stores = [store.match(line) for line in c3 if store.match(line)]
    assert len(stores) == 1, f"combine3 writes *dest on every iteration: {c3}"
    dest = stores[0].group(2)
    reads = [line for line in c3 if dest in line and (not line.startswith("mov") or not line.endswith(dest))]
    assert reads, f"... and reads it back on the next (a load, or the read of a read-modify-write): {c3}"
    for name in ("combine3r", "combine4", "combine6", "combine8x8"):
        assert not [line for line in loop_body(asm, name) if store.match(line)], f"{name}: no store in the loop"
    c1 = loop_body(asm, "combine1")
    assert "call\tvec_length" in c1 and "call\tget_vec_element" in c1, "combine1 calls both functions every iteration"
    assert "call\tvec_length" not in loop_body(asm, "combine2"), "combine2 moved vec_length out of the loop"


@needs_gcc
@pytest.mark.parametrize("opt", ["-O1", "-O2"])
def test_locality_examples_agree(tmp_path, opt):
    out = subprocess.run([str(build(tmp_path, "locality.c", opt))], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "transpose blocked == naive, matmul ijk == jki == kij" in out.stdout, out.stderr


def load_runner():
    spec = importlib.util.spec_from_file_location("cpe_bench", CPP / "cpe-bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cpe_bench"] = module
    spec.loader.exec_module(module)
    return module


PROVENANCE = ("machine", "cpu", "cpu_family", "cpu_model", "cores", "os", "kernel", "gcc", "cflags", "date", "command",
              "caches", "loadavg_1min")


def check_record(record: dict, transposes: int, matmul_n: int) -> None:
    assert record["schema"] == 1 and record["experiment"] == "cpe" and record["title"]
    prov = record["provenance"]
    for key in PROVENANCE:
        assert prov.get(key) not in (None, "", {}), f"provenance lacks {key}"
    assert "gcc" in prov["gcc"] and prov["cflags"] == "-std=c17 -O1"
    res = record["results"]
    assert 0.3 < res["clock_ghz"] < 8, "one cycle of a plausible clock"
    assert {(b["type"], b["op"]) for b in res["bounds"]} == set(VARIANTS)
    for typ, op in VARIANTS:
        rows = [r for r in res["combine"] if (r["type"], r["op"]) == (typ, op)]
        assert [r["rung"] for r in rows] == RUNGS
        for r in rows:
            assert r["ns_per_element"] > 0 and abs(r["cpe"] - r["ns_per_element"] / r["cycle_ns"]) < 1e-9
    assert len(res["transpose"]) == 2 * transposes and {t["variant"] for t in res["transpose"]} == {"naive", "blocked"}
    assert [m["order"] for m in res["matmul"]] == ["ijk", "jki", "kij"] and res["matmul"][0]["n"] == matmul_n


@needs_gcc
def test_the_runner_writes_a_complete_record(tmp_path):
    runner = load_runner()
    out = tmp_path / "cpe.json"
    assert runner.main(["--quick", "--out", str(out)]) == 0
    check_record(json.loads(out.read_text(encoding="utf-8")), transposes=1, matmul_n=64)
    assert runner.machine_slug("AMD EPYC", 2) == "cpu-amd-epyc-2c"


def committed() -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8"))


def test_the_committed_record_is_complete():
    record = committed()
    check_record(record, transposes=len(load_runner().TRANSPOSES), matmul_n=load_runner().MATMUL_N)
    assert record["provenance"]["machine"] == RECORD.parent.name
    assert record["provenance"]["command"].startswith("python code/foundations/cpp/cpe-bench.py")


def cpe(record: dict, rung: str, typ: str, op: str) -> float:
    return next(r["cpe"] for r in record["results"]["combine"] if (r["rung"], r["type"], r["op"]) == (rung, typ, op))


def test_the_committed_ladder_respects_its_bounds():
    """What the latency and throughput bounds guarantee, with margins no machine noise comes near: one accumulator
    cannot beat the latency of the operation; k accumulators cannot beat latency / k nor the issue rate; k
    independent chains are faster than one."""
    record = committed()
    for b in record["results"]["bounds"]:
        typ, op, lat = b["type"], b["op"], b["latency_cycles"]
        assert b["throughput_cycles"] < lat, "a pipelined unit starts a new operation before the last ends"
        for rung in ("combine3r", "combine4", "combine5"):
            assert cpe(record, rung, typ, op) > 0.8 * lat, f"{rung} {typ} {op}: one chain, at least the latency"
        assert cpe(record, "combine6", typ, op) > 0.8 * lat / 2
        assert cpe(record, "combine8x8", typ, op) < 0.7 * cpe(record, "combine4", typ, op)
        assert cpe(record, "combine1", typ, op) > 2 * cpe(record, "combine4", typ, op), "calls and memory cost"
        if typ == "double":
            assert cpe(record, "combine8x8", typ, op) > 0.8 * b["throughput_cycles"], "no faster than the units issue"
            assert cpe(record, "combine3", typ, op) > 2 * cpe(record, "combine3r", typ, op), "*dest in memory: a longer chain"


def test_the_committed_locality_figures_follow_the_miss_counts():
    res = committed()["results"]
    per = {m["order"]: m["cycles_per_iteration"] for m in res["matmul"]}
    assert per["kij"] < per["ijk"] < per["jki"], "CS:APP counts 0.5, 1.25 and 2 misses per iteration, in that order"
    t = {(x["variant"], x["n"], x["ld"]): x["cycles_per_element"] for x in res["transpose"]}
    assert t["naive", 4096, 4096] > 2 * t["blocked", 4096, 4096], "a power-of-two stride: one set, conflict misses"
    assert t["naive", 4096, 4096] > 2 * t["naive", 4096, 4104], "padding each row by a line spreads a column over the sets"
