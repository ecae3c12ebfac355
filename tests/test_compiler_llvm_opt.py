"""code/compiler/llvm_opt.py: scalar and loop optimisations run on the LLVM inside llvmlite. The committed records
(code/compiler/records/llvm-*.txt) equal what the installed llvmlite produces now; the stable shape of each
transformation is asserted (phis after sroa, the constant SCCP finds, the dead cycle only ADCE removes, what LICM may
hoist with and without noalias, the closed form SCEV substitutes, LSR's pointer induction variable, <8 x float> vector
bodies and their runtime checks, and the transformations that disappear when nsw is removed); and every IR shown, plus
the whole -O2/-O3 result, is executed through MCJIT and compared with a Python reference on random inputs, with the
inputs whose C behaviour is undefined tested separately."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from conftest import ROOT

pytest.importorskip("llvmlite")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import llvm_opt as L  # noqa: E402

RECORDS = ROOT / "code" / "compiler" / "records"


@pytest.fixture(scope="module")
def st():
    return L.stages()


def fn(st, prog, stage):
    return L.function_text(st[prog, stage], prog)


def has_loop(func):
    """Some block branches back to itself or to a block laid out before it: a loop is left in the function."""
    labels = L.blocks(func)
    for i, lab in enumerate(labels):
        terminator = L.block_text(func, lab).splitlines()[-1]
        if any(t in labels[: i + 1] for t in re.findall(r"label %([\w.]+)", terminator)):
            return True
    return False


def test_records_are_what_llvmlite_produces_now(st):
    texts = L.record_texts(st)
    assert set(texts) == {p.name for p in RECORDS.glob("llvm-*.txt")}
    for name, (how, body) in texts.items():
        lines = (RECORDS / name).read_text().splitlines()
        assert lines[0] == f"# tool: {L.TOOL}; {how}", name  # same llvmlite/LLVM as installed: else regenerate
        assert lines[1].startswith("# machine: ") and lines[2].startswith("# produced: ")
        assert "\n".join(lines[3:]).strip() == body.strip(), f"{name}: run python code/compiler/llvm_opt.py"


def test_sroa_builds_ssa_with_phis_at_the_joins(st):
    for prog in ("sum_to", "abs_diff"):
        o0, ssa = fn(st, prog, "o0"), fn(st, prog, "sroa")
        assert "alloca" in o0 and "phi" not in o0
        assert not re.search(r"\b(alloca|load|store)\b", ssa)
    ssa = fn(st, "sum_to", "sroa")
    # the loop header for.cond is the dominance frontier of the block that redefines s and i: one phi per variable
    assert re.findall(r"%(\w+)\.0 = phi i32", L.block_text(ssa, "for.cond")) == ["s", "i"]
    assert re.search(r"%x\.0 = phi i32 \[ %sub, %if\.then \], \[ %sub1, %if\.else \]", fn(st, "abs_diff", "sroa"))


def test_sccp_finds_the_constant_that_instcombine_cannot(st):
    ic, sc = fn(st, "sccp_demo", "instcombine"), fn(st, "sccp_demo", "sccp")
    assert "%x.0 = phi i32 [ 1, %entry ], [ %x.1, %for.inc ]" in ic and "ret i32 %x.0" in ic
    assert "ret i32 1" in sc and "%x." not in sc  # optimistic: assume x = 1, the branch to x = 2 is never taken


def test_adce_removes_the_dead_cycle_that_dce_keeps(st):
    dce, adce = fn(st, "adce_demo", "dce"), fn(st, "adce_demo", "adce")
    assert "%d.0 = phi" in dce and "mul i32 %d.0, 3" in dce  # each value has a use (the other one): DCE keeps them
    assert "%d.0" not in adce and "mul" not in adce  # nothing live reaches them: ADCE removes the cycle
    assert "%s.0 = phi" in adce


def test_licm_hoists_what_aliasing_allows(st):
    for prog, load_hoisted in (("scale", False), ("scale_restrict", True)):
        before, after = fn(st, prog, "licm-before"), fn(st, prog, "licm-after")
        assert re.search(r"mul nsw i32 %k, %k", L.block_text(before, "for.body"))
        pre, body = L.block_text(after, "for.body.lr.ph"), L.block_text(after, "for.body")
        assert "mul nsw i32 %k, %k" in pre and "%k, %k" not in body  # invariant arithmetic: always hoisted
        assert ("load i32, ptr %b" in pre) is load_hoisted  # *b: only when a[i] cannot be *b (restrict = noalias)
        assert ("load i32, ptr %b" in body) is not load_hoisted


def test_indvars_replaces_the_sum_loop_by_its_closed_form(st):
    before, after, o2 = (fn(st, "sum_to", s) for s in ("indvars-before", "indvars-after", "o2"))
    assert "%s.05 = phi i32" in before and "i33" not in before
    assert "%s.05" not in after and "br i1 false, label %for.body" in after  # exit value computed, loop now dead
    for text in (after, o2):
        assert re.search(r"mul i33 %\d+, %\d+", text) and re.search(r"lshr i33 %\d+, 1", text)
    assert not has_loop(o2) and "phi i32 [ 0, %entry ]" in o2  # no loop left, only the n <= 0 join
    trace = (RECORDS / "llvm-indvars.txt").read_text()
    assert "; IndVarSimplifyPass on loop %for.body in function sum_to" in trace
    # the pass that deletes the loop leaves nothing to print, so -print-changed does not list it; -print-after does
    err = L._child(L.PROGRAMS["sum_to"], 2, ["-print-after=loop-deletion"], {})
    assert "LoopDeletionPass on loop %for.body in function sum_to (invalidated)" in err


def test_lsr_turns_multiplications_into_pointer_and_counter_increments(st):
    o2, lsr = fn(st, "strided", "o2"), fn(st, "strided", "lsr")
    body = L.block_text(o2, "for.body")
    assert "mul nsw i64 %i.05, %s" in body and "mul i32 %0, 3" in body
    body = L.block_text(lsr, "for.body")
    assert "mul" not in body
    assert re.search(r"%lsr\.iv\w* = phi ptr", body) and re.search(r"getelementptr i8, ptr %lsr\.iv\w*, i64 %0", body)
    assert re.search(r"add i32 %lsr\.iv\w*, 3", body)
    assert "shl i64 %s, 2" in L.block_text(lsr, "for.body.preheader")  # the byte stride s * 4, computed once


def test_vectorizer_output_and_its_runtime_checks(st):
    vec = fn(st, "saxpy", "vec-after")
    body = L.block_text(vec, "vector.body")
    assert "load <8 x float>" in body and "fmul <8 x float>" in body and "store <8 x float>" in body
    assert "vector.memcheck" not in vec and "scalar.ph" in vec  # restrict: no alias check; remainder loop kept
    alias = fn(st, "saxpy_alias", "vec-after")
    check = L.block_text(alias, "vector.memcheck")
    assert "%found.conflict = and i1 %bound0, %bound1" in check  # [y, y+n) and [x, x+n) must not overlap
    isum = fn(st, "isum", "vec-after")
    assert "phi <8 x i32>" in isum and "@llvm.vector.reduce.add.v8i32" in isum
    assert "x float>" not in fn(st, "fsum", "o3")  # strict FP: reordering the sum is not allowed
    fast = fn(st, "fsum_fast", "vec-after")
    assert "fadd fast <8 x float>" in fast and "@llvm.vector.reduce.fadd.v8f32" in fast
    ordered = L.block_text(fn(st, "fsum", "ordered-after"), "vector.body")
    assert "phi float" in ordered and re.search(r"call float @llvm\.vector\.reduce\.fadd\.v8f32\(float %vec\.phi", ordered)


def test_vector_width_comes_from_the_target():
    remarks = (RECORDS / "llvm-remarks.txt").read_text()
    assert "; haswell saxpy: vectorized loop (vectorization width: 8, interleaved count: 4)" in remarks
    assert "; x86-64 saxpy: vectorized loop (vectorization width: 4," in remarks  # SSE2: 128-bit registers
    assert "; skylake-avx512 saxpy: vectorized loop (vectorization width: 8," in remarks  # prefers 256-bit vectors
    assert "; haswell fsum: loop not vectorized: cannot prove it is safe to reorder floating-point operations" in remarks
    assert "; aarch64:neoverse-v1 fsum: vectorized loop (vectorization width: vscale x 4" in remarks  # ordered, SVE
    sse = L.function_text(L.run_pipeline(L.PROGRAMS["saxpy"], 3, tm=L.target_machine(cpu="x86-64")), "saxpy")
    assert "<4 x float>" in sse and "<8 x float>" not in sse


def test_removing_nsw_blocks_the_ub_based_transformations(st):
    assert fn(st, "twice_half", "instcombine").splitlines()[1:] == ["entry:", "  ret i32 %i", "}"]  # i * 2 / 2 -> i
    wrapv = fn(st, "twice_half_wrapv", "instcombine")
    assert "shl i32 %i, 1" in wrapv and "ashr exact i32 %mul, 1" in wrapv
    assert "icmp eq ptr" not in fn(st, "deref_check", "o2")  # *p executed first, so p != null afterwards
    assert "icmp eq ptr %p, null" in fn(st, "deref_check_kept", "o2")  # null_pointer_is_valid
    le, le_wrapv = fn(st, "sum_le", "o2"), fn(st, "sum_le_wrapv", "o2")
    assert not has_loop(le) and "mul i33" in le  # i <= n with nsw: n + 1 iterations, closed form
    assert has_loop(le_wrapv) and "i33" not in le_wrapv  # may loop forever at n = INT_MAX: no trip count
    assert "icmp eq i32 %n, 2147483647" in L.block_text(le_wrapv, "for.body.preheader")  # vectorised, guarded
    signed, unsigned = fn(st, "offset_copy", "vec-after"), fn(st, "offset_copy_u", "vec-after")
    assert "load <8 x float>" in signed and "vector.scevcheck" not in signed
    assert "load <8 x float>" in unsigned and "vector.scevcheck" in unsigned  # i + k may wrap: checked at run time


def test_every_ir_shown_executes_like_the_reference(st):
    rng = np.random.default_rng(0)
    calls = 0
    for (prog, stage), text in st.items():
        calls += L.check(prog, L.Jit(text, opt=0)(prog), rng, trials=15)
    assert calls > 800


@pytest.mark.parametrize("level", [2, 3])
def test_pipeline_results_equal_the_unoptimised_code(level):
    rng = np.random.default_rng(level)
    for prog, ir in L.PROGRAMS.items():
        o0 = L.Jit(ir, opt=0)(prog)
        opt = L.Jit(L.run_pipeline(ir, level, interleave=True), opt=2)(prog)
        L.check(prog, o0, rng, trials=15)
        L.check(prog, opt, rng, trials=15)


def test_where_behaviour_is_undefined_the_results_may_differ(st):
    o0 = L.Jit(L.PROGRAMS["twice_half"], opt=0)("twice_half")
    opt = L.Jit(st["twice_half", "instcombine"])("twice_half")
    xs = [int(v) for v in np.random.default_rng(1).integers(-2**31, 2**31, 2000)] + [2**30, -2**30 - 1, 2**31 - 1]
    differs = {x for x in xs if o0(x) != opt(x)}
    assert differs == {x for x in xs if not -2**30 <= x < 2**30}  # exactly the inputs where i * 2 overflows

    # sum_to with n > 65536 overflows s (UB), yet the closed form is exact modulo 2^32: i33 keeps the bit that
    # the division by 2 needs, so here the optimised code happens to agree with the wrapping loop
    o0, opt = L.Jit(L.PROGRAMS["sum_to"], opt=0)("sum_to"), L.Jit(st["sum_to", "o2"])("sum_to")
    for n in (65537, 100000, 1 << 20, 3_000_001):
        assert o0(n) == opt(n) == L.wrap32(n * (n - 1) // 2)

    # i <= INT_MAX never becomes false: the unoptimised loop never ends (not called); -O2 returns at once
    assert L.Jit(st["sum_le", "o2"])("sum_le")(2**31 - 1) == L.wrap32((2**31 - 1) * 2**31 // 2)

    # restrict promised that a and b do not overlap; break the promise and the hoisted *b is stale
    a0 = np.arange(1, 17, dtype=np.int32)
    outs = []
    for text in (L.PROGRAMS["scale_restrict"], st["scale_restrict", "licm-after"]):
        a = a0.copy()
        L.Jit(text)("scale_restrict")(L._ptr(a), L._ptr(a[3:]), len(a), 2)
        outs.append(a)
    assert outs[0][4] == 4 * 5 + outs[0][3] and outs[1][4] == 4 * 5 + 4  # a[3] rewritten at i = 3, then read
    assert not np.array_equal(outs[0], outs[1])

    # -ffast-math: reassociated sums round differently from the strict left-to-right sum
    strict = L.Jit(L.PROGRAMS["fsum"], opt=0)("fsum")
    fast = L.Jit(L.run_pipeline(L.PROGRAMS["fsum_fast"], 3, interleave=True), opt=2)("fsum_fast")
    x = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    assert strict(L._ptr(x), len(x)) != fast(L._ptr(x), len(x))
    assert abs(strict(L._ptr(x), len(x)) - fast(L._ptr(x), len(x))) < 1e-3
