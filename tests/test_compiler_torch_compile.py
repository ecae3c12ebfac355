"""code/compiler/torch_compile_demo.py: Dynamo's graph breaks and recompilations, AOTAutograd's graphs, Inductor's fused
kernel, all against eager; and the committed IR records (code/compiler/records/) against the installed torch."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import torch_compile_demo as demo  # noqa: E402

RECORDS = ROOT / "code" / "compiler" / "records"


def body(name):
    return "\n".join(l for l in (RECORDS / name).read_text().splitlines() if not l.startswith("# tool:") and not l.startswith("# machine:") and not l.startswith("# produced:"))


def inputs(rows=64, cols=128, grad=False):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(rows, cols, generator=g, requires_grad=grad), torch.randn(cols, generator=g, requires_grad=grad), torch.randn(cols, generator=g))


def test_graph_break_and_its_fix():
    x, s, t = inputs()
    assert demo.explain_summary(demo.with_graph_break, x, s, t)["graphs"] == 2
    fixed = demo.explain_summary(demo.without_graph_break, x, s, t)
    assert fixed["graphs"] == 1 and fixed["breaks"] == 0
    torch.testing.assert_close(demo.with_graph_break(x, s, t), demo.without_graph_break(x, s, t), rtol=0, atol=0)


def test_automatic_dynamic_shapes_compile_twice():
    assert demo.count_compilations(demo.gelu_softmax, [4, 8, 12, 16]) == 2
    assert demo.count_compilations(demo.gelu_softmax, [4, 8, 12, 16], dynamic=False) == 4


def test_aot_graphs_match_eager_and_the_record():
    x, s, t = inputs(8, 16, grad=True)
    out, graphs = demo.aot_graphs(demo.gelu_softmax, x, s, t)
    grads = (x.grad.clone(), s.grad.clone())
    x.grad = s.grad = None
    ref = demo.gelu_softmax(x, s, t)
    ref.sum().backward()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(grads, (x.grad, s.grad), rtol=0, atol=0)
    recorded = body("aot-graphs.txt")
    assert graphs["forward"] in recorded and graphs["backward"] in recorded
    _, dec = demo.aot_graphs(demo.gelu_softmax, x.detach().requires_grad_(), s.detach().requires_grad_(), t, decompose=True)
    assert dec["forward"] in body("aot-graphs-decomposed.txt")
    assert "aten.erf" in dec["forward"] and "aten.gelu" not in dec["forward"]


def test_records_name_the_installed_torch():
    for name in ["aot-graphs.txt", "aot-graphs-decomposed.txt", "inductor-cpp-kernel.txt", "inductor-call.txt"]:
        first = (RECORDS / name).read_text().splitlines()[0]
        assert first.startswith(f"# tool: torch {torch.__version__}"), (name, first)


def test_inductor_fuses_into_one_cpp_kernel():
    x, s, t = inputs()
    out, codes = demo.inductor_code(demo.gelu_softmax, x, s, t)
    torch.testing.assert_close(out, demo.gelu_softmax(x, s, t), rtol=1e-5, atol=1e-6)
    kernels = {l.split(" = ")[0] for l in codes[0].splitlines() if l.startswith("cpp_fused")}
    assert kernels == {"cpp_fused__softmax_add_gelu_mul_0"}
    assert "cpp_fused__softmax_add_gelu_mul_0(arg0_1, arg1_1, arg2_1, buf0, buf2, buf3)" in body("inductor-call.txt")
    assert "#pragma omp for" in body("inductor-cpp-kernel.txt")


def test_record_header_names_tool_machine_and_command():
    import record_ir

    lines = record_ir._header("torch 0.0", "python code/compiler/record_ir.py torch")
    assert lines[0] == "# tool: torch 0.0" and lines[1].startswith("# machine: ") and lines[2].startswith("# produced: ")
    assert lines[2].endswith("by `python code/compiler/record_ir.py torch`")
    for record in RECORDS.glob("*.txt"):
        head = record.read_text().splitlines()[:3]
        assert [h.split(":")[0] for h in head] == ["# tool", "# machine", "# produced"], record.name


def test_op_counts_quoted_on_the_page():
    """torch-compile.md quotes how many ATen ops torch 2.13 registers and how many carry the `core` tag."""
    overloads = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")]
    assert 1500 <= len({n.split(".")[0] for n in overloads}) <= 1700 and 3000 <= len(overloads) < 4000
    core = set()
    for full in overloads:  # every registered overload, so the count does not depend on which packets were loaded
        base, _, overload = full[len("aten::") :].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, base), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in op.tags:
            core.add((base, overload or "default"))
    if torch.__version__.startswith("2.13"):
        assert len({n for n, _ in core}) == 164 and len(core) == 193
