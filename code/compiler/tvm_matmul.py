"""用 TVM（0.27 的 s_tir 调度 API）一步步调度矩阵乘，并做一个小的进化搜索。

页面 docs/compiler/tvm.md 嵌入这里的片段；实验 notebooks/compiler/tvm-lab.ipynb 与测试
tests/test_compiler_tvm.py 断言每一步的结果等于 NumPy。
"""

import random
import time

import numpy as np
import tvm
from tvm import te


# --8<-- [start:define]
def matmul_module(m, n, k):
    """C[i, j] = sum_k A[i, k] * B[k, j]：只写“算什么”，得到一个 TensorIR 的 IRModule。"""
    a = te.placeholder((m, k), name="A", dtype="float32")
    b = te.placeholder((k, n), name="B", dtype="float32")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})
# --8<-- [end:define]


# --8<-- [start:steps]
def schedule_steps(mod, ti=32, tj=32, tk=4):
    """依次施加调度原语，返回 [(步骤名, IRModule)]；每一步都在上一步的基础上改变循环结构。"""
    sch = tvm.s_tir.Schedule(mod)
    steps = [("naive", sch.mod)]
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, ti])
    j0, j1 = sch.split(j, [None, tj])
    sch.reorder(i0, j0, i1, j1)  # 分块：ti x tj 的输出块
    steps.append(("tile", sch.mod))
    k0, k1 = sch.split(k, [None, tk])
    sch.reorder(i0, j0, k0, i1, k1, j1)  # 把 k 提到块内循环之外，j1 放到最内层：B 与 C 都按行连续访问
    steps.append(("reorder", sch.mod))
    sch.vectorize(j1)  # 最内层连续的 j1 变成 SIMD 向量指令
    steps.append(("vectorize", sch.mod))
    sch.parallel(i0)  # 最外层的行块分给多个线程
    steps.append(("parallel", sch.mod))
    return steps
# --8<-- [end:steps]


def build(mod):
    return tvm.compile(mod, target=tvm.target.Target("llvm"))


def run(lib, a, b, repeat=3):
    """运行编译好的函数，返回 (结果, 中位数秒数)。"""
    dev = tvm.cpu()
    ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
    tc = tvm.runtime.tensor(np.zeros((a.shape[0], b.shape[1]), "float32"), dev)
    lib(ta, tb, tc)  # 预热
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        lib(ta, tb, tc)
        times.append(time.perf_counter() - t0)
    return tc.numpy(), sorted(times)[len(times) // 2]


# --8<-- [start:space]
def sampled_schedule(mod, seed):
    """MetaSchedule 式的搜索空间：分块因子不写死，而是用 sample_perfect_tile 从完美分解里随机采样。"""
    sch = tvm.s_tir.Schedule(mod, seed=seed)
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=64))
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=64))
    k0, k1 = sch.split(k, sch.sample_perfect_tile(k, n=2, max_innermost_factor=16))
    sch.reorder(i0, j0, k0, i1, k1, j1)
    sch.vectorize(j1)
    sch.parallel(i0)
    return sch


def decisions(sch):
    """从调度轨迹里读出每个采样指令的决定（内层分块因子）。"""
    trace = sch.trace
    return tuple(int(trace.decisions[inst][-1]) for inst in trace.insts if inst.kind.name == "SamplePerfectTile")
# --8<-- [end:space]


# --8<-- [start:search]
def divisors(n, cap):
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def evolutionary_search(mod, shape, measure, trials=12, population=4, seed=1):
    """极简的进化搜索：随机初始种群 → 实测 → 保留最好的一半 → 变异（换一个分块因子）→ 再实测。

    真实的 MetaSchedule 在“变异 → 实测”之间还有一个代价模型（XGBoost）从上千个候选里挑出少数去测；
    这里候选少，直接全测。measure(ti, tj, tk) 返回秒数。
    """
    rng = random.Random(seed)
    m, n, k = shape
    caps = [divisors(m, 64), divisors(n, 64), divisors(k, 16)]
    seen = {}
    pop = [decisions(sampled_schedule(mod, seed=s)) for s in range(seed, seed + population)]
    while len(seen) < trials:
        for cand in pop:
            if cand not in seen and len(seen) < trials:
                seen[cand] = measure(*cand)
        ranked = sorted(seen, key=seen.get)
        parents = ranked[: max(1, population // 2)]
        pop = []
        for p in parents:
            for _ in range(2):
                child = list(p)
                axis = rng.randrange(3)
                child[axis] = rng.choice(caps[axis])  # 变异：重采样一个维度的分块因子
                pop.append(tuple(child))
        if all(c in seen for c in pop):  # 空间已探索完
            break
    best = min(seen, key=seen.get)
    return best, seen
# --8<-- [end:search]


def fixed_schedule(mod, ti, tj, tk):
    """与 sampled_schedule 结构相同、分块因子给定的调度。"""
    return schedule_steps(mod, ti, tj, tk)[-1][1]


# --8<-- [start:relax]
def relax_flow(model, example):
    """部署流程的图级部分：torch.export → Relax → 合法化为 TensorIR → 按算子模式融合 → 编译 → 在 VM 上运行。

    返回 (各阶段的 TVMScript, TVM 的输出)。
    """
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    import warnings

    stages = {}
    with warnings.catch_warnings():
        # torch 2.13 复制导出图时触发自己的 LeafSpec 弃用警告（FutureWarning），与本流程无关。
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*", category=FutureWarning)
        mod = from_exported_program(torch.export.export(model, (example,)))
    stages["imported"] = mod.script()
    mod = relax.transform.LegalizeOps()(mod)  # 每个高层算子换成一个 TensorIR 函数
    mod = relax.transform.AnnotateTIROpPattern()(mod)  # 标注单射、归约、输出可融合等模式
    mod = relax.transform.FuseOps()(mod)  # 按模式把相邻算子分组
    mod = relax.transform.FuseTIR()(mod)  # 每组合成一个 TensorIR 函数
    stages["fused"] = mod.script()
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target("llvm")), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(example.numpy()))
    return stages, out[0].numpy()
# --8<-- [end:relax]
