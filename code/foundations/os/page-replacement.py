"""页面置换策略的缺页数：OPT（Belady 最优）、FIFO、LRU 与 Clock（二次机会），以及 FIFO 的 Belady 异常。"""
from __future__ import annotations

from collections import OrderedDict, deque


# --8<-- [start:policies]
def faults(refs: list[int], frames: int, policy: str) -> int:
    """在 frames 个物理页框上按访问序列 refs 运行，返回缺页次数（冷启动的缺页也计入）。"""
    count = 0
    if policy == "fifo":
        resident, order = set(), deque()
        for page in refs:
            if page in resident:
                continue
            count += 1
            if len(resident) == frames:
                resident.discard(order.popleft())       # 换出最早进来的，不管它是否常用
            resident.add(page)
            order.append(page)
    elif policy == "lru":
        lru: OrderedDict[int, None] = OrderedDict()
        for page in refs:
            if page in lru:
                lru.move_to_end(page)                   # 命中：变成最近使用
                continue
            count += 1
            if len(lru) == frames:
                lru.popitem(last=False)                 # 换出最久未使用的
            lru[page] = None
    elif policy == "clock":                             # 硬件只给一个“访问位”时对 LRU 的近似
        slots: list[int | None] = [None] * frames
        ref_bit = [False] * frames
        hand = 0
        for page in refs:
            if page in slots:
                ref_bit[slots.index(page)] = True       # MMU 在访问时置位
                continue
            count += 1
            while ref_bit[hand]:                        # 访问位为 1：清零，给第二次机会
                ref_bit[hand] = False
                hand = (hand + 1) % frames
            slots[hand], ref_bit[hand] = page, True
            hand = (hand + 1) % frames
    elif policy == "opt":                               # 换出“下一次使用最远”的页：需要预知未来，只作基准
        resident: set[int] = set()
        for i, page in enumerate(refs):
            if page in resident:
                continue
            count += 1
            if len(resident) == frames:
                def next_use(p: int) -> int:
                    try:
                        return refs.index(p, i + 1)
                    except ValueError:
                        return len(refs)                # 以后不再用：最佳的换出对象
                resident.discard(max(resident, key=next_use))
            resident.add(page)
    else:
        raise ValueError(policy)
    return count
# --8<-- [end:policies]
