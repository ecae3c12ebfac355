"""二叉树：递归与迭代的前序、中序、后序遍历，层序遍历，二叉搜索树的查找、插入、删除，最近公共祖先。

ops（collections.Counter）记入栈或访问的节点数、BST 下降的步数；测试用它验证“每个节点恰好一次”与 O(h)。
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass


@dataclass(eq=False)              # 按身份比较节点：值可以重复
class TreeNode:
    val: int
    left: TreeNode | None = None
    right: TreeNode | None = None


def from_level_order(vals: list) -> TreeNode | None:
    """LeetCode 的层序表示：[3, 9, 20, None, None, 15, 7]，None 表示空孩子。"""
    if not vals or vals[0] is None:
        return None
    root = TreeNode(vals[0])
    queue, i = deque([root]), 1
    while queue and i < len(vals):
        node = queue.popleft()
        for side in ("left", "right"):
            if i < len(vals) and vals[i] is not None:
                child = TreeNode(vals[i])
                setattr(node, side, child)
                queue.append(child)
            i += 1
    return root


# --8<-- [start:recursive]
def traverse_rec(root: TreeNode | None, order: str = "pre") -> list:
    """递归的前序（根左右）、中序（左根右）、后序（左右根）：三者只差“访问自己”放在哪一行。"""
    out: list = []

    def go(node: TreeNode | None) -> None:   # 递归深度等于树高：退化成链的树会撞上 Python 的递归上限
        if node is None:
            return
        if order == "pre":
            out.append(node.val)
        go(node.left)
        if order == "in":
            out.append(node.val)
        go(node.right)
        if order == "post":
            out.append(node.val)

    go(root)
    return out
# --8<-- [end:recursive]


# --8<-- [start:iterative]
def preorder_iter(root: TreeNode | None, ops: Counter | None = None) -> list:
    ops = ops if ops is not None else Counter()
    out, stack = [], [root] if root else []
    ops["push"] += len(stack)
    while stack:
        node = stack.pop()
        out.append(node.val)
        for child in (node.right, node.left):   # 先压右孩子，左孩子才会先出栈
            if child:
                stack.append(child)
                ops["push"] += 1
    return out


def inorder_iter(root: TreeNode | None, ops: Counter | None = None) -> list:
    ops = ops if ops is not None else Counter()
    out, stack, node = [], [], root
    while node or stack:
        while node:                   # 一路向左压栈
            stack.append(node)
            ops["push"] += 1
            node = node.left
        node = stack.pop()            # 左子树已空或已访问完：访问自己，再转向右子树
        out.append(node.val)
        node = node.right
    return out


def postorder_iter(root: TreeNode | None, ops: Counter | None = None) -> list:
    ops = ops if ops is not None else Counter()
    out, stack, node, prev = [], [], root, None
    while node or stack:
        while node:
            stack.append(node)
            ops["push"] += 1
            node = node.left
        top = stack[-1]
        if top.right and top.right is not prev:   # 右子树还没访问：先去右边
            node = top.right
        else:                                     # 右子树为空或刚访问完（prev 就是它的根）：轮到自己
            out.append(top.val)
            prev = stack.pop()
    return out


def level_order(root: TreeNode | None) -> list[list]:
    """按层返回：队列里始终是“当前层”，一次取完 len(queue) 个就是一层。"""
    out, queue = [], deque([root] if root else [])
    while queue:
        level = []
        for _ in range(len(queue)):
            node = queue.popleft()
            level.append(node.val)
            queue.extend(c for c in (node.left, node.right) if c)
        out.append(level)
    return out
# --8<-- [end:iterative]


# --8<-- [start:bst]
def bst_search(root: TreeNode | None, key, ops: Counter | None = None) -> TreeNode | None:
    ops = ops if ops is not None else Counter()
    node = root
    while node and node.val != key:   # 每步下降一层：O(h)，随机插入时 h = O(log n)，有序插入时 h = n
        ops["step"] += 1
        node = node.left if key < node.val else node.right
    return node


def bst_insert(root: TreeNode | None, key, ops: Counter | None = None) -> TreeNode:
    """迭代插入，已存在的键忽略。返回根（空树时新节点就是根）。"""
    ops = ops if ops is not None else Counter()
    if root is None:
        return TreeNode(key)
    node = root
    while True:
        ops["step"] += 1
        if key == node.val:
            return root
        side = "left" if key < node.val else "right"
        child = getattr(node, side)
        if child is None:
            setattr(node, side, TreeNode(key))
            return root
        node = child


def bst_delete(root: TreeNode | None, key) -> TreeNode | None:
    """三种情形：叶子直接删；一个孩子就让孩子顶替；两个孩子就用中序后继（右子树最小者）的值覆盖，再删后继。"""
    parent, node = None, root
    while node and node.val != key:
        parent, node = node, (node.left if key < node.val else node.right)
    if node is None:
        return root
    if node.left and node.right:
        sp, s = node, node.right
        while s.left:
            sp, s = s, s.left
        node.val = s.val
        parent, node = sp, s          # 后继没有左孩子：转成“至多一个孩子”的情形
    child = node.left or node.right
    if parent is None:
        return child
    if parent.left is node:
        parent.left = child
    else:
        parent.right = child
    return root


def is_valid_bst(root: TreeNode | None) -> bool:
    """中序序列严格递增。只比较父子是常见错误：右子树深处的节点也必须大于祖先。"""
    prev = None
    for v in inorder_iter(root):
        if prev is not None and not prev < v:
            return False
        prev = v
    return True
# --8<-- [end:bst]


# --8<-- [start:lca]
def lca(root: TreeNode | None, p: TreeNode, q: TreeNode) -> TreeNode | None:
    """普通二叉树，p、q 都在树中。递归返回“这棵子树里找到的 p、q 或它们的 LCA”：左右都非空时自己就是 LCA。"""
    if root is None or root is p or root is q:
        return root
    left, right = lca(root.left, p, q), lca(root.right, p, q)
    if left and right:
        return root
    return left or right


def lca_iter(root: TreeNode, p: TreeNode, q: TreeNode) -> TreeNode:
    """迭代版：记下每个节点的父节点，把 p 的祖先放进集合，再从 q 往上走到第一个公共祖先。O(n) 时间与空间，不怕树深。"""
    parent: dict[int, TreeNode | None] = {id(root): None}
    stack = [root]
    while id(p) not in parent or id(q) not in parent:
        node = stack.pop()
        for c in (node.left, node.right):
            if c:
                parent[id(c)] = node
                stack.append(c)
    ancestors = set()
    while p:
        ancestors.add(id(p))
        p = parent[id(p)]
    while id(q) not in ancestors:
        q = parent[id(q)]
    return q


def lca_bst(root: TreeNode, p: int, q: int) -> TreeNode:
    """BST 里靠大小关系：p、q 都小就往左、都大就往右，否则当前节点把它们分开，就是 LCA。O(h)。"""
    node = root
    while True:
        if p < node.val and q < node.val:
            node = node.left
        elif p > node.val and q > node.val:
            node = node.right
        else:
            return node
# --8<-- [end:lca]
