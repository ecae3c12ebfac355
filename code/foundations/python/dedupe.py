"""列表去重的几种写法：保序、不保序、元素不可哈希时的退路。"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any


# --8<-- [start:fast]
def dedupe_fast(xs: Iterable[Hashable]) -> list:
    """保留首次出现的顺序，期望 O(n)。依赖 dict 保持插入顺序（3.7 起是语言保证）。"""
    return list(dict.fromkeys(xs))


def dedupe_unordered(xs: Iterable[Hashable]) -> list:
    """期望 O(n)，但结果顺序由哈希决定，不要依赖它。"""
    return list(set(xs))
# --8<-- [end:fast]


# --8<-- [start:general]
def dedupe(xs: Iterable[Any], key: Callable[[Any], Any] | None = None) -> list:
    """保序去重，元素可以不可哈希。

    可哈希的元素（或 key 的结果）进 set，每个 O(1)；不可哈希的退回到逐个比较 ==，
    代价是 O(u)（u 为已见过的不可哈希元素数），全是不可哈希元素时总代价 O(n^2)。
    """
    seen: set = set()
    seen_unhashable: list = []
    out = []
    for x in xs:
        k = x if key is None else key(x)
        try:
            if k in seen:
                continue
            seen.add(k)
        except TypeError:  # list、dict、set 等不可哈希
            if k in seen_unhashable:  # 线性扫描，用 == 比较
                continue
            seen_unhashable.append(k)
        out.append(x)
    return out
# --8<-- [end:general]


def dedupe_sorted(xs: list) -> list:
    """先排序再跳过相邻重复：O(n log n)，只要求元素可比较，不要求可哈希；不保留原顺序。"""
    out: list = []
    for x in sorted(xs):
        if not out or out[-1] != x:
            out.append(x)
    return out


if __name__ == "__main__":
    assert dedupe_fast([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert dedupe([[1, 2], [3], [1, 2], 4, 4]) == [[1, 2], [3], 4]
    # 1、1.0、True 相等且哈希相同，在 dict/set 里是同一个键：只留下第一个
    assert dedupe_fast([1, 1.0, True]) == [1]
    # 按自定义键去重：忽略大小写，保留第一次出现的写法
    assert dedupe(["GPU", "gpu", "Cpu", "CPU"], key=str.lower) == ["GPU", "Cpu"]
    assert dedupe_sorted([[2], [1], [2]]) == [[1], [2]]
    print("ok")
