"""二分查找及其边界变体：闭区间查找、lower_bound / upper_bound（插入点与左右边界）、旋转数组、二分答案。

ops（collections.Counter）记循环的轮数；测试断言轮数不超过 floor(log2 n) + 1，并与 bisect 对照。
"""
from __future__ import annotations

from collections import Counter


# --8<-- [start:closed]
def binary_search(a: list, x, ops: Counter | None = None) -> int:
    """闭区间 [lo, hi] 写法：找到返回某个等于 x 的下标，找不到返回 -1。"""
    ops = ops if ops is not None else Counter()
    lo, hi = 0, len(a) - 1
    while lo <= hi:                   # 闭区间：lo == hi 时还剩一个元素，要进循环
        ops["iter"] += 1
        mid = lo + (hi - lo) // 2     # C++/Java 的 int 里 (lo + hi) / 2 会溢出；Python 整数不会，但习惯写成这样
        if a[mid] < x:
            lo = mid + 1              # mid 已排除，两端都要跨过 mid，否则可能死循环
        elif x < a[mid]:
            hi = mid - 1
        else:
            return mid
    return -1
# --8<-- [end:closed]


# --8<-- [start:bounds]
def lower_bound(a: list, x, ops: Counter | None = None) -> int:
    """第一个 >= x 的下标，也就是 x 的插入点（插在所有等于 x 的元素之前）；都 < x 时返回 len(a)。"""
    ops = ops if ops is not None else Counter()
    lo, hi = 0, len(a)                # 左闭右开 [lo, hi)：答案始终在 [lo, hi] 里
    while lo < hi:
        ops["iter"] += 1
        mid = lo + (hi - lo) // 2     # mid < hi，所以 a[mid] 一定合法
        if a[mid] < x:
            lo = mid + 1              # a[mid] 及其左边都 < x
        else:
            hi = mid                  # a[mid] >= x：mid 可能就是答案，保留它
    return lo


def upper_bound(a: list, x, ops: Counter | None = None) -> int:
    """第一个 > x 的下标（插在所有等于 x 的元素之后）。与 lower_bound 只差一个比较方向。"""
    ops = ops if ops is not None else Counter()
    lo, hi = 0, len(a)
    while lo < hi:
        ops["iter"] += 1
        mid = lo + (hi - lo) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1              # a[mid] <= x
    return lo


def search_range(a: list, x) -> tuple[int, int]:
    """x 的左右边界（第一个与最后一个等于 x 的下标）；不存在时返回 (-1, -1)。"""
    first = lower_bound(a, x)
    if first == len(a) or a[first] != x:
        return -1, -1
    return first, upper_bound(a, x) - 1
# --8<-- [end:bounds]


# --8<-- [start:rotated]
def search_rotated(a: list, x, ops: Counter | None = None) -> int:
    """元素互不相同的升序数组在某处旋转过（如 [4,5,6,0,1,2]）。任取 mid，[lo,mid] 与 [mid,hi] 至少一段有序。"""
    ops = ops if ops is not None else Counter()
    lo, hi = 0, len(a) - 1
    while lo <= hi:
        ops["iter"] += 1
        mid = lo + (hi - lo) // 2
        if a[mid] == x:
            return mid
        if a[lo] <= a[mid]:           # 左段有序：x 在它的值域里就去左段
            if a[lo] <= x < a[mid]:
                hi = mid - 1
            else:
                lo = mid + 1
        else:                         # 右段有序
            if a[mid] < x <= a[hi]:
                lo = mid + 1
            else:
                hi = mid - 1
    return -1
# --8<-- [end:rotated]


# --8<-- [start:answer]
def min_ship_capacity(weights: list[int], days: int, ops: Counter | None = None) -> int:
    """按顺序装船、每天一船，days 天内运完的最小载重。可行性对载重单调（c 可行则 c + 1 也可行），所以二分答案。"""
    ops = ops if ops is not None else Counter()

    def feasible(cap: int) -> bool:   # 贪心装船，O(n)
        ops["check"] += 1
        need, load = 1, 0
        for w in weights:
            if load + w > cap:
                need, load = need + 1, 0
            load += w
        return need <= days

    lo, hi = max(weights), sum(weights)   # lo：装得下最重的一件；hi：一天全运完，一定可行
    while lo < hi:                        # 找第一个可行的载重，就是对谓词做 lower_bound
        mid = lo + (hi - lo) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
# --8<-- [end:answer]
