"""红黑树（按《算法导论》的自底向上写法）：插入、删除，并统计每次操作的旋转与向上修复的次数。

用来验证三件事：高度不超过 2*log2(n+1)；插入最多 2 次旋转、删除最多 3 次；
只插入时，“向上移两层”的重新着色（插入修复的情形 1）总次数不超过插入次数，即均摊 O(1)。
"""
from __future__ import annotations

import math

RED, BLACK = True, False


class _Node:
    __slots__ = ("key", "color", "left", "right", "parent")

    def __init__(self, key, color, nil):
        self.key, self.color = key, color
        self.left = self.right = self.parent = nil


class RBTree:
    def __init__(self):
        self.nil = _Node(None, BLACK, None)  # 哨兵：所有空叶子共用这一个黑色节点
        self.nil.left = self.nil.right = self.nil.parent = self.nil
        self.root = self.nil
        self.size = 0
        self.rotations = 0       # 最近一次操作的旋转次数
        self.recolor_steps = 0   # 最近一次操作中“修复点上移”的次数（不终止的情形）
        self.total_recolor_steps = 0

    # ------------------------------------------------------------------ 查找与旋转
    def search(self, key) -> bool:
        x = self.root
        while x is not self.nil and x.key != key:
            x = x.left if key < x.key else x.right
        return x is not self.nil

    def _rotate_left(self, x):
        y = x.right
        x.right = y.left
        if y.left is not self.nil:
            y.left.parent = x
        y.parent = x.parent
        if x.parent is self.nil:
            self.root = y
        elif x is x.parent.left:
            x.parent.left = y
        else:
            x.parent.right = y
        y.left, x.parent = x, y
        self.rotations += 1

    def _rotate_right(self, x):
        y = x.left
        x.left = y.right
        if y.right is not self.nil:
            y.right.parent = x
        y.parent = x.parent
        if x.parent is self.nil:
            self.root = y
        elif x is x.parent.right:
            x.parent.right = y
        else:
            x.parent.left = y
        y.right, x.parent = x, y
        self.rotations += 1

    # ------------------------------------------------------------------ 插入
    # --8<-- [start:insert]
    def insert(self, key) -> None:
        self.rotations = self.recolor_steps = 0
        z = _Node(key, RED, self.nil)  # 新节点总是红色：不改变任何路径的黑高
        y, x = self.nil, self.root
        while x is not self.nil:  # 普通 BST 插入：O(h) 次比较
            y = x
            x = x.left if key < x.key else x.right
        z.parent = y
        if y is self.nil:
            self.root = z
        elif key < y.key:
            y.left = z
        else:
            y.right = z
        self.size += 1
        # 唯一可能被破坏的是“红节点不相邻”：z 与父节点都红
        while z.parent.color is RED:
            p = z.parent
            g = p.parent
            left = p is g.left
            uncle = g.right if left else g.left
            if uncle.color is RED:  # 情形 1：只重新着色，问题上移两层，可能一直到根
                p.color = uncle.color = BLACK
                g.color = RED
                z = g
                self.recolor_steps += 1
                continue
            if z is (p.right if left else p.left):  # 情形 2：先转成情形 3（1 次旋转）
                z = p
                (self._rotate_left if left else self._rotate_right)(z)
                p = z.parent
            p.color, g.color = BLACK, RED  # 情形 3：1 次旋转后结束
            (self._rotate_right if left else self._rotate_left)(g)
        self.root.color = BLACK
        self.total_recolor_steps += self.recolor_steps
    # --8<-- [end:insert]

    # ------------------------------------------------------------------ 删除
    def _transplant(self, u, v):
        if u.parent is self.nil:
            self.root = v
        elif u is u.parent.left:
            u.parent.left = v
        else:
            u.parent.right = v
        v.parent = u.parent

    def _minimum(self, x):
        while x.left is not self.nil:
            x = x.left
        return x

    def delete(self, key) -> bool:
        self.rotations = self.recolor_steps = 0
        z = self.root
        while z is not self.nil and z.key != key:
            z = z.left if key < z.key else z.right
        if z is self.nil:
            return False
        y, y_color = z, z.color
        if z.left is self.nil:
            x = z.right
            self._transplant(z, z.right)
        elif z.right is self.nil:
            x = z.left
            self._transplant(z, z.left)
        else:
            y = self._minimum(z.right)  # 后继顶替 z 的位置与颜色
            y_color = y.color
            x = y.right
            if y.parent is z:
                x.parent = y
            else:
                self._transplant(y, y.right)
                y.right = z.right
                y.right.parent = y
            self._transplant(z, y)
            y.left = z.left
            y.left.parent = y
            y.color = z.color
        self.size -= 1
        if y_color is BLACK:  # 移走了一个黑节点：x 所在路径少了一个黑色，需要修复
            self._delete_fixup(x)
        self.total_recolor_steps += self.recolor_steps
        return True

    def _delete_fixup(self, x):
        while x is not self.root and x.color is BLACK:
            left = x is x.parent.left
            w = x.parent.right if left else x.parent.left  # 兄弟
            if w.color is RED:  # 情形 1：旋转一次，把兄弟变成黑色，转入 2/3/4
                w.color, x.parent.color = BLACK, RED
                (self._rotate_left if left else self._rotate_right)(x.parent)
                w = x.parent.right if left else x.parent.left
            near, far = (w.left, w.right) if left else (w.right, w.left)
            if near.color is BLACK and far.color is BLACK:  # 情形 2：兄弟染红，问题上移一层
                w.color = RED
                x = x.parent
                self.recolor_steps += 1
                continue
            if far.color is BLACK:  # 情形 3：旋转一次转成情形 4
                near.color, w.color = BLACK, RED
                (self._rotate_right if left else self._rotate_left)(w)
                w = x.parent.right if left else x.parent.left
                far = w.right if left else w.left
            w.color, x.parent.color, far.color = x.parent.color, BLACK, BLACK  # 情形 4：旋转一次后结束
            (self._rotate_left if left else self._rotate_right)(x.parent)
            x = self.root
        x.color = BLACK

    # ------------------------------------------------------------------ 检查
    def height(self) -> int:
        """根到最深叶子的节点数（空树为 0）。"""
        def h(x):
            return 0 if x is self.nil else 1 + max(h(x.left), h(x.right))
        return h(self.root)

    def validate(self) -> int:
        """检查全部红黑性质与 BST 次序，返回根的黑高。"""
        assert self.root.color is BLACK and self.nil.color is BLACK

        def walk(x, lo, hi):
            if x is self.nil:
                return 1
            assert (lo is None or lo < x.key) and (hi is None or x.key < hi)
            if x.color is RED:
                assert x.left.color is BLACK and x.right.color is BLACK
            bl, br = walk(x.left, lo, x.key), walk(x.right, x.key, hi)
            assert bl == br, "black heights differ"
            return bl + (x.color is BLACK)
        return walk(self.root, None, None)


def height_bound(n: int) -> float:
    return 2 * math.log2(n + 1)


if __name__ == "__main__":
    t = RBTree()
    for k in range(1, 1024):  # 顺序插入：普通 BST 会退化成高度 1023 的链表
        t.insert(k)
        assert t.rotations <= 2
    t.validate()
    print("n =", t.size, "height =", t.height(), "bound =", round(height_bound(t.size), 2))
    assert t.height() <= height_bound(t.size)
