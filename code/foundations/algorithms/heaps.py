"""堆：数组表示的二叉最小堆（上浮、下沉、O(n) 建堆），合并 k 个有序链表，数据流的中位数（双堆）。

ops（collections.Counter）记元素比较次数；测试断言建堆不超过 2n 次比较、合并 k 路约 N log k 次。
"""
from __future__ import annotations

import heapq
from collections import Counter


# --8<-- [start:heap]
class MinHeap:
    """完全二叉树按层存进数组：下标 i 的孩子是 2i+1 与 2i+2，父节点是 (i-1)//2，不需要指针。"""

    def __init__(self, items=(), ops: Counter | None = None):
        self.a = list(items)
        self.ops = ops if ops is not None else Counter()
        for i in range(len(self.a) // 2 - 1, -1, -1):   # 自底向上建堆：从最后一个非叶节点起逐个下沉，O(n)
            self._down(i)

    def __len__(self) -> int:
        return len(self.a)

    def peek(self):
        return self.a[0]

    def push(self, x) -> None:
        self.a.append(x)
        self._up(len(self.a) - 1)

    def pop(self):
        a = self.a
        a[0], a[-1] = a[-1], a[0]     # 末尾元素放到堆顶再下沉，删除的是数组末尾：O(1) 而不是 O(n)
        top = a.pop()
        if a:
            self._down(0)
        return top

    def replace(self, x):
        """弹出堆顶并放入 x，只下沉一次（heapq.heapreplace 的做法）。"""
        top, self.a[0] = self.a[0], x
        self._down(0)
        return top

    def _up(self, i: int) -> None:
        a = self.a
        while i > 0:
            p = (i - 1) // 2
            self.ops["cmp"] += 1
            if not a[i] < a[p]:
                break
            a[i], a[p] = a[p], a[i]
            i = p

    def _down(self, i: int) -> None:
        a, n = self.a, len(self.a)
        while (c := 2 * i + 1) < n:
            if c + 1 < n:
                self.ops["cmp"] += 1
                if a[c + 1] < a[c]:
                    c += 1
            self.ops["cmp"] += 1
            if not a[c] < a[i]:
                break
            a[i], a[c] = a[c], a[i]
            i = c
# --8<-- [end:heap]


# --8<-- [start:merge-k]
def merge_k_sorted(lists: list[list], ops: Counter | None = None) -> list:
    """堆里放每一路的当前头元素 (值, 第几路, 下标)：弹出最小者，再放入它那一路的下一个。O(N log k)，N 为总元素数。"""
    heap = MinHeap([(lst[0], i, 0) for i, lst in enumerate(lists) if lst], ops)
    out = []
    while heap:
        v, i, j = heap.peek()
        out.append(v)
        if j + 1 < len(lists[i]):
            heap.replace((lists[i][j + 1], i, j + 1))   # 相等的值按路号排，元组永远比不到第三项之外
        else:
            heap.pop()
    return out
# --8<-- [end:merge-k]


# --8<-- [start:median]
class RunningMedian:
    """low 是较小一半（用取负的最小堆当最大堆），high 是较大一半；保持 len(low) - len(high) ∈ {0, 1}。"""

    def __init__(self):
        self.low: list = []
        self.high: list = []

    def add(self, x) -> None:     # 每次 O(log n)
        heapq.heappush(self.low, -x)
        heapq.heappush(self.high, -heapq.heappop(self.low))   # 较小一半的最大者移到较大一半：low 全部 <= high
        if len(self.high) > len(self.low):
            heapq.heappush(self.low, -heapq.heappop(self.high))

    def median(self) -> float:    # O(1)
        if len(self.low) > len(self.high):
            return -self.low[0]
        return (-self.low[0] + self.high[0]) / 2
# --8<-- [end:median]
