"""回溯：全排列（含重复元素的去重剪枝）、子集（含重复元素）、组合总和（可重复选取）、N 皇后。

ops（collections.Counter）的 "node" 记搜索树上访问的节点数（每次进入 backtrack 算一个），
测试拿它对照节点数的公式（全排列 sum n!/(n-k)!、子集 2^n），并比较剪枝前后的节点数。
"""
from __future__ import annotations

from collections import Counter


# --8<-- [start:permutations]
def permutations_unique(nums: list, ops: Counter | None = None) -> list[list]:
    """不重复的全排列。先排序，让相等的值相邻；同一层里，相等的值只让“第一个还没用过的副本”出场。"""
    ops = ops if ops is not None else Counter()
    nums = sorted(nums)
    used, path, out = [False] * len(nums), [], []

    def backtrack() -> None:
        ops["node"] += 1
        if len(path) == len(nums):
            out.append(path[:])               # 拷贝：path 之后还会被修改
            return
        for i, x in enumerate(nums):
            if used[i]:
                continue
            if i > 0 and x == nums[i - 1] and not used[i - 1]:
                continue                      # 前一个相等的副本没用：这个分支与它那个分支完全相同，剪掉
            used[i] = True                    # 做选择
            path.append(x)
            backtrack()
            path.pop()                        # 撤销选择：回到进入前的状态
            used[i] = False

    backtrack()
    return out
# --8<-- [end:permutations]


# --8<-- [start:subsets]
def subsets_unique(nums: list, ops: Counter | None = None) -> list[list]:
    """不重复的子集。每个节点本身就是一个子集；从 start 往后选，保证元素按下标递增、不会重复计数。"""
    ops = ops if ops is not None else Counter()
    nums = sorted(nums)
    path, out = [], []

    def backtrack(start: int) -> None:
        ops["node"] += 1
        out.append(path[:])
        for i in range(start, len(nums)):
            if i > start and nums[i] == nums[i - 1]:
                continue                      # 同一层相等的值只选第一个
            path.append(nums[i])
            backtrack(i + 1)
            path.pop()

    backtrack(0)
    return out
# --8<-- [end:subsets]


# --8<-- [start:combination-sum]
def combination_sum(candidates: list[int], target: int, ops: Counter | None = None) -> list[list[int]]:
    """正整数、互不相同、每个可选任意次，和为 target 的所有组合（hello-algo 的“子集和问题”）。"""
    ops = ops if ops is not None else Counter()
    cands = sorted(candidates)
    path, out = [], []

    def backtrack(start: int, remain: int) -> None:
        ops["node"] += 1
        if remain == 0:
            out.append(path[:])
            return
        for i in range(start, len(cands)):    # 从 start 开始（而不是 0）：[2,3] 与 [3,2] 只生成一次
            if cands[i] > remain:
                break                         # 已排序：后面的更大，整段剪掉
            path.append(cands[i])
            backtrack(i, remain - cands[i])   # 传 i 而不是 i + 1：同一个数可以再选
            path.pop()

    backtrack(0, target)
    return out
# --8<-- [end:combination-sum]


# --8<-- [start:queens]
def n_queens(n: int, ops: Counter | None = None) -> list[list[int]]:
    """每行放一个皇后，返回每个解里各行皇后所在的列。列、主对角线（r - c）、副对角线（r + c）各用一个集合 O(1) 判冲突。"""
    ops = ops if ops is not None else Counter()
    cols, diag, anti, path, out = set(), set(), set(), [], []

    def backtrack(r: int) -> None:
        ops["node"] += 1
        if r == n:
            out.append(path[:])
            return
        for c in range(n):
            if c in cols or r - c in diag or r + c in anti:
                continue                      # 剪枝：与已放的皇后冲突，这棵子树里不可能有解
            cols.add(c)
            diag.add(r - c)
            anti.add(r + c)
            path.append(c)
            backtrack(r + 1)
            cols.remove(c)
            diag.remove(r - c)
            anti.remove(r + c)
            path.pop()

    backtrack(0)
    return out


def n_queens_unpruned(n: int, ops: Counter | None = None) -> int:
    """对照：每行任意放，放满 n 行再检查。搜索树有 (n^(n+1) - 1)/(n - 1) 个节点。"""
    ops = ops if ops is not None else Counter()
    path: list[int] = []

    def ok() -> bool:
        return all(path[i] != path[j] and abs(path[i] - path[j]) != j - i
                   for i in range(n) for j in range(i + 1, n))

    def backtrack(r: int) -> int:
        ops["node"] += 1
        if r == n:
            return int(ok())
        total = 0
        for c in range(n):
            path.append(c)
            total += backtrack(r + 1)
            path.pop()
        return total

    return backtrack(0)
# --8<-- [end:queens]
