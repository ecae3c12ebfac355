"""图级优化的小实现：Conv+BN 折叠，以及在 torch.fx 图上的公共子表达式消除、代数化简与死代码消除。

页面 docs/compiler/graph-optimization.md 嵌入这里的片段；测试 tests/test_compiler_graph_opt.py 对照 PyTorch 检查。
"""

import operator

import torch


# --8<-- [start:fold]
def fold_conv_bn(weight, bias, mean, var, gamma, beta, eps):
    """把推理模式的 BatchNorm 折进前面的卷积：返回新的 (weight, bias)。

    BN(y) = gamma * (y - mean) / sqrt(var + eps) + beta，y = W * x + b；逐输出通道 c：
    W'[c] = W[c] * s[c]，b'[c] = (b[c] - mean[c]) * s[c] + beta[c]，其中 s = gamma / sqrt(var + eps)。
    """
    scale = gamma / torch.sqrt(var + eps)
    if bias is None:
        bias = torch.zeros_like(mean)
    new_weight = weight * scale.reshape(-1, *([1] * (weight.dim() - 1)))
    new_bias = (bias - mean) * scale + beta
    return new_weight, new_bias
# --8<-- [end:fold]


# --8<-- [start:passes]
PURE = {operator.add, operator.mul, operator.sub, torch.add, torch.mul, torch.relu, torch.exp, torch.tanh, torch.sigmoid}


def cse(gm):
    """公共子表达式消除：两个纯函数节点的目标与参数相同，就让后者的使用者改用前者。"""
    seen, removed = {}, 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in PURE:
            continue
        key = (node.target, node.args, tuple(sorted(node.kwargs.items())))
        if key in seen:
            node.replace_all_uses_with(seen[key])
            gm.graph.erase_node(node)
            removed += 1
        else:
            seen[key] = node
    gm.recompile()
    return removed


def simplify(gm):
    """代数化简：x * 1 → x，x + 0 → x，x * 0 保留（x 可能是 inf 或 NaN，化成 0 会改变语义）。"""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or len(node.args) != 2:
            continue
        a, b = node.args
        identity = {operator.mul: 1, torch.mul: 1, operator.add: 0, torch.add: 0}.get(node.target)
        if identity is not None and isinstance(b, (int, float)) and b == identity and isinstance(a, torch.fx.Node):
            node.replace_all_uses_with(a)
            gm.graph.erase_node(node)
            rewritten += 1
    gm.recompile()
    return rewritten


def dce(gm):
    """死代码消除：删掉结果无人使用、也没有副作用的节点，返回删掉的个数。"""
    before = len(gm.graph.nodes)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return before - len(gm.graph.nodes)
# --8<-- [end:passes]


# --8<-- [start:traffic]
def unfused_bytes(k, n, elem_bytes, extra_inputs=0):
    """k 个逐元素算子各自成 kernel：每个读一个 n 元张量（外加 extra_inputs 个同样大的输入）、写一个。"""
    return k * (2 + extra_inputs) * n * elem_bytes


def fused_bytes(n, elem_bytes, n_inputs=1):
    """融合成一个 kernel：每个输入读一次，输出写一次。"""
    return (n_inputs + 1) * n * elem_bytes
# --8<-- [end:traffic]
