"""排序：插入排序、快速排序（随机枢轴 + 三路划分）、快速选择、归并排序、堆排序、计数排序、基数排序与桶排序。

每个函数接受一个可选的 collections.Counter（ops），记下比较次数或基本步数；
tests/test_coding_round.py 用它在规模翻倍时数操作次数来验证复杂度，而不是计时。
比较只用 `<`：元素可以是只按键比较的记录，测试借此检查稳定性。
"""
from __future__ import annotations

import random
from collections import Counter


# --8<-- [start:insertion]
def insertion_sort(a: list, ops: Counter | None = None) -> list:
    """就地、稳定、自适应：比较次数约等于逆序对数 + n，已有序时只比较 n - 1 次，随机输入约 n²/4 次。"""
    ops = ops if ops is not None else Counter()
    for i in range(1, len(a)):
        x, j = a[i], i - 1
        while j >= 0:
            ops["cmp"] += 1
            if not x < a[j]:        # 只越过严格更大的元素：相等的不越过，所以稳定
                break
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x
    return a
# --8<-- [end:insertion]


# --8<-- [start:quick]
def partition3(a: list, lo: int, hi: int, ops: Counter, rng: random.Random) -> tuple[int, int]:
    """随机取枢轴 p，把 a[lo..hi] 就地分成 < p | == p | > p 三段，返回等于段的首尾下标 (lt, gt)。"""
    p = a[rng.randint(lo, hi)]
    lt, i, gt = lo, lo, hi          # 不变式：a[lo:lt] < p，a[lt:i] == p，a[gt+1:hi+1] > p
    while i <= gt:
        ops["cmp"] += 1
        if a[i] < p:
            a[lt], a[i] = a[i], a[lt]
            lt += 1
            i += 1
        else:
            ops["cmp"] += 1
            if p < a[i]:
                a[i], a[gt] = a[gt], a[i]
                gt -= 1             # 换过来的 a[i] 还没看过，i 不动
            else:
                i += 1
    return lt, gt


def quick_sort(a: list, ops: Counter | None = None, rng: random.Random | None = None) -> list:
    """就地、不稳定。期望 O(n log n) 次比较；重复元素多时三路划分一次就把等于段整段排除。"""
    ops = ops if ops is not None else Counter()
    rng = rng if rng is not None else random.Random(0)

    def sort(lo: int, hi: int, depth: int) -> None:
        ops["max_depth"] = max(ops["max_depth"], depth)
        while lo < hi:
            lt, gt = partition3(a, lo, hi, ops, rng)
            if lt - lo < hi - gt:   # 递归进较短的一段、循环处理较长的一段：栈深度不超过 log2(n) + 1
                sort(lo, lt - 1, depth + 1)
                lo = gt + 1
            else:
                sort(gt + 1, hi, depth + 1)
                hi = lt - 1

    sort(0, len(a) - 1, 1)
    return a
# --8<-- [end:quick]


# --8<-- [start:naive-quick]
def quick_sort_naive(a: list, ops: Counter | None = None) -> list:
    """反例：总取最后一个元素作枢轴（Lomuto 划分）、两边都递归。

    已排好序的输入每次只切掉枢轴一个元素：比较 n(n-1)/2 次，递归深度 n，
    Python 默认的递归上限（1000）在 n 约 1000 时就会抛 RecursionError。
    """
    ops = ops if ops is not None else Counter()

    def sort(lo: int, hi: int) -> None:
        if lo >= hi:
            return
        p, i = a[hi], lo
        for j in range(lo, hi):
            ops["cmp"] += 1
            if a[j] < p:
                a[i], a[j] = a[j], a[i]
                i += 1
        a[i], a[hi] = a[hi], a[i]
        sort(lo, i - 1)
        sort(i + 1, hi)

    sort(0, len(a) - 1)
    return a
# --8<-- [end:naive-quick]


# --8<-- [start:quickselect]
def quickselect(a: list, k: int, ops: Counter | None = None, rng: random.Random | None = None):
    """第 k 小的元素（k 从 0 起），会重排 a。每轮只进入包含 k 的一段：期望 O(n) 次比较，最坏 O(n²)。"""
    if not 0 <= k < len(a):
        raise IndexError(k)
    ops = ops if ops is not None else Counter()
    rng = rng if rng is not None else random.Random(0)
    lo, hi = 0, len(a) - 1
    while True:
        lt, gt = partition3(a, lo, hi, ops, rng)
        if k < lt:
            hi = lt - 1
        elif k > gt:
            lo = gt + 1
        else:
            return a[k]             # k 落在等于段：就是枢轴
# --8<-- [end:quickselect]


# --8<-- [start:merge]
def merge_sort(a: list, ops: Counter | None = None) -> list:
    """返回新列表。稳定；最坏也只比较不超过 n*ceil(log2 n) 次；合并要 O(n) 的额外空间。"""
    ops = ops if ops is not None else Counter()
    if len(a) <= 1:
        return list(a)
    mid = len(a) // 2
    left, right = merge_sort(a[:mid], ops), merge_sort(a[mid:], ops)
    out, i, j = [], 0, 0
    while i < len(left) and j < len(right):
        ops["cmp"] += 1
        if right[j] < left[i]:      # 右边严格更小才先取右边；相等时先取左边，所以稳定
            out.append(right[j])
            j += 1
        else:
            out.append(left[i])
            i += 1
    out.extend(left[i:])
    out.extend(right[j:])
    return out
# --8<-- [end:merge]


# --8<-- [start:heap]
def _sift_down(a: list, i: int, n: int, ops: Counter) -> None:
    """最大堆的下沉：与较大的孩子比较，比它小就交换，直到不小于两个孩子或到达叶子。"""
    while (c := 2 * i + 1) < n:
        if c + 1 < n:
            ops["cmp"] += 1
            if a[c] < a[c + 1]:
                c += 1
        ops["cmp"] += 1
        if not a[i] < a[c]:
            return
        a[i], a[c] = a[c], a[i]
        i = c


def heap_sort(a: list, ops: Counter | None = None) -> list:
    """就地、不稳定，最坏 O(n log n)：先自底向上建最大堆（O(n)），再反复把堆顶换到末尾并下沉。"""
    ops = ops if ops is not None else Counter()
    n = len(a)
    for i in range(n // 2 - 1, -1, -1):
        _sift_down(a, i, n, ops)
    for end in range(n - 1, 0, -1):
        a[0], a[end] = a[end], a[0]   # 这次远距离交换会越过相等的元素，所以不稳定
        _sift_down(a, 0, end, ops)
    return a
# --8<-- [end:heap]


# --8<-- [start:counting]
def counting_sort(a: list, key=lambda x: x, ops: Counter | None = None) -> list:
    """稳定的计数排序：键是整数、取值跨度 k = max - min + 1。O(n + k) 时间，O(n + k) 额外空间，不做比较。"""
    ops = ops if ops is not None else Counter()
    if not a:
        return []
    keys = [key(x) for x in a]
    lo = min(keys)
    count = [0] * (max(keys) - lo + 1)
    for k in keys:
        count[k - lo] += 1
        ops["step"] += 1
    for v in range(1, len(count)):    # 前缀和：count[v] = 键不大于 lo + v 的元素个数 = 该键最后一个元素的位置 + 1
        count[v] += count[v - 1]
        ops["step"] += 1
    out = [None] * len(a)
    for i in range(len(a) - 1, -1, -1):   # 倒序放：同键元素里靠后的放到靠后的位置，所以稳定
        count[keys[i] - lo] -= 1
        out[count[keys[i] - lo]] = a[i]
        ops["step"] += 1
    return out
# --8<-- [end:counting]


# --8<-- [start:radix]
def radix_sort(a: list[int], base: int = 256, ops: Counter | None = None) -> list[int]:
    """LSD 基数排序：从最低位到最高位，每一位做一次稳定的计数排序。d 位时 O(d (n + base))。"""
    ops = ops if ops is not None else Counter()
    if not a:
        return []
    lo = min(a)
    xs = [x - lo for x in a]          # 整体平移成非负数，负数也能按位排
    exp, top = 1, max(xs)
    while exp <= top:
        xs = counting_sort(xs, key=lambda x: x // exp % base, ops=ops)   # 每一位必须稳定，低位的顺序才不被打乱
        exp *= base
        ops["pass"] += 1
    return [x + lo for x in xs]
# --8<-- [end:radix]


# --8<-- [start:bucket]
def bucket_sort(a: list[float], ops: Counter | None = None) -> list[float]:
    """[0, 1) 上的浮点数：分到 n 个桶，桶内插入排序。均匀分布时期望 O(n)，全挤进一个桶时退化为 O(n²)。"""
    ops = ops if ops is not None else Counter()
    n = len(a)
    buckets: list[list[float]] = [[] for _ in range(n)]
    for x in a:
        buckets[min(int(x * n), n - 1)].append(x)   # x * n 可能因舍入恰好等于 n
    out: list[float] = []
    for b in buckets:
        out.extend(insertion_sort(b, ops))
    return out
# --8<-- [end:bucket]
