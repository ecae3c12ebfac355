"""AI 编译器正确性的两个工具：浮点重结合的误差界（判定“不同但正确”），和对图变换做差分模糊测试。

页面 docs/compiler/correctness.md 嵌入这里的片段；测试 tests/test_compiler_correctness.py 断言它们的行为。
"""

import operator

import numpy as np
import torch


# --8<-- [start:orders]
def sum_sequential(x):
    acc = np.float32(0)
    for v in x.astype(np.float32):
        acc = np.float32(acc + v)
    return acc


def sum_pairwise(x):
    x = x.astype(np.float32)
    while len(x) > 1:
        if len(x) % 2:
            x = np.append(x, np.float32(0))
        x = (x[0::2] + x[1::2]).astype(np.float32)  # 树形归约：GPU 上块内归约的顺序
    return x[0]


def sum_blocked(x, block=256):
    """先按块求部分和，再把部分和相加：融合或分块后常见的顺序。"""
    parts = [sum_sequential(x[i : i + block]) for i in range(0, len(x), block)]
    return sum_sequential(np.array(parts, dtype=np.float32))


def reassociation_bound(x, u=2.0**-24):
    """任意求和顺序下 float32 结果与精确和之差的上界：γ_{n-1} Σ|x_i|，γ_k = k u / (1 − k u)（Higham 定理 4.4）。"""
    n = len(x)
    gamma = (n - 1) * u / (1 - (n - 1) * u)
    return gamma * np.abs(x.astype(np.float64)).sum()
# --8<-- [end:orders]


# --8<-- [start:fuzz]
def simplify_unsafe(gm):
    """一个有缺陷的代数化简：把 x * 0 改写成 0。对有限的 x 成立，对 inf 与 NaN 不成立。"""
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in (operator.mul, torch.mul) and node.args[1] == 0:
            with gm.graph.inserting_before(node):
                zero = gm.graph.call_function(torch.zeros_like, (node.args[0],))
            node.replace_all_uses_with(zero)
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, -3.4e38], dtype=np.float32)


def fuzz(fn, transform, trials=200, seed=0):
    """差分测试：随机形状、随机混入特殊值的输入，比较原函数与变换后的图（NaN 视为相等）。返回第一个反例或 None。"""
    rng = np.random.default_rng(seed)
    gm = transform(torch.fx.symbolic_trace(fn))
    for _ in range(trials):
        shape = tuple(rng.integers(1, 5, size=rng.integers(1, 3)))
        x = rng.standard_normal(shape).astype(np.float32)
        mask = rng.random(shape) < 0.2
        x[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
        t = torch.from_numpy(x)
        ref, out = fn(t), gm(t)
        if not torch.equal(torch.nan_to_num(ref, nan=123.0), torch.nan_to_num(out, nan=123.0)):
            return x
    return None
# --8<-- [end:fuzz]
