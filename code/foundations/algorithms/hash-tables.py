"""两种冲突处理的哈希表：拉链法（separate chaining）与线性探测的开放寻址（open addressing）。

两者都数“探测”（检查一个槽位或比较一个键算一次）与扩容时搬动的元素数，
tests/test_coding_round.py 拿测出的平均探测次数对照负载因子的公式，并与 dict 逐次对照结果。
"""
from __future__ import annotations

import random
from collections import Counter


# --8<-- [start:chaining]
class ChainedMap:
    """每个桶一个列表。负载因子 alpha = size / 桶数，超过 max_load 就把桶数翻倍并重新散列。"""

    def __init__(self, capacity: int = 8, max_load: float = 1.0):
        self.buckets: list[list] = [[] for _ in range(capacity)]
        self.size, self.max_load, self.ops = 0, max_load, Counter()

    def _bucket(self, key) -> list:
        return self.buckets[hash(key) % len(self.buckets)]

    def get(self, key, default=None):
        for k, v in self._bucket(key):
            self.ops["probe"] += 1        # 每比较一个键算一次探测：查找失败平均比较 alpha 次
            if k == key:
                return v
        return default

    def put(self, key, value) -> None:
        b = self._bucket(key)
        for i, (k, _) in enumerate(b):
            self.ops["probe"] += 1
            if k == key:
                b[i] = (key, value)
                return
        b.append((key, value))
        self.size += 1
        if self.size > self.max_load * len(self.buckets):
            self._resize(2 * len(self.buckets))

    def delete(self, key) -> bool:
        b = self._bucket(key)
        for i, (k, _) in enumerate(b):
            self.ops["probe"] += 1
            if k == key:
                b.pop(i)
                self.size -= 1
                return True
        return False

    def _resize(self, m: int) -> None:    # 单次 O(n)；桶数按倍数增长，摊到每次插入上是 O(1)
        old, self.buckets = self.buckets, [[] for _ in range(m)]
        for b in old:
            for k, v in b:
                self.buckets[hash(k) % m].append((k, v))
                self.ops["move"] += 1
# --8<-- [end:chaining]


# --8<-- [start:probing]
EMPTY, TOMBSTONE = object(), object()


class LinearProbingMap:
    """键直接放在数组里，冲突时顺次看下一个槽位。删除留下墓碑（tombstone），不能直接置空。"""

    def __init__(self, capacity: int = 8, max_load: float = 2 / 3):
        self.keys: list = [EMPTY] * capacity
        self.vals: list = [None] * capacity
        self.size = 0        # 活着的键
        self.used = 0        # 活着的键 + 墓碑：探测链只会在真正的空槽停下，所以扩容看的是它
        self.max_load, self.ops = max_load, Counter()

    def _find(self, key) -> tuple[int, bool]:
        """(下标, 是否找到)。没找到时给出可插入的位置：路上第一个墓碑，没有就是停下的那个空槽。"""
        m = len(self.keys)
        i, tomb = hash(key) % m, -1
        while True:
            self.ops["probe"] += 1
            k = self.keys[i]
            if k is EMPTY:
                return (tomb if tomb >= 0 else i), False
            if k is TOMBSTONE:
                tomb = i if tomb < 0 else tomb
            elif k == key:
                return i, True
            i = (i + 1) % m

    def get(self, key, default=None):
        i, found = self._find(key)
        return self.vals[i] if found else default

    def put(self, key, value) -> None:
        i, found = self._find(key)
        if not found:
            if self.keys[i] is EMPTY:
                self.used += 1
            self.keys[i] = key
            self.size += 1
        self.vals[i] = value
        if self.used > self.max_load * len(self.keys):
            m = len(self.keys)    # 墓碑多、活键少时同样大小重建一次就够（清掉墓碑）
            self._resize(2 * m if self.size > self.max_load * m / 2 else m)

    def delete(self, key) -> bool:
        i, found = self._find(key)
        if found:
            self.keys[i], self.vals[i] = TOMBSTONE, None   # 置成 EMPTY 会截断经过这里的探测链
            self.size -= 1
        return found

    def _resize(self, m: int) -> None:
        old = [(k, v) for k, v in zip(self.keys, self.vals) if k is not EMPTY and k is not TOMBSTONE]
        self.keys, self.vals, self.size, self.used = [EMPTY] * m, [None] * m, 0, 0
        for k, v in old:
            self.put(k, v)
            self.ops["move"] += 1
# --8<-- [end:probing]


# --8<-- [start:measure]
def average_probes(table_cls, m: int, alpha: float, seed: int = 0) -> tuple[float, float]:
    """m 个槽位装到负载因子 alpha（不扩容），返回（查找成功、查找失败）的平均探测次数。

    键是随机的 60 位整数：CPython 对小于 2**61 - 1 的正整数 hash(x) == x，对 m 取模后近似均匀。
    """
    rng = random.Random(seed)
    t = table_cls(capacity=m, max_load=float("inf"))   # 关掉扩容，负载因子才停在 alpha
    keys = rng.sample(range(1 << 60), int(alpha * m) + m)
    inside, outside = keys[: int(alpha * m)], keys[int(alpha * m):]
    for k in inside:
        t.put(k, k)
    t.ops.clear()
    for k in inside:
        assert t.get(k) == k
    hit = t.ops["probe"] / len(inside)
    t.ops.clear()
    for k in outside:
        assert t.get(k) is None
    return hit, t.ops["probe"] / len(outside)
# --8<-- [end:measure]
