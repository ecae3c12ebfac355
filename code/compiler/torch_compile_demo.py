"""torch.compile 各阶段的小例子：Dynamo 的图中断与守卫、AOTAutograd 之后的 FX 图、Inductor 生成的代码。

页面 docs/compiler/torch-compile.md 嵌入这里的片段；实验 notebooks/compiler/torch-compile-lab.ipynb
与测试 tests/test_compiler_torch_compile.py 调用这些函数。
"""

import torch
import torch.nn.functional as F


# --8<-- [start:functions]
def gelu_softmax(x, s, t):
    """三个逐元素算子接一个 softmax：Inductor 会把它们融合成一个 kernel。"""
    return F.gelu(x * s + t).softmax(dim=-1)


def with_graph_break(x, s, t):
    """依据张量的值做 Python 分支：Dynamo 无法把它放进一张图，于是图中断。"""
    y = F.gelu(x * s + t)
    if y.sum() > 0:  # 需要知道 y.sum() 的具体值，Dynamo 在这里中断
        y = y * 2
    return y.softmax(dim=-1)


def without_graph_break(x, s, t):
    """同样的语义改写成张量运算：torch.where 让整个函数留在一张图里。"""
    y = F.gelu(x * s + t)
    y = torch.where(y.sum() > 0, y * 2, y)
    return y.softmax(dim=-1)
# --8<-- [end:functions]


# --8<-- [start:explain]
def explain_summary(fn, *args):
    """用 torch._dynamo.explain 统计图的个数、图中断与原因。"""
    import torch._dynamo as dynamo

    dynamo.reset()
    e = dynamo.explain(fn)(*args)
    reasons = [b.reason for b in e.break_reasons]
    return {"graphs": e.graph_count, "breaks": e.graph_break_count, "ops": e.op_count, "reasons": reasons}
# --8<-- [end:explain]


# --8<-- [start:aot]
def aot_graphs(fn, *args, decompose=False):
    """用 AOTAutograd 编译 fn，返回它交给后端的前向图与反向图（FX 代码文本）。

    后端只是把图记下来再原样执行，所以结果与 eager 相同；decompose=True 时先用 Inductor 的分解表把 gelu、softmax 拆成基本运算。
    """
    import torch._dynamo as dynamo
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func

    dynamo.reset()
    graphs = {}

    def keep(name):
        def compiler(gm, example_inputs):
            graphs[name] = gm.code.strip()
            return make_boxed_func(gm.forward)

        return compiler

    from torch._inductor.decomposition import select_decomp_table

    decompositions = select_decomp_table() if decompose else {}
    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"), decompositions=decompositions)
    compiled = torch.compile(fn, backend=backend)
    out = compiled(*args)
    out.sum().backward()
    return out, graphs
# --8<-- [end:aot]


# --8<-- [start:recompile]
def count_compilations(fn, shapes, dynamic=None):
    """对一串输入形状依次调用编译后的 fn，返回 Dynamo 编译了几次（用 eager 后端，只数不生成代码）。"""
    import torch._dynamo as dynamo
    from torch._dynamo.testing import CompileCounter

    dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(fn, backend=counter, dynamic=dynamic)
    for n in shapes:
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled(x, torch.ones(16), torch.zeros(16)), fn(x, torch.ones(16), torch.zeros(16)))
    return counter.frame_count
# --8<-- [end:recompile]


def inductor_code(fn, *args):
    """用 Inductor 编译 fn，返回结果与生成的源代码（CPU 上是内嵌 C++ 的 Python 模块）。"""
    import torch._dynamo as dynamo
    from torch._inductor.utils import run_and_get_code

    dynamo.reset()
    out, codes = run_and_get_code(torch.compile(fn), *args)
    return out, codes
