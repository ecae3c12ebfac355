"""经典后端的三个阶段：指令选择、寄存器分配、指令调度，连同一个解释器和一个时序模型。

- 源程序：一个基本块里的表达式树（let / store / ret），值是 32 位整数；
- 指令选择：目标机有 li/add/addi/mul/madd/ld/addm/st 几条指令，按树模式覆盖（tiling），
  动态规划（BURS 的思路）求总代价最小的覆盖，对照自顶向下的最大吞进（maximal munch）；
- 活跃分析、干涉图，Chaitin–Briggs 图着色（简化 / 选择，乐观着色，代价 / 度数的溢出启发式）
  与 Poletto–Sarkar 线性扫描，两者都把溢出的虚拟寄存器改写成对栈槽的 spill / reload；
- 依赖图与关键路径优先的表调度（list scheduling），单发射、按序、记分牌式互锁的时序模型。

页面 docs/compiler/backend.md 嵌入这里的片段；测试 tests/test_compiler_backend.py 与实验
notebooks/compiler/backend-lab.ipynb 检查生成的代码在解释器里与源程序逐值相等。
运行 `python code/compiler/backend.py` 重写 code/compiler/records/backend-*.txt。
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, replace

MASK = (1 << 32) - 1


# --8<-- [start:ir]
@dataclass(frozen=True)
class Node:
    """源程序的树结点。op: reg const load add mul；语句根：let store ret。"""

    op: str
    kids: tuple = ()
    val: object = None  # reg、let 的名字，const 的值


def Reg(name): return Node("reg", (), name)
def Const(c): return Node("const", (), c)
def Load(addr): return Node("load", (addr,))
def Add(a, b): return Node("add", (a, b))
def Mul(a, b): return Node("mul", (a, b))
def Let(name, e): return Node("let", (e,), name)
def Store(addr, v): return Node("store", (addr, v))
def Ret(e): return Node("ret", (e,))


@dataclass
class Program:
    name: str
    params: tuple  # 入口参数的名字
    stmts: list  # Let / Store ……，最后一条是 Ret；每个 let 名字只定义一次


class Memory(dict):
    """按字寻址的内存：没写过的地址读出由地址和 salt 决定的伪随机值；dict 本身只含写过的地址。"""

    def __init__(self, salt):
        super().__init__()
        self.salt = salt

    def __missing__(self, addr):
        return ((addr * 0x9E3779B1) ^ self.salt) & MASK


def evaluate(prog, args, salt=0):
    """源程序的参考语义：返回 (返回值, 写过的内存)。"""
    env, mem = dict(zip(prog.params, args)), Memory(salt)

    def ev(n):
        if n.op == "reg":
            return env[n.val]
        if n.op == "const":
            return n.val & MASK
        if n.op == "load":
            return mem[ev(n.kids[0])]
        a, b = ev(n.kids[0]), ev(n.kids[1])
        return (a + b) & MASK if n.op == "add" else (a * b) & MASK

    for s in prog.stmts:
        if s.op == "let":
            env[s.val] = ev(s.kids[0])
        elif s.op == "store":
            addr = ev(s.kids[0])
            mem[addr] = ev(s.kids[1])
        else:
            return ev(s.kids[0]), dict(mem)
    raise ValueError("program without ret")
# --8<-- [end:ir]


# --8<-- [start:target]
# 每条指令的延迟（周期）：结果在发射后第几个周期可用。指令选择的代价也取它。
LATENCY = {"arg": 1, "li": 1, "add": 1, "addi": 1, "mul": 3, "madd": 3, "ld": 3, "addm": 4,
           "st": 1, "spill": 1, "reload": 3, "ret": 1}


@dataclass(frozen=True)
class Ins:
    """目标指令。dst/srcs 是寄存器名（分配前是虚拟寄存器，分配后是 r0…r{k-1}）。
    mem 标出访存位置，供调度判断别名：("heap", 基址的虚拟寄存器, 偏移) 或 ("slot", 栈槽号)。"""

    op: str
    dst: str | None
    srcs: tuple = ()
    imm: int | None = None
    mem: tuple | None = None

    def __str__(self):
        s, d, i = self.srcs, self.dst, self.imm
        text = {
            "arg": lambda: f"{d}, #{i}", "li": lambda: f"{d}, {i}", "addi": lambda: f"{d}, {s[0]}, {i}",
            "ld": lambda: f"{d}, [{s[0]} + {i}]", "addm": lambda: f"{d}, {s[0]}, [{s[1]} + {i}]",
            "st": lambda: f"[{s[0]} + {i}], {s[1]}", "spill": lambda: f"[sp + {i}], {s[0]}",
            "reload": lambda: f"{d}, [sp + {i}]", "ret": lambda: f"{s[0]}",
        }.get(self.op, lambda: ", ".join([d, *s]))()
        return f"{self.op:<7}{text}"


def execute(code, args, salt=0):
    """按程序顺序解释目标代码，返回 (返回值, 写过的内存)。读一个没定义的寄存器会抛 KeyError。"""
    reg, frame, mem = {}, {}, Memory(salt)
    for ins in code:
        v = [reg[x] for x in ins.srcs]
        op = ins.op
        if op == "ret":
            return v[0], dict(mem)
        if op == "st":
            mem[(v[0] + ins.imm) & MASK] = v[1]
        elif op == "spill":
            frame[ins.imm] = v[0]
        else:
            reg[ins.dst] = {
                "arg": lambda: args[ins.imm] & MASK, "li": lambda: ins.imm & MASK,
                "add": lambda: (v[0] + v[1]) & MASK, "addi": lambda: (v[0] + ins.imm) & MASK,
                "mul": lambda: (v[0] * v[1]) & MASK, "madd": lambda: (v[0] * v[1] + v[2]) & MASK,
                "ld": lambda: mem[(v[0] + ins.imm) & MASK],
                "addm": lambda: (v[0] + mem[(v[1] + ins.imm) & MASK]) & MASK,
                "reload": lambda: frame[ins.imm],
            }[op]()
    raise ValueError("code without ret")


def cycles(code):
    """单发射、按序、记分牌互锁的时序模型：一条指令在上一条之后至少一个周期发射，
    还要等源寄存器的值就绪（写后读），等目的寄存器上一次的写完成（写后写）。返回最后一个结果就绪的周期。"""
    t, ready, finish = -1, {}, 0
    for ins in code:
        waits = [t + 1] + [ready.get(s, 0) for s in ins.srcs]
        if ins.dst:
            waits.append(ready.get(ins.dst, 0))
        t = max(waits)
        if ins.dst:
            ready[ins.dst] = t + LATENCY[ins.op]
        finish = max(finish, t + LATENCY[ins.op])
    return finish
# --8<-- [end:target]


# --8<-- [start:tiles]
@dataclass(frozen=True)
class Tile:
    """一条指令能覆盖的树模式。模式里小写字符串是操作数（任意子树，结果在寄存器里），
    ("const", "c") 把常量绑定成立即数 c。base 是访存指令的基址操作数。"""

    name: str
    op: str
    pattern: tuple
    cost: int
    operands: tuple
    base: str | None = None


C = ("const", "c")
TILES = [
    Tile("li", "li", C, 1, ()),
    Tile("add", "add", ("add", "x", "y"), 1, ("x", "y")),
    Tile("addi", "addi", ("add", "x", C), 1, ("x",)),
    Tile("mul", "mul", ("mul", "x", "y"), 3, ("x", "y")),
    Tile("madd", "madd", ("add", ("mul", "x", "y"), "z"), 3, ("x", "y", "z")),  # 乘加：x*y + z
    Tile("ld", "ld", ("load", "x"), 3, ("x",), "x"),
    Tile("ld+imm", "ld", ("load", ("add", "x", C)), 3, ("x",), "x"),  # 基址 + 立即数寻址
    Tile("addm", "addm", ("add", "x", ("load", "y")), 4, ("x", "y"), "y"),  # 带内存操作数的加法
    Tile("addm+imm", "addm", ("add", "x", ("load", ("add", "y", C))), 4, ("x", "y"), "y"),
    Tile("st", "st", ("store", "y", "v"), 1, ("y", "v"), "y"),
    Tile("st+imm", "st", ("store", ("add", "y", C), "v"), 1, ("y", "v"), "y"),
    Tile("ret", "ret", ("ret", "x"), 1, ("x",)),
]
COMMUTATIVE = {"add", "mul"}


def matches(pat, node):
    """模式 pat 在结点 node 处的所有匹配（加法、乘法可交换），每个匹配是 {操作数名: 子树或立即数}。"""
    if isinstance(pat, str):
        return [{pat: node}]
    if pat[0] == "const" and isinstance(pat[1], str):
        return [{pat[1]: node.val}] if node.op == "const" else []
    if node.op != pat[0] or len(node.kids) != len(pat) - 1:
        return []
    orders = [node.kids]
    if node.op in COMMUTATIVE and node.kids[0] != node.kids[1]:
        orders.append(node.kids[::-1])
    found = []
    for kids in orders:
        partial = [{}]
        for p, k in zip(pat[1:], kids):
            partial = [{**a, **b} for a in partial for b in matches(p, k)]
        found += partial
    return found


def size(pat):
    """模式覆盖的 IR 结点数（操作数不算）。"""
    if isinstance(pat, str):
        return 0
    return 1 if pat[0] == "const" else 1 + sum(size(p) for p in pat[1:])
# --8<-- [end:tiles]


# --8<-- [start:select]
def cover_dp(node, memo=None):
    """自底向上的动态规划：每个结点取“匹配的瓦片代价 + 各操作数子树的最优代价”最小者。
    返回覆盖树 (代价, 瓦片, 绑定, 子覆盖)。寄存器里的叶子（reg）代价 0。"""
    memo = {} if memo is None else memo
    if node.op == "reg":
        return (0, None, {"x": node.val}, ())
    if node not in memo:
        best = None
        for tile in TILES:
            for b in matches(tile.pattern, node):
                kids = tuple(cover_dp(b[o], memo) for o in tile.operands)
                cost = tile.cost + sum(k[0] for k in kids)
                if best is None or cost < best[0]:
                    best = (cost, tile, b, kids)
        memo[node] = best
    return memo[node]


def cover_munch(node):
    """最大吞进：自顶向下，每个结点取覆盖结点最多的瓦片（一样多时取代价低的），再处理剩下的子树。"""
    if node.op == "reg":
        return (0, None, {"x": node.val}, ())
    options = [(t, b) for t in TILES for b in matches(t.pattern, node)]
    tile, b = max(options, key=lambda tb: (size(tb[0].pattern), -tb[0].cost))
    kids = tuple(cover_munch(b[o]) for o in tile.operands)
    return (tile.cost + sum(k[0] for k in kids), tile, b, kids)


def need(cov):
    """Sethi–Ullman 数：不溢出地求值这棵覆盖树需要几个新寄存器。"""
    if cov[1] is None:
        return 0
    ns = sorted((need(k) for k in cov[3]), reverse=True)
    return max([1] + [n + i for i, n in enumerate(ns)])


def select(prog, method="dp"):
    """把程序翻译成虚拟寄存器上的目标代码。返回 (代码, 瓦片代价之和)。"""
    cover = cover_dp if method == "dp" else cover_munch
    code = [Ins("arg", p, (), i) for i, p in enumerate(prog.params)]
    names, counter, total = {}, iter(range(1, 1 << 30)), 0

    def emit(cov, dst=None):
        _, tile, b, kids = cov
        if tile is None:
            return names.get(b["x"], b["x"])
        regs = [None] * len(kids)
        for i in sorted(range(len(kids)), key=lambda i: -need(kids[i])):  # 需要寄存器多的子树先算
            regs[i] = emit(kids[i])
        ops = dict(zip(tile.operands, regs))
        d = None if tile.op in ("st", "ret") else (dst or f"v{next(counter)}")
        mem = ("heap", ops[tile.base], b.get("c", 0)) if tile.base else None
        imm = b.get("c", 0) if tile.op in ("li", "addi", "ld", "addm", "st") else None
        code.append(Ins(tile.op, d, tuple(regs), imm, mem))
        return d

    for s in prog.stmts:
        if s.op == "let" and s.kids[0].op == "reg":
            names[s.val] = emit(cover(s.kids[0]))  # let y = x：只是换个名字
            continue
        cov = cover(s.kids[0]) if s.op == "let" else cover(s)
        total += cov[0]
        emit(cov, s.val if s.op == "let" else None)
    return code, total
# --8<-- [end:select]


# --8<-- [start:liveness]
def live_after(code):
    """后向扫描一个基本块：每条指令之后活跃的寄存器集合。"""
    live, out = set(), [None] * len(code)
    for i in reversed(range(len(code))):
        out[i] = frozenset(live)
        if code[i].dst:
            live.discard(code[i].dst)
        live |= set(code[i].srcs)
    return out


def interference(code):
    """Chaitin 的定义：一条指令定值的寄存器，与此刻之后仍活跃的其他寄存器互相干涉。"""
    adj = {r: set() for ins in code for r in (*ins.srcs, ins.dst) if r}
    for ins, live in zip(code, live_after(code)):
        if ins.dst:
            for r in live - {ins.dst}:
                adj[ins.dst].add(r)
                adj[r].add(ins.dst)
    return adj


def max_live(code):
    """寄存器压力：任一时刻同时活跃的值的最大个数（指令读操作数时、写结果时各看一次）。"""
    best = 0
    for ins, live in zip(code, live_after(code)):
        best = max(best, len((live - {ins.dst}) | set(ins.srcs)), len(live | {ins.dst} - {None}))
    return best


def intervals(code):
    """线性扫描用的活跃区间：第 i 条指令读在位置 2i、写在 2i+1；区间是 [定值位置, 最后一次读的位置]。"""
    start, end = {}, {}
    for i, ins in enumerate(code):
        for s in ins.srcs:
            end[s] = 2 * i
        if ins.dst:
            assert ins.dst not in start, f"{ins.dst} defined twice"
            start[ins.dst] = end[ins.dst] = 2 * i + 1
    return {r: (start[r], end[r]) for r in start}
# --8<-- [end:liveness]


@dataclass
class Allocation:
    code: list  # 物理寄存器 r0…r{k-1} 上的代码，含溢出代码
    vcode: list  # 插入溢出代码之后、换成物理寄存器之前的代码
    colour: dict  # 虚拟寄存器 -> 物理寄存器号
    spilled: list  # 被溢出的虚拟寄存器（各轮合计）
    rounds: int

    @property
    def spill_ops(self):
        return sum(ins.op in ("spill", "reload") for ins in self.code)


# --8<-- [start:spill]
def insert_spill_code(code, spilled, slots, temps):
    """溢出：每个被溢出的 v 住进一个栈槽；定值之后 spill 到槽里，每次使用之前 reload 到一个新的短命临时寄存器。"""
    out = []
    for ins in code:
        rename = {}
        for s in dict.fromkeys(ins.srcs):
            if s in spilled:
                rename[s] = t = f"t{len(temps) + 1}"
                temps.add(t)
                out.append(Ins("reload", t, (), slots[s], ("slot", slots[s])))
        d = ins.dst
        if d in spilled:
            d = f"t{len(temps) + 1}"
            temps.add(d)
        out.append(replace(ins, dst=d, srcs=tuple(rename.get(s, s) for s in ins.srcs)))
        if d != ins.dst:
            out.append(Ins("spill", None, (d,), slots[ins.dst], ("slot", slots[ins.dst])))
    return out


def _finish(code, colour, spilled, rounds):
    phys = [replace(i, dst=i.dst and f"r{colour[i.dst]}", srcs=tuple(f"r{colour[s]}" for s in i.srcs)) for i in code]
    return Allocation(phys, code, colour, spilled, rounds)
# --8<-- [end:spill]


# --8<-- [start:chaitin]
def spill_costs(code, temps):
    """溢出代价 (档次, 代价)：代价是定值与使用的次数（单个基本块，没有循环权重）。档次 2：溢出代码自己的临时寄存器，
    不能再溢出；档次 1：区间内部没有别的值死去，溢出它换来的 reload 临时寄存器照样占着寄存器，溢出无益。"""
    iv, uses = intervals(code), Counter(r for ins in code for r in (*ins.srcs, ins.dst) if r)
    ends = sorted(e for _, e in iv.values())
    cost = {}
    for r, (start, end) in iv.items():
        helps = any(start < e < end for e in ends)
        cost[r] = (2 if r in temps else 0 if helps else 1, uses[r])
    return cost


def chaitin_briggs(code, k, optimistic=True):
    """图着色分配。简化：反复删掉度数 < k 的结点压栈；卡住时按 代价/度数 最小选一个溢出候选，
    Briggs 的乐观做法把它也压栈，留到选择阶段再看是否真有颜色（Chaitin 原版直接溢出）。
    选择：出栈，取邻居没用过的最小颜色；没有颜色的真溢出，插入溢出代码后重来。"""
    temps, slots, spilled_all, rounds = set(), {}, [], 0
    while True:
        rounds += 1
        adj = interference(code)
        cost = spill_costs(code, temps)
        graph = {r: set(n) for r, n in adj.items()}
        stack, spilled = [], []
        while graph:
            low = [r for r in graph if len(graph[r]) < k]
            if low:
                r = low[0]
            else:
                r = min(graph, key=lambda r: (cost[r][0], cost[r][1] / len(graph[r])))
                if cost[r][0] == 2:
                    raise ValueError(f"k={k} is too small: only spill temporaries are left")
                if not optimistic:
                    spilled.append(r)
            for n in graph.pop(r):
                graph[n].discard(r)
            if r not in spilled:
                stack.append(r)
        colour = {}
        for r in reversed(stack):
            free = [c for c in range(k) if c not in {colour.get(n) for n in adj[r]}]
            if free:
                colour[r] = free[0]
            else:
                spilled.append(r)
        if not spilled:
            return _finish(code, colour, spilled_all, rounds)
        for r in spilled:
            slots[r] = len(slots)
        spilled_all += spilled
        code = insert_spill_code(code, set(spilled), slots, temps)
# --8<-- [end:chaitin]


# --8<-- [start:linearscan]
def linear_scan(code, k):
    """Poletto–Sarkar 线性扫描：区间按起点排序，active 里是占着寄存器的区间；先让已结束的区间交还寄存器，
    没有空闲寄存器时，在 active 与当前区间中溢出终点最远的那个。溢出后改写代码再扫一遍。"""
    temps, slots, spilled_all, rounds = set(), {}, [], 0
    while True:
        rounds += 1
        iv = intervals(code)
        active, colour, free, spilled = [], {}, list(range(k)), []
        for r in sorted(iv, key=lambda r: iv[r]):
            start, end = iv[r]
            for a in [a for a in active if iv[a][1] < start]:  # 过期
                active.remove(a)
                free.append(colour[a])
            if free:
                colour[r] = min(free)
                free.remove(colour[r])
                active.append(r)
                continue
            victim = max((a for a in active if a not in temps), key=lambda a: iv[a][1], default=None)
            if r not in temps and (victim is None or iv[victim][1] <= end):
                spilled.append(r)
            elif victim is None:
                raise ValueError(f"k={k} is too small: only spill temporaries are left")
            else:
                colour[r] = colour.pop(victim)
                active.remove(victim)
                active.append(r)
                spilled.append(victim)
        if not spilled:
            return _finish(code, colour, spilled_all, rounds)
        for r in spilled:
            slots[r] = len(slots)
        spilled_all += spilled
        code = insert_spill_code(code, set(spilled), slots, temps)
# --8<-- [end:linearscan]


def allocate(code, k, allocator="chaitin"):
    return chaitin_briggs(code, k) if allocator == "chaitin" else linear_scan(code, k)


# --8<-- [start:schedule]
def may_alias(a, b):
    if a[0] != b[0]:
        return False  # 栈槽与程序内存互不重叠
    if a[0] == "slot":
        return a[1] == b[1]
    return not (a[1] == b[1] and a[2] != b[2])  # 同一个基址值、不同偏移：一定不重叠；其余保守地认为可能重叠


def dependences(code):
    """依赖图：preds[j] = {i: 延迟}。真依赖（写后读）的延迟是生产者的延迟；反依赖（读后写）只要求次序；
    输出依赖（写后写）要等前一次写完成；访存依赖按别名判断。kinds 数各类边。"""
    preds, kinds = [dict() for _ in code], Counter()
    last_def, readers, mem_ops = {}, {}, []

    def edge(i, j, lat, kind):
        preds[j][i] = max(preds[j].get(i, 0), lat)
        kinds[kind] += 1

    for j, ins in enumerate(code):
        for s in set(ins.srcs):
            if s in last_def:
                edge(last_def[s], j, LATENCY[code[last_def[s]].op], "true")
        if ins.dst:
            for r in readers.get(ins.dst, ()):
                edge(r, j, 0, "anti")
            if ins.dst in last_def:
                edge(last_def[ins.dst], j, LATENCY[code[last_def[ins.dst]].op], "output")
        if ins.mem:
            writes = ins.op in ("st", "spill")
            for i, other in mem_ops:
                other_writes = other.op in ("st", "spill")
                if (writes or other_writes) and may_alias(ins.mem, other.mem):
                    edge(i, j, 1 if other_writes else 0, "memory")
            mem_ops.append((j, ins))
        for s in ins.srcs:
            readers.setdefault(s, []).append(j)
        if ins.dst:
            last_def[ins.dst], readers[ins.dst] = j, []
    return preds, kinds


def list_schedule(code, pressure_limit=None):
    """表调度：逐周期从“前驱都已发射、操作数已就绪”的指令里挑关键路径最长的一条发射（单发射）。
    给了 pressure_limit 时，优先挑不会让活跃值超过上限的指令（对寄存器压力敏感的调度）。ret 留在最后。"""
    body, tail = code[:-1], code[-1:]
    preds, _ = dependences(body)
    succs = [[] for _ in body]
    for j, p in enumerate(preds):
        for i, lat in p.items():
            succs[i].append((j, lat))
    height = [0] * len(body)  # 到程序结束的最长延迟路径
    for i in reversed(range(len(body))):
        height[i] = max([LATENCY[body[i].op]] + [lat + height[j] for j, lat in succs[i]])
    waiting = [len(p) for p in preds]
    earliest = [0] * len(body)
    readers_left = Counter(s for ins in code for s in set(ins.srcs))
    ready, order, live, cycle = {i for i in range(len(body)) if not preds[i]}, [], set(), 0

    def pressure_after(i):
        dead = {s for s in body[i].srcs if readers_left[s] == 1}
        return len((live - dead) | ({body[i].dst} if body[i].dst and readers_left[body[i].dst] else set()))

    while ready:
        now = [i for i in ready if earliest[i] <= cycle]
        if pressure_limit is not None:
            ok = [i for i in now if pressure_after(i) <= pressure_limit]
            if not ok:  # 超限：只在“压力最低的就绪指令”里挑，它操作数没到就等它
                lowest = min(pressure_after(i) for i in ready)
                ok = [i for i in now if pressure_after(i) == lowest]
            now = ok
        if not now:
            cycle += 1
            continue
        i = max(now, key=lambda i: (height[i], -i))
        ready.remove(i)
        order.append(i)
        for s in set(body[i].srcs):
            readers_left[s] -= 1
            if not readers_left[s]:
                live.discard(s)
        if body[i].dst and readers_left[body[i].dst]:
            live.add(body[i].dst)
        for j, lat in succs[i]:
            earliest[j] = max(earliest[j], cycle + lat)
            waiting[j] -= 1
            if not waiting[j]:
                ready.add(j)
        cycle += 1
    return [body[i] for i in order] + tail
# --8<-- [end:schedule]


# --8<-- [start:pipeline]
ORDERS = {
    "none": "只分配，不调度",
    "post": "先分配后调度",
    "pre": "先调度后分配",
    "both": "调度、分配、再调度",
    "aware": "按压力上限 k 调度、分配、再调度",
}


def compile_program(prog, k, allocator="chaitin", order="none", method="dp"):
    """选择 → （调度）→ 分配 → （调度）。返回 (物理寄存器代码, Allocation)。"""
    code, _ = select(prog, method)
    if order in ("pre", "both", "aware"):
        code = list_schedule(code, pressure_limit=k if order == "aware" else None)
    alloc = allocate(code, k, allocator)
    out = alloc.code
    if order in ("post", "both", "aware"):
        out = list_schedule(out)
    return out, alloc
# --8<-- [end:pipeline]


# ---------------------------------------------------------------- 示例程序与随机程序

def munch_example():
    """最大吞进选错的树：a*b + M[p+8]。"""
    return Program("munch", ("p", "a", "b"), [Ret(Add(Mul(Reg("a"), Reg("b")), Load(Add(Reg("p"), Const(8)))))])


def dot(n=8):
    """点积 s = Σ x[i]*y[i]，x 在 p、y 在 q；结果写回 p[n] 并返回。"""
    s = Mul(Load(Add(Reg("p"), Const(8 * (n - 1)))), Load(Add(Reg("q"), Const(8 * (n - 1)))))
    for i in reversed(range(n - 1)):
        s = Add(Mul(Load(Add(Reg("p"), Const(8 * i))), Load(Add(Reg("q"), Const(8 * i)))), s)
    return Program(f"dot{n}", ("p", "q"), [Let("s", s), Store(Add(Reg("p"), Const(8 * n)), Reg("s")), Ret(Reg("s"))])


def axpy(n=4):
    """y[i] = a*x[i] + y[i]（i < n），x 在 p、y 在 q，返回 a。"""
    stmts = [Store(Add(Reg("q"), Const(8 * i)), Add(Mul(Reg("a"), Load(Add(Reg("p"), Const(8 * i)))),
                                                    Load(Add(Reg("q"), Const(8 * i))))) for i in range(n)]
    return Program(f"axpy{n}", ("p", "q", "a"), stmts + [Ret(Reg("a"))])


def horner(n=6):
    """多项式 Σ c[i] x^i 的 Horner 求值，系数在 p：一条串行的乘加链。"""
    e = Load(Add(Reg("p"), Const(8 * n)))
    for i in reversed(range(n)):
        e = Add(Mul(e, Reg("x")), Load(Add(Reg("p"), Const(8 * i))))
    return Program(f"horner{n}", ("p", "x"), [Ret(e)])


def toy_programs():
    return [dot(8), axpy(4), horner(6)]


def random_tree(rng, names, depth):
    r = rng.random()
    if depth == 0 or r < 0.2:
        return Const(rng.randint(-5, 40)) if rng.random() < 0.3 else Reg(rng.choice(names))
    if r < 0.45:
        base = Reg(rng.choice(("p", "q")))
        addr = Add(base, Const(8 * rng.randint(0, 5))) if rng.random() < 0.8 else (base if rng.random() < 0.5 else random_tree(rng, names, depth - 1))
        return Load(addr)
    op = Add if r < 0.75 else Mul
    return op(random_tree(rng, names, depth - 1), random_tree(rng, names, depth - 1))


def random_program(rng, n_stmts=6, depth=3, name="random"):
    names, stmts = ["p", "q", "a", "b"], []
    for i in range(n_stmts):
        if rng.random() < 0.3:
            stmts.append(Store(Add(Reg(rng.choice(("p", "q"))), Const(8 * rng.randint(0, 5))), random_tree(rng, names, depth)))
        else:
            stmts.append(Let(f"x{i}", random_tree(rng, names, depth)))
            names.append(f"x{i}")
    ret = Reg(names[-1])
    for n in rng.sample(names, min(3, len(names))):
        ret = Add(ret, Reg(n))
    return Program(name, ("p", "q", "a", "b"), stmts + [Ret(ret)])


def random_inputs(rng, prog):
    args = [rng.randrange(1 << 32) if p not in ("p", "q") else 8 * rng.randrange(1 << 20) for p in prog.params]
    return args, rng.randrange(1 << 32)


def random_programs(seed, n):
    """测试与页面用的随机程序序列：3–12 条语句、深度 2–4 的表达式树。"""
    rng = random.Random(seed)
    return [random_program(rng, rng.randint(3, 12), rng.randint(2, 4), f"random{seed}-{i}") for i in range(n)]


def nonmonotone_example():
    """一个反例：Chaitin–Briggs 在 k=7 时溢出的指令比 k=6 时多（启发式不保证单调）。"""
    return random_programs(1, 386)[385]


# ---------------------------------------------------------------- 阶段次序的对比与记录

KS = (3, 4, 5, 6, 8, 16)
COLUMNS = ("none", "post", "pre", "both", "aware")


def phase_order_rows(prog, ks=KS, allocator="chaitin"):
    """每个 k、每种阶段次序：(溢出指令数, 周期数)；再加先分配后调度时的假依赖（反依赖与输出依赖）条数。"""
    code, _ = select(prog)
    rows = []
    for k in ks:
        row = {"k": k}
        for order in COLUMNS:
            out, alloc = compile_program(prog, k, allocator, order)
            row[order] = (alloc.spill_ops, cycles(out))
        kinds = dependences(allocate(code, k, allocator).code[:-1])[1]
        row["false_deps"] = kinds["anti"] + kinds["output"]
        rows.append(row)
    return rows


def pressure_summary(prog):
    """寄存器无限时：选择器给出的顺序与表调度之后的 max live 和周期数。"""
    code, _ = select(prog)
    sched = list_schedule(code)
    return {"max_live": max_live(code), "max_live_sched": max_live(sched),
            "cycles": cycles(code), "cycles_sched": cycles(sched)}


def pressure_tradeoff(prog, limits=range(2, 10)):
    """按不同的压力上限调度虚拟寄存器代码：[(上限, max live, 周期数)]，画“寄存器压力—调度长度”的折中。"""
    code, _ = select(prog)
    return [(lim, max_live(s), cycles(s)) for lim in limits for s in [list_schedule(code, pressure_limit=lim)]]


def _section(name, lines, markers=True):
    """记录里的一段，带上 pymdownx.snippets 的段标记，页面按段名嵌入。"""
    return [f"# --8<-- [start:{name}]", *lines, f"# --8<-- [end:{name}]"] if markers else [*lines]


def phase_order_table(programs=None, ks=KS, allocator="chaitin", markers=True):
    legend = "列 A 不调度；B 先分配后调度；C 先调度后分配；D 调度、分配、再调度；E 按压力上限 k 调度、分配、再调度"
    lines = []
    for prog in programs or toy_programs():
        s = pressure_summary(prog)
        body = [f"{prog.name}，寄存器无限时：选择器的顺序 max live = {s['max_live']}，{s['cycles']} 周期；"
                f"表调度之后 max live = {s['max_live_sched']}，{s['cycles_sched']} 周期",
                f"{allocator} 分配，每格是 溢出指令数 / 周期数；F 是先分配后调度时的假依赖（反依赖与输出依赖）边数",
                legend,
                "  k" + "".join(f"{c:>11}" for c in "ABCDE") + "      F"]
        for r in phase_order_rows(prog, ks, allocator):
            body.append(f"{r['k']:>3}" + "".join(f"  {r[o][0]:>3} / {r[o][1]:>3}" for o in COLUMNS) + f"  {r['false_deps']:>5}")
        lines += _section(prog.name, body, markers) + [""]
    return "\n".join(lines)


def listing(code):
    return "\n".join(f"{i:3d}  {ins}" for i, ins in enumerate(code))


def selection_record():
    prog = munch_example()
    out = []
    for method, label in (("munch", "最大吞进"), ("dp", "动态规划")):
        code, cost = select(prog, method)
        out += _section(method, [f"{label}：瓦片代价之和 = {cost}", listing(code)]) + [""]
    return "\n".join(out)


def allocation_record(prog=None, k=4):
    prog = prog or dot(4)
    code, _ = select(prog)
    adj = interference(code)
    lines = _section("selected", [f"{prog.name}，指令选择（动态规划）的结果，max live = {max_live(code)}，"
                                  f"寄存器无限时 {cycles(code)} 周期", listing(code)])
    lines += _section("interference", ["干涉图（邻接表）"] + [f"{r:>3}: {' '.join(sorted(adj[r], key=_natural))}"
                                                         for r in sorted(adj, key=_natural)])
    for allocator in ("chaitin", "linear"):
        a = allocate(code, k, allocator)
        colours = " ".join(f"{r}→r{c}" for r, c in sorted(a.colour.items(), key=lambda rc: _natural(rc[0])))
        lines += _section(allocator, [f"{allocator}，k = {k}：溢出 {', '.join(a.spilled)}，{a.spill_ops} 条溢出指令，"
                                      f"{a.rounds} 轮，{cycles(a.code)} 周期", f"着色：{colours}", listing(a.code)])
    pre = list_schedule(code)
    lines += _section("pre", [f"寄存器分配之前表调度：max live = {max_live(pre)}，{cycles(pre)} 周期", listing(pre)])
    a = allocate(code, k, "chaitin")
    post = list_schedule(a.code)
    kinds = dependences(a.code[:-1])[1]
    lines += _section("post", [f"chaitin 分配（k = {k}）之后表调度：{cycles(a.code)} → {cycles(post)} 周期；"
                               f"依赖边：真依赖 {kinds['true']}，反依赖 {kinds['anti']}，输出依赖 {kinds['output']}，"
                               f"访存 {kinds['memory']}", listing(post)])
    return "\n".join(lines)


def _natural(name):
    stem = name.rstrip("0123456789")
    return (stem, int(name[len(stem):] or -1))


RECORDS = {
    "backend-selection.txt": selection_record,
    "backend-allocation.txt": allocation_record,
    "backend-phase-order.txt": phase_order_table,
}

def write_records():
    """与 record_ir.py 相同的三行出处头，再加记录正文。"""
    import datetime
    import platform
    from pathlib import Path

    folder = Path(__file__).resolve().parent / "records"
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    for name, make in RECORDS.items():
        head = ["# tool: code/compiler/backend.py (pure Python, deterministic)",
                f"# machine: {platform.machine()} {platform.system()}, Python {platform.python_version()}",
                f"# produced: {today} by `python code/compiler/backend.py`"]
        (folder / name).write_text("\n".join(head + [make().rstrip(), ""]), encoding="utf-8")
        print("wrote", f"code/compiler/records/{name}")


if __name__ == "__main__":
    write_records()
