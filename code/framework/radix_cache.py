"""A token-level radix tree of cached KV, in the style of SGLang's RadixAttention
(docs/framework/serving-systems.md). Each edge holds a run of tokens; a node's KV is reusable by any
request whose prompt starts with the path to it. Leaves no running request holds are evicted LRU."""
from __future__ import annotations

import itertools

_clock = itertools.count()


# --8<-- [start:radix]
class Node:
    def __init__(self, key: tuple[int, ...] = (), parent: "Node | None" = None):
        self.key, self.parent = key, parent  # tokens on the edge from parent
        self.children: dict[int, Node] = {}  # first token of child edge -> child
        self.lock = 0  # running requests using this node
        self.last_use = next(_clock)


class RadixCache:
    def __init__(self):
        self.root = Node()
        self.size = 0  # cached tokens

    def match_prefix(self, tokens) -> tuple[int, Node]:
        """Length of the longest cached prefix of `tokens`, and the node where it ends."""
        node, i = self.root, 0
        while i < len(tokens) and tokens[i] in node.children:
            child = node.children[tokens[i]]
            n = _common(child.key, tokens[i:])
            if n < len(child.key):  # match ends inside an edge: split it so a node ends there
                child = self._split(child, n)
            node, i = child, i + n
            node.last_use = next(_clock)
        return i, node

    def insert(self, tokens) -> int:
        """Cache the KV of `tokens`; returns how many tokens were new."""
        matched, node = self.match_prefix(tokens)
        rest = tuple(tokens[matched:])
        if rest:
            node.children[rest[0]] = Node(rest, node)
            self.size += len(rest)
        return len(rest)

    def _split(self, child: Node, n: int) -> Node:
        mid = Node(child.key[:n], child.parent)
        mid.lock = child.lock
        child.parent.children[child.key[0]] = mid
        child.key, child.parent = child.key[n:], mid
        mid.children[child.key[0]] = child
        return mid

    def lock(self, node: Node, delta: int) -> None:
        """A running request pins (+1) or releases (-1) the path from node to the root."""
        while node is not self.root:
            node.lock += delta
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Free at least num_tokens by removing unlocked leaves, least recently used first."""
        freed = 0
        while freed < num_tokens:
            leaves = [n for n in self._nodes() if not n.children and n.lock == 0 and n is not self.root]
            if not leaves:
                break
            victim = min(leaves, key=lambda n: n.last_use)
            del victim.parent.children[victim.key[0]]
            freed += len(victim.key)
            self.size -= len(victim.key)
        return freed

    def _nodes(self):
        stack = [self.root]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())


def _common(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
# --8<-- [end:radix]


# --8<-- [start:lpm]
def longest_prefix_first(cache: RadixCache, waiting: list[list[int]]) -> list[list[int]]:
    """SGLang's 'lpm' policy: admit the requests that reuse the most cached tokens first."""
    return sorted(waiting, key=lambda toks: -cache.match_prefix(toks)[0])
# --8<-- [end:lpm]
