"""贪心：区间调度（最多不重叠区间）、最少会议室、分数背包、最大容量（双指针）、最大切分乘积、贪心找零的反例。

区间都是左闭右开 [s, e)：e1 <= s2 的两个区间不冲突。ops（collections.Counter）记主循环的轮数。
"""
from __future__ import annotations

import heapq
from collections import Counter


# --8<-- [start:intervals]
def max_non_overlapping(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """按结束时间排序，能选就选。交换论证：任一最优解的第一个区间都能换成结束最早的那个而不冲突。O(n log n)。"""
    chosen, end = [], float("-inf")
    for s, e in sorted(intervals, key=lambda iv: iv[1]):
        if s >= end:                  # 与上一个选中的区间不冲突
            chosen.append((s, e))
            end = e
    return chosen


def min_meeting_rooms(intervals: list[tuple[int, int]]) -> int:
    """按开始时间排序，最小堆存各会议室的结束时间；最早空出的房间够用就复用它。答案等于同一时刻最多的重叠数。"""
    ends: list[int] = []
    for s, e in sorted(intervals):
        if ends and ends[0] <= s:
            heapq.heapreplace(ends, e)    # 复用最早结束的房间
        else:
            heapq.heappush(ends, e)       # 所有房间都占着：开一间新的
    return len(ends)
# --8<-- [end:intervals]


# --8<-- [start:fractional]
def fractional_knapsack(wgt: list[int], val: list[int], cap: int) -> float:
    """物品可以切开：按单位重量的价值从高到低装，最后一件装一部分。O(n log n)。"""
    total = 0.0
    for w, v in sorted(zip(wgt, val), key=lambda it: it[1] / it[0], reverse=True):
        take = min(w, cap)
        total += v * take / w
        cap -= take
        if cap == 0:
            break
    return total
# --8<-- [end:fractional]


# --8<-- [start:capacity]
def max_capacity(ht: list[int], ops: Counter | None = None) -> int:
    """两块隔板 i < j 围成的容量 min(ht[i], ht[j]) * (j - i) 的最大值。双指针每步移动较矮的一侧，O(n)。

    为什么可以丢掉矮的一侧：设 ht[i] <= ht[j]，以 i 为一端、另一端在 (i, j) 里的任何隔板，宽度更小、高度不超过 ht[i]，
    都不会比当前的 (i, j) 大，所以 i 已不可能参与更优解。
    """
    ops = ops if ops is not None else Counter()
    i, j, best = 0, len(ht) - 1, 0
    while i < j:
        ops["iter"] += 1
        best = max(best, min(ht[i], ht[j]) * (j - i))
        if ht[i] < ht[j]:
            i += 1
        else:
            j -= 1
    return best
# --8<-- [end:capacity]


# --8<-- [start:cutting]
def max_product_cutting(n: int) -> int:
    """把 n（n >= 2）切成至少两段正整数，乘积最大。尽量切 3；余 1 时把一个 3 + 1 换成 2 + 2；余 2 时乘 2。"""
    if n <= 3:
        return n - 1                  # 必须切：2 = 1 + 1，3 = 1 + 2
    q, r = divmod(n, 3)
    if r == 1:
        return 3 ** (q - 1) * 4
    if r == 2:
        return 3 ** q * 2
    return 3 ** q
# --8<-- [end:cutting]


# --8<-- [start:greedy-coins]
def coin_change_greedy(coins: list[int], amount: int) -> int:
    """每次取不超过剩余金额的最大面值。对 1、5、10、25 这样的“规范”币制是最优的；对 1、3、4 凑 6 会给出 3 枚（4+1+1），最优是 2 枚（3+3）。"""
    count = 0
    for coin in sorted(coins, reverse=True):
        k, amount = divmod(amount, coin)
        count += k
    return count if amount == 0 else -1
# --8<-- [end:greedy-coins]
