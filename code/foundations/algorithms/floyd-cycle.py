"""链表判环：Floyd 快慢指针返回环的入口与环长，额外空间 O(1)；哈希集合版本作对照。"""
from __future__ import annotations


class Node:
    __slots__ = ("val", "next")

    def __init__(self, val):
        self.val = val
        self.next = None


def build(n: int, entry: int | None) -> tuple[Node | None, list[Node]]:
    """n 个节点的链表；entry 不为 None 时，尾节点指回第 entry 个节点。"""
    nodes = [Node(i) for i in range(n)]
    for a, b in zip(nodes, nodes[1:]):
        a.next = b
    if nodes and entry is not None:
        nodes[-1].next = nodes[entry]
    return (nodes[0] if nodes else None), nodes


# --8<-- [start:floyd]
def find_cycle(head: Node | None) -> tuple[Node, int, int] | None:
    """返回（入口节点，环长，第一阶段的迭代次数）；无环返回 None。

    记表头到入口 a 步、环长 c、相遇点在入口之后 b 步。相遇时慢指针走了 a + b 步，
    快指针走了 2(a + b) 步，多出来的 a + b 步是在环上整圈绕行：a + b = k*c，k >= 1。
    所以 a = k*c - b：从相遇点再走 a 步，恰好回到入口（先走 c - b 步到入口，再绕 k - 1 圈）。
    """
    slow = fast = head
    steps = 0
    while fast is not None and fast.next is not None:
        slow, fast = slow.next, fast.next.next
        steps += 1
        if slow is fast:
            p = head
            while p is not slow:  # 同速前进 a 步后在入口相遇
                p, slow = p.next, slow.next
            length, q = 1, p.next
            while q is not p:  # 从入口绕一圈数出环长
                q, length = q.next, length + 1
            return p, length, steps
    return None
# --8<-- [end:floyd]


def find_cycle_hashset(head: Node | None) -> Node | None:
    """直观但要 O(n) 额外空间：第一个再次遇到的节点就是入口。"""
    seen = set()
    p = head
    while p is not None:
        if id(p) in seen:
            return p
        seen.add(id(p))
        p = p.next
    return None


if __name__ == "__main__":
    head, nodes = build(8, 3)
    entry, length, _ = find_cycle(head)
    assert entry is nodes[3] and length == 5
    assert find_cycle(build(8, None)[0]) is None
    print("ok")
