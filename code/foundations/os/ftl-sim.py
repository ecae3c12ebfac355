"""SSD 的闪存转换层（FTL）：页映射、日志式追加写、垃圾回收（GC）与写放大（write amplification）。

闪存按页（几 KiB）写、按块（几百页）擦，页写过之后不能原地改写。FTL 因此把每次写追加到一个打开的块里，
在映射表里把逻辑页指向新位置、把旧位置标成无效；空闲块不够时挑一个块，把其中仍有效的页搬走、擦掉整块。
搬运是设备自己多写的量：写放大 WA = (主机写 + GC 搬运) / 主机写。LFS 的段清理（segment cleaning）是同一回事。
"""
from __future__ import annotations

import math
import random
from collections import deque


# --8<-- [start:ftl]
class FTL:
    def __init__(self, blocks: int, pages_per_block: int, logical_pages: int, policy: str = "greedy"):
        assert logical_pages <= (blocks - 3) * pages_per_block, "需要留出几块做 GC 的周转"
        self.P, self.policy = pages_per_block, policy
        self.l2p = [-1] * logical_pages               # 逻辑页 → 物理页（-1：未写过或已 TRIM）
        self.p2l = [-1] * (blocks * pages_per_block)  # 物理页 → 逻辑页（-1：空闲或无效）
        self.valid = [0] * blocks                     # 每块里的有效页数
        self.free = deque(range(blocks))              # 已擦除、可以写的块
        self.sealed: deque[int] = deque()             # 写满的块，按写满的先后排队
        self.open, self.wp = self.free.popleft(), 0   # 当前追加写的块与写指针
        self.host = self.copies = self.erases = 0

    def _append(self, lpn: int) -> None:
        if self.wp == self.P:                         # 当前块写满：封存，换一块空的
            self.sealed.append(self.open)
            self.open, self.wp = self.free.popleft(), 0
        ppn = self.open * self.P + self.wp
        self.wp += 1
        self.p2l[ppn], self.l2p[lpn] = lpn, ppn
        self.valid[self.open] += 1

    def _invalidate(self, lpn: int) -> None:
        ppn = self.l2p[lpn]
        if ppn >= 0:
            self.p2l[ppn] = -1
            self.valid[ppn // self.P] -= 1
            self.l2p[lpn] = -1

    def write(self, lpn: int) -> None:
        """主机写一个逻辑页：不能原地改写，旧位置作废，新数据追加到日志末尾。"""
        self._invalidate(lpn)
        self._append(lpn)
        self.host += 1
        while len(self.free) < 2:                     # 空闲块只剩一块时回收
            self._collect()

    def trim(self, lpn: int) -> None:
        """TRIM/discard：文件系统告诉设备这个逻辑页不再有用，GC 就不必搬它。"""
        self._invalidate(lpn)

    def _collect(self) -> None:
        if self.policy == "fifo":                     # 最老的块（LFS 式的循环日志）
            victim = self.sealed.popleft()
        else:                                         # 贪心：有效页最少的块，搬得最少
            victim = min(self.sealed, key=self.valid.__getitem__)
            self.sealed.remove(victim)
        for ppn in range(victim * self.P, (victim + 1) * self.P):
            lpn = self.p2l[ppn]
            if lpn >= 0:                              # 仍有效：搬到日志末尾
                self._invalidate(lpn)
                self._append(lpn)
                self.copies += 1
        self.erases += 1
        self.free.append(victim)
# --8<-- [end:ftl]


# --8<-- [start:experiment]
def write_amplification(spare: float, policy: str = "greedy", workload: str = "uniform", trimmed: float = 0.0,
                        trim: bool = True, blocks: int = 256, pages_per_block: int = 32, seed: int = 0) -> float:
    """spare：超额配置（over-provisioning），物理容量比逻辑容量多出的比例。先顺序写满，预热后再统计 WA。
    trimmed：写满之后删掉的那部分逻辑空间（比例）；trim=False 时设备不知道它们已被删除。"""
    physical = blocks * pages_per_block
    logical = int(physical / (1 + spare))
    ftl = FTL(blocks, pages_per_block, logical, policy)
    rng = random.Random(seed)
    for lpn in range(logical):                        # 顺序写满整个逻辑空间
        ftl.write(lpn)
    live = logical - int(logical * trimmed)
    if trim:
        for lpn in range(live, logical):              # 被删除的文件占的逻辑页
            ftl.trim(lpn)

    def next_page(i: int) -> int:
        return i % live if workload == "sequential" else rng.randrange(live)

    for i in range(5 * live):                         # 预热：进入稳态
        ftl.write(next_page(i))
    host0, copies0 = ftl.host, ftl.copies
    for i in range(10 * live):
        ftl.write(next_page(i))
    return (ftl.host - host0 + ftl.copies - copies0) / (ftl.host - host0)


def fifo_formula(alpha: float) -> float:
    """均匀随机写、按 FIFO 回收时的稳态写放大，alpha = 日志能用的物理页数 / 逻辑页数。
    一个页写入后，日志要再前进一整圈才轮到回收它，这一圈里主机写占 1-u（u 是被回收块里的有效比例），
    每次主机写以 1/逻辑页数 的概率作废它，所以 u = (1 - 1/L)^(αL(1-u)) ≈ exp(-α(1-u))，WA = 1/(1-u)。"""
    lo, hi = 0.0, 1 - 1e-12                           # 在 (0, 1) 里找非平凡的根（u = 1 总是一个根）
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid - math.exp(-alpha * (1 - mid)) < 0:
            lo = mid
        else:
            hi = mid
    return 1 / (1 - lo)


def log_alpha(spare: float, blocks: int = 256, pages_per_block: int = 32) -> float:
    """模拟里约有 2 块不在日志里（GC 周转用的空闲块和正在写的块），扣掉它们才是日志真正能用的容量。"""
    physical = blocks * pages_per_block
    return (physical - 2 * pages_per_block) / int(physical / (1 + spare))
# --8<-- [end:experiment]


SPARES = (0.07, 0.15, 0.28, 0.50)  # 7 %：GB 与 GiB 之差，消费级盘常见；28 %：企业级盘常见的档位


def table() -> list[tuple[float, float, float, float, float]]:
    """(超额配置, 日志的 α, FIFO 公式, FIFO 模拟, 贪心模拟)，页面上的表格由测试对照这里重算。"""
    return [(s, log_alpha(s), fifo_formula(log_alpha(s)), write_amplification(s, "fifo"), write_amplification(s, "greedy"))
            for s in SPARES]


if __name__ == "__main__":
    for s, a, f, sim_f, sim_g in table():
        print(f"spare {s:.0%}: alpha {a:.3f}, formula {f:.2f}, fifo {sim_f:.2f}, greedy {sim_g:.2f}")
    print("sequential:", write_amplification(0.07, "greedy", "sequential"))
    print("25% deleted, trim:", write_amplification(0.07, trimmed=0.25), "no trim:", write_amplification(0.07, trimmed=0.25, trim=False))
