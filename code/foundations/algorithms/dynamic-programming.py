"""动态规划：0-1 背包（二维表与一维倒序）、完全背包、零钱兑换（最少硬币、组合数与排列数）、编辑距离（二维与滚动数组）、
最长递增子序列（O(n²) 与 O(n log n)）。

ops（collections.Counter）的 "state" 记计算过的状态数、"cmp" 记比较次数；测试据此验证 O(n·cap)、O(mn)、O(n²) 与 O(n log n)。
"""
from __future__ import annotations

from collections import Counter


# --8<-- [start:knapsack]
def knapsack_01(wgt: list[int], val: list[int], cap: int, ops: Counter | None = None) -> int:
    """dp[i][c]：只用前 i 件物品、容量 c 时的最大价值。第 i 件要么不放（dp[i-1][c]），要么放（dp[i-1][c-w] + v）。"""
    ops = ops if ops is not None else Counter()
    n = len(wgt)
    dp = [[0] * (cap + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        w, v = wgt[i - 1], val[i - 1]
        for c in range(cap + 1):
            ops["state"] += 1
            dp[i][c] = dp[i - 1][c]
            if w <= c:
                dp[i][c] = max(dp[i][c], dp[i - 1][c - w] + v)
    return dp[n][cap]


def knapsack_01_1d(wgt: list[int], val: list[int], cap: int) -> int:
    """空间压缩到一行。c 必须倒序：dp[c - w] 此时还是上一行（第 i - 1 件）的值，每件物品只被用一次。"""
    dp = [0] * (cap + 1)
    for w, v in zip(wgt, val):
        for c in range(cap, w - 1, -1):
            dp[c] = max(dp[c], dp[c - w] + v)
    return dp[cap]


def knapsack_unbounded(wgt: list[int], val: list[int], cap: int) -> int:
    """完全背包：每件可放任意次。转移变成 dp[i][c - w] + v（放了还能再放同一件），一维时 c 正序。"""
    dp = [0] * (cap + 1)
    for w, v in zip(wgt, val):
        for c in range(w, cap + 1):
            dp[c] = max(dp[c], dp[c - w] + v)
    return dp[cap]
# --8<-- [end:knapsack]


# --8<-- [start:coins]
def coin_change_min(coins: list[int], amount: int) -> int:
    """凑出 amount 的最少硬币数，凑不出返回 -1。完全背包的“最小化”版本：dp[a] = min(dp[a], dp[a - coin] + 1)。"""
    INF = amount + 1                  # 任何解最多 amount 枚（面值至少 1），amount + 1 就是“不可能”
    dp = [0] + [INF] * amount
    for coin in coins:
        for a in range(coin, amount + 1):
            dp[a] = min(dp[a], dp[a - coin] + 1)
    return dp[amount] if dp[amount] < INF else -1


def coin_change_ways(coins: list[int], amount: int) -> int:
    """组合数（{1,2} 与 {2,1} 算一种）：硬币在外层循环，每种硬币只在“轮到它”时加入，顺序被固定。"""
    dp = [1] + [0] * amount
    for coin in coins:
        for a in range(coin, amount + 1):
            dp[a] += dp[a - coin]
    return dp[amount]


def coin_change_sequences(coins: list[int], amount: int) -> int:
    """把两层循环交换，算的就变成排列数（1+2 与 2+1 算两种）：这是写组合数时最常见的错。"""
    dp = [1] + [0] * amount
    for a in range(1, amount + 1):
        for coin in coins:
            if coin <= a:
                dp[a] += dp[a - coin]
    return dp[amount]
# --8<-- [end:coins]


# --8<-- [start:edit]
def edit_distance(s: str, t: str, ops: Counter | None = None) -> int:
    """dp[i][j]：s[:i] 变成 t[:j] 的最少操作数。末字符相同就不花钱，否则取插入、删除、替换三者最小再加 1。O(mn)。"""
    ops = ops if ops is not None else Counter()
    n, m = len(s), len(t)
    dp = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        dp[i][0] = i                  # 删光 i 个字符
    for j in range(m + 1):
        dp[0][j] = j                  # 插入 j 个字符
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            ops["state"] += 1
            if s[i - 1] == t[j - 1]:
                dp[i][j] = dp[i - 1][j - 1]
            else:                     # 插入 t[j-1]、删除 s[i-1]、把 s[i-1] 替换成 t[j-1]
                dp[i][j] = 1 + min(dp[i][j - 1], dp[i - 1][j], dp[i - 1][j - 1])
    return dp[n][m]


def edit_distance_1d(s: str, t: str) -> int:
    """滚动数组：dp[j] 正序更新时，左上角 dp[i-1][j-1] 已被覆盖，先用 leftup 存下来。O(m) 空间。"""
    dp = list(range(len(t) + 1))
    for i in range(1, len(s) + 1):
        leftup, dp[0] = dp[0], i
        for j in range(1, len(t) + 1):
            up = dp[j]                # 覆盖前是 dp[i-1][j]，下一格要把它当左上角
            dp[j] = leftup if s[i - 1] == t[j - 1] else 1 + min(dp[j - 1], up, leftup)
            leftup = up
    return dp[-1]
# --8<-- [end:edit]


# --8<-- [start:lis]
def lis_quadratic(nums: list, ops: Counter | None = None) -> int:
    """dp[i]：以 nums[i] 结尾的最长严格递增子序列长度 = 1 + max(dp[j] | j < i, nums[j] < nums[i])。O(n²)。"""
    ops = ops if ops is not None else Counter()
    dp = [1] * len(nums)
    for i in range(len(nums)):
        for j in range(i):
            ops["cmp"] += 1
            if nums[j] < nums[i]:
                dp[i] = max(dp[i], dp[j] + 1)
    return max(dp, default=0)


def lis_patience(nums: list, ops: Counter | None = None) -> int:
    """tails[k]：长度为 k + 1 的递增子序列里最小的结尾。tails 严格递增，所以每个数二分找位置。O(n log n)。"""
    ops = ops if ops is not None else Counter()
    tails: list = []
    for x in nums:
        lo, hi = 0, len(tails)        # 找第一个 >= x 的位置（lower_bound）：严格递增；要“不减”就找第一个 > x
        while lo < hi:
            mid = (lo + hi) // 2
            ops["cmp"] += 1
            if tails[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(tails):
            tails.append(x)           # 比所有结尾都大：最长长度加 1
        else:
            tails[lo] = x             # 同样长度、更小的结尾：以后更容易接上
    return len(tails)
# --8<-- [end:lis]
