"""两数之和：一次遍历加哈希表，期望 O(n) 时间、O(n) 空间；有序数组用双指针，O(1) 额外空间。"""
from __future__ import annotations


# --8<-- [start:hash]
def two_sum(nums: list[int], target: int) -> tuple[int, int] | None:
    """返回下标 (i, j)，i < j 且 nums[i] + nums[j] == target；不存在时返回 None。"""
    seen: dict[int, int] = {}  # 值 -> 最近一次出现的下标
    for j, x in enumerate(nums):
        i = seen.get(target - x)
        if i is not None:
            return i, j
        seen[x] = j  # 先查后存：同一个元素不会和自己配对
    return None
# --8<-- [end:hash]


# --8<-- [start:two-pointers]
def two_sum_sorted(nums: list[int], target: int) -> tuple[int, int] | None:
    """nums 已按升序排好。和偏小就右移左指针，偏大就左移右指针：每步排除一个不可能的元素。"""
    lo, hi = 0, len(nums) - 1
    while lo < hi:
        s = nums[lo] + nums[hi]
        if s == target:
            return lo, hi
        if s < target:
            lo += 1
        else:
            hi -= 1
    return None
# --8<-- [end:two-pointers]


if __name__ == "__main__":
    assert two_sum([2, 7, 11, 15], 9) == (0, 1)
    assert two_sum([3, 3], 6) == (0, 1)
    assert two_sum([3], 6) is None
    assert two_sum_sorted([1, 2, 4, 7, 11], 15) == (2, 4)
    print("ok")
