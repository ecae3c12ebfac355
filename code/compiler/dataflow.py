"""一个很小的中间表示与数据流分析：工作表算法、活跃变量、到达定值、常量传播，以及按活跃区间做张量内存规划。

页面 docs/compiler/dataflow-analysis.md 嵌入这里的片段；实验 notebooks/compiler/dataflow-lab.ipynb
与测试 tests/test_compiler_dataflow.py 用手算的例子检查它们。
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


# --8<-- [start:ir]
@dataclass(frozen=True)
class Instr:
    """三地址指令：dst = op(args)。args 里的 int 是常量，str 是变量；dst 为 None 表示无定值（如 ret）。"""

    dst: str | None
    op: str  # "const"、"copy"、"add"、"sub"、"mul"、"lt"、"ret"、"br"（条件跳转，args[0] 为条件）
    args: tuple = ()

    def uses(self):
        return {a for a in self.args if isinstance(a, str)}


@dataclass
class Block:
    name: str
    instrs: list[Instr]
    succs: list[str] = field(default_factory=list)


@dataclass
class CFG:
    blocks: dict[str, Block]
    entry: str

    def preds(self):
        p = {b: [] for b in self.blocks}
        for b in self.blocks.values():
            for s in b.succs:
                p[s].append(b.name)
        return p
# --8<-- [end:ir]


# --8<-- [start:worklist]
def solve(cfg, *, forward, init, boundary, meet, transfer):
    """通用工作表算法（Kildall）：返回每个块入口与出口的数据流值 (IN, OUT)。

    forward=True 时 IN[B] = meet(OUT[P] for P in preds)，OUT[B] = transfer(B, IN[B])；
    后向分析把 preds/succs、IN/OUT 对调。要求格的高度有限、transfer 单调，才保证终止。
    """
    preds, succs = cfg.preds(), {b: cfg.blocks[b].succs for b in cfg.blocks}
    before, after = (preds, succs) if forward else (succs, preds)
    inp = {b: init for b in cfg.blocks}  # 前向时是 IN，后向时是 OUT（“进入传递函数的一侧”）
    out = {b: init for b in cfg.blocks}
    work = deque(cfg.blocks)
    queued = set(work)
    steps = 0
    while work:
        b = work.popleft()
        queued.discard(b)
        steps += 1
        srcs = before[b]
        inp[b] = meet([out[p] for p in srcs]) if srcs else boundary
        new = transfer(cfg.blocks[b], inp[b])
        if new != out[b]:
            out[b] = new
            for s in after[b]:
                if s not in queued:
                    work.append(s)
                    queued.add(s)
    if forward:
        return inp, out, steps
    return out, inp, steps  # 后向：IN 是传递函数的输出，OUT 是汇合的结果
# --8<-- [end:worklist]


# --8<-- [start:liveness]
def liveness(cfg):
    """活跃变量：后向，汇合为并集。IN[B] = use[B] ∪ (OUT[B] − def[B])。"""

    def transfer(block, live_out):
        live = set(live_out)
        for ins in reversed(block.instrs):  # 从块尾往前：先杀定值，再加使用
            if ins.dst is not None:
                live.discard(ins.dst)
            live |= ins.uses()
        return frozenset(live)

    def union(values):
        return frozenset().union(*values)

    live_in, live_out, _ = solve(cfg, forward=False, init=frozenset(), boundary=frozenset(), meet=union, transfer=transfer)
    return live_in, live_out
# --8<-- [end:liveness]


def reaching_definitions(cfg):
    """到达定值：前向，汇合为并集。一个定值记作 (块名, 指令序号, 变量)。"""

    def transfer(block, reach_in):
        reach = set(reach_in)
        for i, ins in enumerate(block.instrs):
            if ins.dst is not None:
                reach = {d for d in reach if d[2] != ins.dst}  # kill：同一变量的其他定值
                reach.add((block.name, i, ins.dst))  # gen
        return frozenset(reach)

    def union(values):
        return frozenset().union(*values)

    reach_in, reach_out, _ = solve(cfg, forward=True, init=frozenset(), boundary=frozenset(), meet=union, transfer=transfer)
    return reach_in, reach_out


# --8<-- [start:constprop]
UNDEF, NAC = "UNDEF", "NAC"  # 格的顶（尚无信息）与底（不是常量）
_EVAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "lt": lambda a, b: int(a < b)}


def meet_value(a, b):
    """常量格上的交：UNDEF ⊓ x = x，c ⊓ c = c，c1 ⊓ c2 = NAC（c1 ≠ c2），NAC ⊓ x = NAC。"""
    if a == UNDEF:
        return b
    if b == UNDEF:
        return a
    return a if a == b else NAC


def const_value(ins, env):
    """一条指令的常量传递函数：由各参数的格值求结果的格值。"""
    vals = [a if isinstance(a, int) else env[a] for a in ins.args]
    if ins.op in ("const", "copy"):
        return vals[0]
    if NAC in vals:
        return NAC
    if UNDEF in vals:
        return UNDEF
    return _EVAL[ins.op](*vals)


def constant_propagation(cfg, variables):
    """条件无关的常量传播（Kildall）：前向，状态是“变量 → 格值”的映射，逐变量做交。"""

    def transfer(block, env_in):
        env = dict(env_in)
        for ins in block.instrs:
            if ins.dst is not None:
                env[ins.dst] = const_value(ins, env)
        return tuple(sorted(env.items()))

    def meet(envs):
        merged = {}
        for env in envs:
            for k, v in env:
                merged[k] = meet_value(merged.get(k, UNDEF), v)
        return tuple(sorted(merged.items()))

    top = tuple((v, UNDEF) for v in sorted(variables))
    env_in, env_out, steps = solve(cfg, forward=True, init=top, boundary=top, meet=meet, transfer=transfer)
    return {b: dict(v) for b, v in env_in.items()}, {b: dict(v) for b, v in env_out.items()}, steps
# --8<-- [end:constprop]


# --8<-- [start:memplan]
@dataclass(frozen=True)
class Tensor:
    name: str
    nbytes: int
    producer: int  # 产生它的算子序号（图输入记为 -1）
    last_use: int  # 最后一个读它的算子序号（图输出记为算子总数）


def lifetimes(ops, sizes, outputs):
    """ops 是拓扑序的 (输出名, [输入名...]) 列表；返回每个中间张量的活跃区间 [producer, last_use]。"""
    producer = {out: i for i, (out, _) in enumerate(ops)}
    last = dict(producer)
    for i, (_, ins) in enumerate(ops):
        for name in ins:
            if name in producer:
                last[name] = max(last[name], i)
    for name in outputs:
        last[name] = len(ops)
    return [Tensor(n, sizes[n], producer[n], last[n]) for n in producer]


def peak_live_bytes(tensors):
    """任一时刻同时活跃的字节数的最大值：任何分配方案都不可能低于它。"""
    steps = range(min(t.producer for t in tensors), max(t.last_use for t in tensors) + 1)
    return max(sum(t.nbytes for t in tensors if t.producer <= s <= t.last_use) for s in steps)


def plan_greedy_by_size(tensors, align=64):
    """按大小从大到小放置，每个张量放进与它活跃区间重叠的张量之间最低的可用偏移（first-fit；论文与 TFLite 取能容纳它的最小空隙，即 best-fit）。"""
    placed = []  # (offset, tensor)
    for t in sorted(tensors, key=lambda t: (-t.nbytes, t.producer)):
        busy = sorted((off, off + u.nbytes) for off, u in placed if not (u.last_use < t.producer or t.last_use < u.producer))
        offset = 0
        for lo, hi in busy:
            if offset + t.nbytes <= lo:
                break
            offset = max(offset, -(-hi // align) * align)
        placed.append((offset, t))
    arena = max(off + t.nbytes for off, t in placed)
    return {t.name: off for off, t in placed}, arena
# --8<-- [end:memplan]


def check_plan(tensors, offsets):
    """断言：活跃区间重叠的两个张量，地址区间不重叠。"""
    for a in tensors:
        for b in tensors:
            if a.name < b.name and not (a.last_use < b.producer or b.last_use < a.producer):
                ra = (offsets[a.name], offsets[a.name] + a.nbytes)
                rb = (offsets[b.name], offsets[b.name] + b.nbytes)
                assert ra[1] <= rb[0] or rb[1] <= ra[0], (a, b, ra, rb)
