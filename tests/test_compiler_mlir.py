"""code/compiler/mlir_demo.py: MLIR used through jaxlib's Python bindings. The committed records are what the
installed jaxlib prints; each stage has the dialects the page says it has; every stage, executed by XLA, by the
StableHLO reference interpreter or by the small linalg interpreter, computes what NumPy computes; the Toy-style
progression (inline, shape inference, partial and full dialect conversion) behaves as the page describes."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import ROOT

pytest.importorskip("jaxlib.mlir")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import mlir_demo as M  # noqa: E402

RECORDS = ROOT / "code" / "compiler" / "records"


@pytest.fixture(scope="module")
def st():
    return M.tensor_stages()


@pytest.fixture(scope="module")
def toy():
    return M.toy_stages()


def body(name):
    return "\n".join((RECORDS / name).read_text().splitlines()[3:])


def test_records_are_what_this_jaxlib_prints():
    import jaxlib

    bodies = M.record_bodies()
    assert set(bodies) == set(M.RECORDS) | {"mlir-generic.txt", "mlir-errors.txt"}
    for name, text in bodies.items():
        head = (RECORDS / name).read_text().splitlines()[:3]
        assert head[0].startswith(f"# tool: jaxlib {jaxlib.__version__} "), name
        assert head[1].startswith("# machine: ") and head[2].startswith("# produced: "), name
        assert body(name).strip() == text.strip(), f"{name} differs: rerun python code/compiler/mlir_demo.py"


def test_each_stage_has_the_dialects_the_page_names(st):
    assert M.dialects(st["built"]) == {"func", "stablehlo", "chlo"}
    assert "func.call" in M.op_names(st["built"])
    # the inline pass of this jaxlib leaves func.call alone (no inliner interface for func is registered)
    assert "func.call" in M.op_names(M.run_pipeline(st["built"], "inline"))
    inlined = M.op_names(st["inlined"])
    assert "func.call" not in inlined and str(st["inlined"]).count("func.func") == 1  # @scale_shift is gone
    # CSE merged the two inlined copies: one x * 2 and one broadcast_add left
    assert str(st["inlined"]).count("chlo.broadcast_add") == 1
    assert str(st["peephole"]).count("stablehlo.multiply") == 1  # only u * u is left
    assert "stablehlo.add %arg0, %arg0" in str(st["peephole"])
    assert M.dialects(st["stablehlo"]) == {"func", "stablehlo"}
    assert "stablehlo.broadcast_in_dim" in M.op_names(st["stablehlo"])
    assert M.dialects(st["linalg"]) == {"func", "arith", "math", "tensor", "linalg"}
    text = str(st["linalg"])
    assert text.count("linalg.generic") == 6 and '"reduction"' in text


def test_printed_ir_parses_back_to_the_same_text(st, toy):
    for module in [*st.values(), *toy.values()]:
        assert str(M.clone(module)) == str(module)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_stage_computes_what_numpy_computes(st, seed):
    x, b = M.example_inputs(seed)
    want = M.reference(x.astype(np.float64), b.astype(np.float64))
    for name in ["built", "inlined", "peephole", "stablehlo"]:  # XLA takes chlo and func.call too
        np.testing.assert_allclose(M.run_xla(st[name], x, b)[0], want, rtol=1e-5, atol=1e-5, err_msg=name)
    # the StableHLO reference interpreter implements the spec, i.e. stablehlo ops only (chlo aborts it)
    np.testing.assert_allclose(M.run_reference_interpreter(st["stablehlo"], x, b)[0], want, rtol=1e-5, atol=1e-5)
    got = M.interpret_linalg(st["linalg"], x, b)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_hand_written_x_times_one_matches_what_canonicalize_does_after_lowering(st):
    # without the peephole, * 1 survives at the StableHLO level (canonicalize has no such rule for it here) ...
    assert "dense<1.000000e+00>" in str(st["inlined"])
    plain = M.run_pipeline(M.run_pipeline(st["inlined"], "func.func(chlo-legalize-to-stablehlo),canonicalize,cse"),
                           "stablehlo-legalize-to-linalg,canonicalize,cse")
    # ... and disappears after lowering: arith folds x * 1.0 and linalg drops the identity generic left behind
    assert "1.000000e+00" not in str(plain)
    assert str(plain).count("linalg.generic") == str(st["linalg"]).count("linalg.generic")
    # x * 2 stays a multiply there; the peephole made it x + x, which is exact in floating point
    assert "2.000000e+00" in str(plain) and "2.000000e+00" not in str(st["linalg"])
    x, b = M.example_inputs(3)
    np.testing.assert_array_equal(M.interpret_linalg(plain, x, b)[0], M.interpret_linalg(st["linalg"], x, b)[0])


def test_stablehlo_round_trips_through_a_versioned_portable_artifact(st):
    assert M.dialects(st["vhlo"]) == {"vhlo"} and "vhlo.tanh_v2" in M.op_names(st["vhlo"])
    for version in ["1.0.0", M.stablehlo.get_current_version()]:
        size, back = M.portable_roundtrip(st["stablehlo"], version)
        assert size > 0 and str(back) == str(st["stablehlo"])
    # CHLO is outside the compatibility contract: the StableHLO -> VHLO type conversion cannot finish
    assert "unresolved materialization" in M.portable_error(st["built"])


def test_toy_progression(toy):
    assert "tensor<*xf64>" in str(toy["toy"]) and "func.call" in M.op_names(toy["toy"])
    assert "func.call" not in M.op_names(toy["toy-inlined"]) and "toy.cast" in M.op_names(toy["toy-inlined"])
    shapes = str(toy["toy-shapes"])
    assert "tensor<*xf64>" not in shapes and "toy.cast" not in shapes
    assert {n for n in M.op_names(toy["toy-partial"]) if n.startswith("toy.")} == {"toy.print"}
    assert M.dialects(toy["toy-full"]) == {"func", "stablehlo"}
    assert "failed to legalize operation 'toy.print'" in M.full_conversion_error(toy["toy-shapes"])
    rng = np.random.default_rng(0)
    for _ in range(3):
        a, b = rng.standard_normal((2, 2, 3))
        got = M.run_reference_interpreter(toy["toy-full"], a, b)[0]
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, M.toy_reference(a, b), rtol=1e-12)


def test_what_this_jaxlib_lacks_is_what_the_page_says_it_lacks(st):
    from jaxlib.mlir import passmanager

    ctx = M.make_context()
    assert not _loaded(ctx, "linalg") and _loaded(st["linalg"].context, "linalg")  # a pass loads what it depends on
    assert not _loaded(ctx, "transform")
    with ctx:
        for name in ["one-shot-bufferize", "convert-linalg-to-loops", "linalg-fuse-elementwise-ops", "transform-interpreter"]:
            with pytest.raises(Exception, match="does not refer to a registered pass"):
                passmanager.PassManager.parse(f"builtin.module({name})")


def test_the_reference_interpreter_implements_stablehlo_only(tmp_path):
    # it aborts the process on a chlo op, so ask it in a child process
    import subprocess

    code = ("import sys; sys.path.insert(0, sys.argv[1]); import mlir_demo as M; st = M.tensor_stages(); "
            "M.run_reference_interpreter(st['built'], *M.example_inputs())")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "code" / "compiler")], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0 and "Unsupported op" in done.stderr and "chlo.broadcast_add" in done.stderr


def _loaded(ctx, name):
    try:
        ctx.dialects[name]
        return True
    except IndexError:
        return False


def test_the_verifier_rejects_mismatched_shapes():
    _, err = M.verifier_error()
    assert "'stablehlo.add' op requires the same shape for all operands and results" in err
