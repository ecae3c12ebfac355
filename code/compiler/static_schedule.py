"""静态调度的加速器上，分块矩阵乘的编译期时间表：片上草稿存储器（scratchpad）放得下多大的块、
DMA 与计算怎样用双缓冲重叠、阵列利用率是多少。页面 docs/compiler/accelerator-compilers.md 嵌入这里的片段，
tests/test_compiler_static_schedule.py 用逐周期的蛮力仿真独立地重算同一张时间表并比较每个事件的时刻。

模型（一个假想的、类 TPU / 昇腾 Cube 的核心，参数见 Machine）：
- 一个 S×S 的输出驻留脉动阵列：算一个 S×S 的输出子块、累加深度 k 需要 k + 2(S-1) 个周期
  （与 docs/hardware/chip-design.md 的 RTL 实验同一个公式），子块之间不重叠；
- 一个搬入 DMA 通道（HBM → 草稿存储器）与一个搬出 DMA 通道（累加器 → HBM），各自按顺序执行，
  每次传输 = 固定延迟 + 字节数 / 带宽；
- 没有缓存、没有硬件互锁：一切先后关系由编译器在编译期排定，时间表就是程序。
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import ceil


# --8<-- [start:model]
@dataclass(frozen=True)
class Machine:
    array: int = 128            # 脉动阵列边长 S
    bw: int = 256               # 每条 DMA 通道的带宽，字节/周期
    dma_latency: int = 200      # 每次 DMA 传输的固定开销，周期
    sram: int = 8 << 20         # 草稿存储器容量，字节（输入缓冲与累加器都算在内）
    in_bytes: int = 2           # 输入元素字节数（bf16）
    acc_bytes: int = 4          # 累加器元素字节数（fp32）


@dataclass(frozen=True)
class Tile:
    m: int
    n: int
    k: int


def pad(x, to):
    return ceil(x / to) * to


def footprint(t: Tile, mc: Machine, buffers=2):
    """草稿存储器占用：buffers 份 A、B 输入块 + 2 份累加器（一份在算，一份在搬出）。"""
    inputs = (t.m * t.k + t.k * t.n) * mc.in_bytes
    return buffers * inputs + 2 * t.m * t.n * mc.acc_bytes


def step_costs(t: Tile, mc: Machine):
    """一步（一对 A、B 块）的搬入周期、计算周期，与一个输出块的搬出周期。"""
    s = mc.array
    load = mc.dma_latency + ceil((t.m * t.k + t.k * t.n) * mc.in_bytes / mc.bw)
    compute = ceil(t.m / s) * ceil(t.n / s) * t.k + 2 * (s - 1)
    store = mc.dma_latency + ceil(t.m * t.n * mc.acc_bytes / mc.bw)
    return load, compute, store
# --8<-- [end:model]


# --8<-- [start:schedule]
def schedule(M, N, K, t: Tile, mc: Machine, buffers=2):
    """编译期排出的时间表：每一步的搬入、计算区间，每个输出块的搬出区间（单位：周期）。

    规则（编译器写进程序的同步，没有任何运行时仲裁）：
      搬入 s 开始 = max(搬入 s-1 结束, 计算 s-buffers 结束)      # 输入缓冲槽 s % buffers 空出来
      计算 s 开始 = max(计算 s-1 结束, 搬入 s 结束,
                        [若 s 是输出块 j 的第一步] 搬出 j-2 结束)  # 累加器槽 j % 2 空出来
      搬出 j 开始 = max(计算(j 的最后一步) 结束, 搬出 j-1 结束)
    """
    if footprint(t, mc, buffers) > mc.sram:
        raise ValueError(f"块 {t} 需要 {footprint(t, mc, buffers)} 字节，草稿存储器只有 {mc.sram}")
    Mp, Np, Kp = pad(M, t.m), pad(N, t.n), pad(K, t.k)   # 不整除时补零：算了也白算
    ksteps = Kp // t.k
    outputs = (Mp // t.m) * (Np // t.n)
    steps = outputs * ksteps
    load, compute, store = step_costs(t, mc)
    L, C, S = [], [], []                                  # 每项是 (开始, 结束)
    for s in range(steps):
        j, kk = divmod(s, ksteps)
        ls = max(L[s - 1][1] if s else 0, C[s - buffers][1] if s >= buffers else 0)
        L.append((ls, ls + load))
        cs = max(C[s - 1][1] if s else 0, L[s][1])
        if kk == 0 and j >= 2:
            cs = max(cs, S[j - 2][1])
        C.append((cs, cs + compute))
        if kk == ksteps - 1:
            ss = max(C[s][1], S[j - 1][1] if j else 0)
            S.append((ss, ss + store))
    makespan = S[-1][1]
    useful = M * N * K                                     # 真正需要的乘加数
    return {"load": L, "compute": C, "store": S, "makespan": makespan,
            "utilization": useful / (mc.array ** 2 * makespan),
            "busy": steps * compute / makespan,            # 阵列忙的时间占比（含补零与填充排空）
            "footprint": footprint(t, mc, buffers), "steps": steps, "costs": (load, compute, store)}
# --8<-- [end:schedule]


def simulate(M, N, K, t: Tile, mc: Machine, buffers=2):
    """逐周期的蛮力仿真：三个引擎各是一个状态机，缓冲槽带“空 / 正在装 / 满 / 正在算”标志。

    它不用上面的递推式，只按“资源空出来就开始”的规则一拍一拍地走，用来独立地核对 schedule()。
    """
    Mp, Np, Kp = pad(M, t.m), pad(N, t.n), pad(K, t.k)
    ksteps = Kp // t.k
    outputs = (Mp // t.m) * (Np // t.n)
    steps = outputs * ksteps
    load, compute, store = step_costs(t, mc)
    slot = ["empty"] * buffers          # 输入缓冲槽
    acc = ["free"] * 2                  # 累加器槽：free / busy（正在累加或等着搬出）
    L, C, S = [None] * steps, [None] * steps, [None] * outputs
    nxt_load = nxt_comp = nxt_store = 0
    load_busy = comp_busy = store_busy = None   # 正在执行的 (编号, 结束时刻)
    cycle = 0
    while nxt_store < outputs or store_busy:
        # 1. 本拍结束的操作先释放资源
        if load_busy and load_busy[1] == cycle:
            slot[load_busy[0] % buffers] = "full"
            load_busy = None
        if comp_busy and comp_busy[1] == cycle:
            s = comp_busy[0]
            slot[s % buffers] = "empty"
            comp_busy = None
        if store_busy and store_busy[1] == cycle:
            acc[store_busy[0] % 2] = "free"
            store_busy = None
        # 2. 再看哪个引擎能开始下一个操作（它们在同一拍里互不依赖：每个操作至少持续 1 拍）
        if load_busy is None and nxt_load < steps and slot[nxt_load % buffers] == "empty":
            slot[nxt_load % buffers] = "loading"
            load_busy = (nxt_load, cycle + load)
            L[nxt_load] = (cycle, cycle + load)
            nxt_load += 1
        if comp_busy is None and nxt_comp < steps and slot[nxt_comp % buffers] == "full":
            j, kk = divmod(nxt_comp, ksteps)
            if kk > 0 or acc[j % 2] == "free":
                acc[j % 2] = "busy"
                slot[nxt_comp % buffers] = "computing"
                comp_busy = (nxt_comp, cycle + compute)
                C[nxt_comp] = (cycle, cycle + compute)
                nxt_comp += 1
        if store_busy is None and nxt_store < outputs:
            last = (nxt_store + 1) * ksteps - 1
            if C[last] is not None and C[last][1] <= cycle:
                store_busy = (nxt_store, cycle + store)
                S[nxt_store] = (cycle, cycle + store)
                nxt_store += 1
        cycle += 1
    return {"load": L, "compute": C, "store": S, "makespan": S[-1][1]}


# --8<-- [start:choose]
def candidates(mc: Machine, sizes=(128, 256, 512, 1024), depths=(128, 256, 512, 1024, 2048)):
    """编译器的搜索空间：m、n 取阵列边长的倍数，k 取若干深度。"""
    return [Tile(m, n, k) for m, n, k in itertools.product(sizes, sizes, depths)]


def choose(M, N, K, mc: Machine, buffers=2):
    """在放得进草稿存储器的块里，选时间表最短的一个（代价模型就是 schedule 本身）。"""
    best = None
    for t in candidates(mc):
        if footprint(t, mc, buffers) > mc.sram:
            continue
        r = schedule(M, N, K, t, mc, buffers)
        if best is None or r["makespan"] < best[1]["makespan"]:
            best = (t, r)
    return best
# --8<-- [end:choose]


# --8<-- [start:vliw]
# 一台 2 发射的 VLIW：每拍一条访存槽（mem）和一条运算槽（alu）；没有互锁，结果在 发射拍 + 延迟 时写回寄存器，
# 在那之前读到的是旧值。程序是 (目的, 操作, 源操作数, 槽) 的列表，操作数是寄存器名或常量。
LATENCY = {"load": 3, "add": 1, "mul": 2}
UNIT = {"load": "mem", "add": "alu", "mul": "alu"}


def list_schedule(prog, latency=LATENCY):
    """表调度（list scheduling）：按“到终点的最长延迟路径”排优先级，每拍给每个槽挑一条已就绪的指令。"""
    producer = {dst: i for i, (dst, _, _, _) in enumerate(prog)}
    preds = [[producer[s] for s in srcs if s in producer] for _, _, srcs, _ in prog]
    succs = [[j for j in range(len(prog)) if i in preds[j]] for i in range(len(prog))]
    prio = [0] * len(prog)
    for i in reversed(range(len(prog))):       # 程序按拓扑序给出，倒着算最长路径
        prio[i] = latency[prog[i][1]] + max((prio[j] for j in succs[i]), default=0)
    ready_at, issued, bundles, cycle = {}, set(), [], 0
    while len(issued) < len(prog):
        bundle = {}
        cands = [i for i in range(len(prog)) if i not in issued
                 and all(p in ready_at and ready_at[p] <= cycle for p in preds[i])]
        for i in sorted(cands, key=lambda i: -prio[i]):
            unit = UNIT[prog[i][1]]
            if unit not in bundle:
                bundle[unit] = i
                issued.add(i)
                ready_at[i] = cycle + latency[prog[i][1]]
        bundles.append(bundle)
        cycle += 1
    return bundles


def run_vliw(prog, bundles, memory, latency=LATENCY, interlock=False):
    """执行打好包的程序。latency 是硬件真实的延迟；interlock=True 时硬件在源操作数未就绪时整体停顿。"""
    regs, pending, cycle, stalls = {}, [], 0, 0
    pending_regs = lambda: {r for _, r, _ in pending}
    for bundle in bundles:
        while True:
            for due, r, v in [p for p in pending if p[0] <= cycle]:
                regs[r] = v
            pending = [p for p in pending if p[0] > cycle]
            srcs = {s for i in bundle.values() for s in prog[i][2] if isinstance(s, str)}
            if not (interlock and srcs & pending_regs()):
                break
            cycle, stalls = cycle + 1, stalls + 1
        for i in bundle.values():
            dst, op, srcs, _ = prog[i]
            val = [regs.get(s, 0) if isinstance(s, str) else s for s in srcs]
            out = memory[val[0]] if op == "load" else (val[0] + val[1] if op == "add" else val[0] * val[1])
            pending.append((cycle + latency[op], dst, out))
        cycle += 1
    for due, r, v in sorted(pending):
        regs[r], cycle = v, max(cycle, due)
    return regs, cycle, stalls
# --8<-- [end:vliw]


EXAMPLE = [  # y = (m[0] + m[1]) * (m[2] + m[3])
    ("a", "load", (0,), "mem"), ("b", "load", (1,), "mem"), ("c", "load", (2,), "mem"), ("d", "load", (3,), "mem"),
    ("s", "add", ("a", "b"), "alu"), ("t", "add", ("c", "d"), "alu"), ("y", "mul", ("s", "t"), "alu"),
]


def gantt(result, scale, width):
    """把时间表画成三行文字甘特图，每个字符代表 scale 个周期：搬入与计算标出步号 s（0–9 循环），
    搬出标出输出块号 j（a、b、c……），'.' 为空闲。"""
    rows = []
    for name, key, mark in (("DMA 入", "load", str), ("阵列  ", "compute", str),
                            ("DMA 出", "store", lambda j: "abcdefghij"[j % 10])):
        line = ["."] * width
        for i, (a, b) in enumerate(result[key]):
            for x in range(a // scale, min(width, ceil(b / scale))):
                line[x] = mark(i % 10)
        rows.append(f"{name} |{''.join(line)}|")
    return "\n".join(rows)


# --8<-- [start:report]
def report():
    """页面上的时间线：512×256×1024 的矩阵乘、256×256×256 的块（2 个输出块 × 4 步），单缓冲与双缓冲。"""
    mc = Machine()
    tile = Tile(256, 256, 256)
    runs = {b: schedule(512, 256, 1024, tile, mc, buffers=b) for b in (1, 2)}
    scale = 300
    lines = [f"# {mc}", f"# M, N, K = 512, 256, 1024; tile {tile}; one character = {scale} cycles", ""]
    for b, r in runs.items():
        load, compute, store = r["costs"]
        lines.append(f"buffers = {b}: load {load}, compute {compute}, store {store} cycles per step; "
                     f"makespan {r['makespan']} cycles, array busy {r['busy']:.1%}")
        lines.append(gantt(r, scale, width=ceil(runs[1]["makespan"] / scale)))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
# --8<-- [end:report]


TABLE_TILES = [(Tile(128, 128, 512), 2), (Tile(256, 256, 512), 1), (Tile(256, 256, 512), 2),
               (Tile(256, 256, 1024), 2), (Tile(512, 512, 512), 2), (Tile(512, 512, 1024), 2)]


def table(M=1024, N=1024, K=1024, mc=Machine()):
    """页面上“块大小怎样用 SRAM 换重叠”那张表的每一行：
    (块, 缓冲份数, 占用 KiB, 每步搬入周期, 每步计算周期, 总周期, 利用率)。"""
    rows = []
    for t, buffers in TABLE_TILES:
        r = schedule(M, N, K, t, mc, buffers)
        load, compute, _ = r["costs"]
        rows.append((f"{t.m}×{t.n}×{t.k}", buffers, r["footprint"] // 1024, load, compute, r["makespan"],
                     f"{r['utilization']:.1%}"))
    return rows


def best_by_sram(M=1024, N=1024, K=1024, srams_kib=(512, 1024, 2048, 4096, 8192)):
    """草稿存储器从 512 KiB 到 8 MiB 时，choose() 选出的块与利用率。"""
    out = []
    for kib in srams_kib:
        t, r = choose(M, N, K, Machine(sram=kib << 10))
        out.append((kib, f"{t.m}×{t.n}×{t.k}", r["footprint"] // 1024, r["makespan"], f"{r['utilization']:.1%}"))
    return out


if __name__ == "__main__":
    import record_ir

    text = report()
    record_ir.write("static-schedule.txt", "code/compiler/static_schedule.py (analytic model of a hypothetical "
                    "accelerator, no hardware)", "python code/compiler/static_schedule.py", text)
    print(text)
    for row in table():
        print(row)
    for row in best_by_sram():
        print(row)
