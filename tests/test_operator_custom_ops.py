"""Custom operators of docs/operator/custom-ops.md (code/operator/custom_ops.py, custom-op-ext.cpp/.cu).

Every op equals torch.softmax (outputs and gradients); torch.library.opcheck passes for every correctly
registered op; a model around an op with a fake kernel compiles to one graph with no break; the op without a
fake kernel fails under torch.compile (also without fullgraph) and in opcheck, and without an autograd formula
fails in backward(); the undeclared mutation is caught by opcheck's test_schema only; the in-place op is
functionalized to auto_functionalized_v2 and gives, compiled, exactly what the out-of-place op gives. The C++
extension is built once (a temporary build directory) with the machine's g++ and ninja and checked the same
way. The page's graph counts and error texts are the ones asserted here. Triton kernels run in the CPU
interpreter (conftest sets TRITON_INTERPRET=1), where triton_op can be checked only by the two opcheck tests
that do not trace (the page explains why); on a GPU the full check runs.
"""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from conftest import ROOT, load_listing

C = load_listing(ROOT / "code" / "operator" / "custom_ops.py", "custom_ops")
CPP = ROOT / "code" / "operator" / "custom-op-ext.cpp"
PAGE = ROOT / "docs" / "operator" / "custom-ops.md"
RECORD = ROOT / "data" / "records" / "cpu-amd-epyc-2c" / "custom-op-build.json"
ALL_TESTS = {"test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"}


@pytest.fixture(scope="module")
def ext():
    from torch.utils.cpp_extension import is_ninja_available

    if shutil.which("g++") is None or not is_ninja_available():
        pytest.skip("g++ or ninja is missing: the C++ extension was not built")
    C.build_extension(CPP)
    return torch.ops.handbook_ext


def _ops(ext=None):
    ops = {"triton_op": C.triton_softmax, "opaque": C.opaque_softmax, "numpy": C.numpy_softmax}
    if ext is not None:
        ops["cpp"] = ext.softmax
    return ops


def _check_matches_torch(op, shape):
    gen = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=gen) * 3).requires_grad_()
    dy = torch.randn(shape, generator=gen)
    y = op(x)
    (dx,) = torch.autograd.grad(y, x, dy)
    x64 = x.detach().double().requires_grad_()
    y64 = torch.softmax(x64, dim=-1)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    torch.testing.assert_close(y.double(), y64, rtol=1e-5, atol=1e-10)
    torch.testing.assert_close(dx.double(), dx64, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["triton_op", "opaque", "numpy"])
@pytest.mark.parametrize("shape", [(4, 1), (5, 37), (3, 1500), (2, 3, 17)])
def test_python_ops_equal_torch_softmax(name, shape):
    _check_matches_torch(_ops()[name], shape)


@pytest.mark.parametrize("shape", [(4, 1), (5, 37), (3, 1500), (2, 3, 17)])
def test_cpp_op_equals_torch_softmax(ext, shape):
    _check_matches_torch(ext.softmax, shape)


def test_fully_masked_row_convention(ext):
    # The page: a row of -inf gives 0 from the C++ kernel (1/d taken as 0, like online-softmax.cu) and NaN from
    # the Triton kernel and torch.softmax; partly masked rows agree everywhere.
    ninf = float("-inf")
    x = torch.tensor([[ninf, ninf, ninf], [0.0, ninf, 1.0]])
    ref = torch.softmax(x, -1)
    assert torch.equal(ext.softmax(x)[0], torch.zeros(3)) and ref[0].isnan().all()
    assert C.opaque_softmax(x)[0].isnan().all()
    for y in (ext.softmax(x), C.opaque_softmax(x)):
        torch.testing.assert_close(y[1], ref[1], rtol=1e-6, atol=0)


def test_backward_formula_is_the_softmax_gradient():
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(C.numpy_softmax, (x,))
    y = torch.softmax(x, -1).detach()
    dy = torch.randn(3, 7, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), x.detach())  # (3, 7, 3, 7)
    torch.testing.assert_close(C.softmax_backward(y, dy), torch.einsum("ij,ijkl->kl", dy, jac))


@pytest.mark.parametrize("name", ["opaque", "numpy"])
def test_opcheck_passes_for_python_ops(name):
    op = _ops()[name]
    for x in (torch.randn(6, 300, requires_grad=True), torch.randn(40, 7).t(), torch.randn(2, 3, 5), torch.randn(0, 5)):
        assert set(torch.library.opcheck(op, (x,))) == ALL_TESTS


def test_opcheck_triton_op():
    x = torch.randn(6, 300, requires_grad=True)
    if C.triton_op_traceable():
        assert set(torch.library.opcheck(C.triton_softmax, (x,))) == ALL_TESTS
    else:  # TRITON_INTERPRET=1: wrap_triton hands back the interpreted kernel, nothing to trace
        assert torch.library.wrap_triton(C.softmax_online_kernel) is C.softmax_online_kernel
        result = torch.library.opcheck(C.triton_softmax, (x,), test_utils=("test_schema", "test_autograd_registration"))
        assert result == {"test_schema": "SUCCESS", "test_autograd_registration": "SUCCESS"}


def test_opcheck_passes_for_cpp_ops(ext):
    for x in (torch.randn(6, 300, requires_grad=True), torch.randn(40, 7).t(), torch.randn(2, 3, 5), torch.randn(0, 5),
              torch.tensor(3.0)):
        assert set(torch.library.opcheck(ext.softmax.default, (x,))) == ALL_TESTS
    assert set(torch.library.opcheck(ext.softmax_.default, (torch.randn(6, 300),))) == ALL_TESTS
    assert str(ext.softmax_.default._schema) == "handbook_ext::softmax_(Tensor(a!) x) -> ()"
    assert {"CPU", "Meta", "Autograd[alias]"} <= set(C.dispatch_keys("handbook_ext::softmax"))
    with pytest.raises(RuntimeError, match="expected float32, got Double"):
        ext.softmax(torch.randn(3, 4, dtype=torch.float64))


def test_opcheck_passes_for_inplace_and_dynamic_ops():
    assert set(torch.library.opcheck(C.softmax_, (torch.randn(6, 300),))) == ALL_TESTS
    x = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]])
    assert set(torch.library.opcheck(C.numpy_nonzero, (x,))) == ALL_TESTS
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        fake = C.numpy_nonzero(mode.from_tensor(x))
    assert str(fake.shape[0]).startswith("u") and fake.shape[1] == 2  # an unbacked SymInt rows dimension


def _explain(fn, x):
    torch._dynamo.reset()
    e = torch._dynamo.explain(fn)(x)
    return e.graph_count, e.graph_break_count, sorted({str(b.reason).splitlines()[0] for b in e.break_reasons})


def test_numpy_inline_breaks_the_graph_and_the_op_does_not(ext):
    x = torch.randn(4, 30)
    assert _explain(C.model_numpy_ufuncs, x) == (1, 0, [])  # Dynamo translates NumPy ufuncs into torch ops
    assert _explain(C.model_numpy_inline, x) == (3, 2, ["attempted to trace numpy function unsupported by PyTorch"])
    for op in (C.numpy_softmax, C.opaque_softmax, ext.softmax):
        assert _explain(C.model_with(op), x) == (1, 0, [])
        torch._dynamo.reset()
        y = torch.compile(C.model_with(op), fullgraph=True, backend="aot_eager")(x)
        torch.testing.assert_close(y, C.reference(x), rtol=1e-5, atol=1e-6)


def test_inductor_calls_the_opaque_op_and_checks_its_strides():
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(8, 500)
    torch._dynamo.reset()
    out, codes = run_and_get_code(torch.compile(C.model_with(C.opaque_softmax), fullgraph=True), x)
    torch.testing.assert_close(out, C.reference(x), rtol=1e-5, atol=1e-6)
    code = "\n".join(codes)
    assert "torch.ops.handbook.opaque_softmax.default(" in code
    assert "assert_size_stride(" in code and "(8, 500), (500, 1), 'torch.ops.handbook.opaque_softmax.default'" in code


def test_compiled_gradients_equal_torch():
    x = torch.randn(5, 40, requires_grad=True)
    torch._dynamo.reset()
    f = torch.compile(lambda t: C.model_with(C.opaque_softmax)(t).pow(2).sum(), fullgraph=True, backend="aot_eager")
    (g,) = torch.autograd.grad(f(x), x)
    (g_ref,) = torch.autograd.grad(C.reference(x).pow(2).sum(), x)
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-6)


def test_missing_fake_kernel_raises():
    x = torch.randn(4, 30)
    for fullgraph in (True, False):
        torch._dynamo.reset()
        with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as info:
            torch.compile(C.model_with(C.numpy_softmax_nofake), fullgraph=fullgraph)(x)
        assert C.first_line(info.value) == "RuntimeError when making fake tensor call"
        assert "There was no fake impl registered for <CustomOpDef(handbook::numpy_softmax_nofake)>" in str(info.value)
    result = torch.library.opcheck(C.numpy_softmax_nofake, (x,), raise_exception=False)
    assert result["test_schema"] == "SUCCESS"
    assert "no fake impl registered" in str(result["test_faketensor"])


def test_missing_autograd_raises():
    x = torch.randn(4, 30, requires_grad=True)
    y = C.numpy_softmax_nofake(x)  # the forward runs
    with pytest.raises(RuntimeError, match="no autograd formula was registered. Please use register_autograd"):
        y.sum().backward()


def test_undeclared_mutation_fails_only_test_schema():
    result = torch.library.opcheck(C.softmax_undeclared_, (torch.randn(6, 300),), raise_exception=False)
    assert "Argument x is not defined as mutable but was mutated" in str(result["test_schema"])
    assert all(result[t] == "SUCCESS" for t in ALL_TESTS - {"test_schema"})
    # the page's opcheck table: test_schema does not flag the converse (declared as mutated, never written)
    assert str(C.softmax_._opoverload._schema) == "handbook::softmax_(Tensor(a0!) x) -> ()"
    lib = torch.library.Library("handbook_test", "FRAGMENT")
    lib.define("never_writes(Tensor(a!) x) -> ()")
    lib.impl("never_writes", lambda x: None, "CompositeExplicitAutograd")
    assert torch.library.opcheck(torch.ops.handbook_test.never_writes.default, (torch.randn(3),),
                                 test_utils="test_schema") == {"test_schema": "SUCCESS"}


def test_inplace_op_is_functionalized_and_equals_out_of_place(ext):
    x = torch.randn(6, 300)
    graph = C.functional_graph(C.model_inplace, x)
    assert "torch.ops.higher_order.auto_functionalized_v2(torch.ops.handbook.softmax_.default" in graph
    torch._dynamo.reset()
    inplace = torch.compile(C.model_inplace, fullgraph=True, backend="aot_eager")(x)
    torch._dynamo.reset()
    outofplace = torch.compile(C.model_with(C.opaque_softmax), fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(inplace, outofplace)
    for op in (C.softmax_, ext.softmax_):
        h = x.clone()
        op(h)
        torch.testing.assert_close(h, torch.softmax(x, -1), rtol=1e-5, atol=1e-10)

    def normalize_input(t):
        C.softmax_(t)
        return t.sum(-1)

    xi = x.clone()
    torch._dynamo.reset()
    torch.compile(normalize_input, fullgraph=True, backend="aot_eager")(xi)
    torch.testing.assert_close(xi, torch.softmax(x, -1), rtol=1e-5, atol=1e-10)  # written back to the caller's tensor


def test_build_record_and_page():
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    rows = {r["variant"]: r for r in record["results"]["rows"]}
    assert set(rows) == set(C.INCLUDE_VARIANTS)
    assert all(len(r["seconds"]) == record["results"]["repeats"] and r["min_s"] == min(r["seconds"]) for r in rows.values())
    # torch/extension.h parses far more than the three headers the listing includes
    assert rows["minimal"]["min_s"] < rows["aten"]["min_s"] < rows["extension"]["min_s"]
    assert record["provenance"]["command"] == "python code/operator/custom_ops.py measure"
    # the variant sources differ only in the include block, and the minimal one is the file itself
    assert C.variant_source("minimal") == CPP.read_text(encoding="utf-8")
    assert "#include <torch/extension.h>" in C.variant_source("extension")
    page = PAGE.read_text(encoding="utf-8")
    for fact in ("3 张图、2 次图中断", "1 张图、0 次图中断", "attempted to trace numpy function unsupported by PyTorch",
                 "Argument x is not defined as mutable but was mutated", "['CPU', 'Meta', 'Autograd[alias]']",
                 "There was no fake impl registered for <CustomOpDef(handbook::numpy_softmax_nofake)>"):
        assert fact in page, fact
